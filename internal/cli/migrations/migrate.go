package migrations

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/norsk-go/norsk-manager/internal/cli/cmdutil"
	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

// ParseStrategy reads --strategy.
func ParseStrategy(s string) (norsk.MigrationStrategy, error) {
	switch strings.ToLower(strings.ReplaceAll(s, "-", "")) {
	case "", "stopthenstart":
		return norsk.StrategyStopThenStart, nil
	case "overlap":
		return norsk.StrategyOverlap, nil
	case "handover":
		return norsk.StrategyHandover, nil
	}
	return 0, cmdutil.UsageErrorf("--strategy %q: want stopThenStart, overlap or handover", s)
}

func migrationTerminal(p norsk.MigrationPhase) bool {
	return p == norsk.PhaseDone || p == norsk.PhaseAborted
}

// NewMigrateCommand is `norsk-ctl migrate JOB`.
func NewMigrateCommand(g *cmdutil.Globals) *cobra.Command {
	var (
		opts     norsk.MigrateOptions
		strategy string
		w        cmdutil.WaitFlags
	)
	c := &cobra.Command{
		Use:         "migrate JOB",
		Annotations: cmdutil.WithIDFlags(cmdutil.TakesIDs("job"), "to=node"),
		Short:       "Move a running job to another node, following each phase as it happens",
		Long: `Move a running, AutoManager-placed job to another node (the migration saga):
--strategy stopThenStart (the default: the target is created but not
started, the source stopped, then the target started — a short gap),
overlap (the target runs before the source stops — no gap, a moment of
both), or handover (the source hands its state to the target over the job
socket and output cuts over at a point both agree on — no gap, no overlap;
both workers need --job-socket and the job must speak the protocol, see
docs/job-socket.md). --to pins the target node; otherwise placement chooses,
the job's node excluded.

The command prints each phase as it happens and ends when the migration is
done (exit 0) or aborted (exit 1, with why); --no-wait returns once the
Manager has accepted it, --wait-timeout bounds the following.

The default strategy is the seed's for migrateJob, stopThenStart: it works
for every job. A drain (norsk-ctl node drain) moves many jobs at once and
defaults to make-before-break instead, since a node's whole load should not
go dark together. Past the point of no return (stoppingSource)
a migration can no longer be aborted: it completes, or falls back into
ordinary recovery.`,
		Example: `  norsk-ctl migrate news.channel.0 --strategy handover
  norsk-ctl migrate news.channel.0 --to encoder-7`,
		Args: cmdutil.ExactArgs("JOB"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := w.Check(cmd); err != nil {
				return err
			}
			s, err := ParseStrategy(strategy)
			if err != nil {
				return err
			}
			opts.Strategy = s
			// A target the Manager does not know is not a NOT_FOUND (the
			// saga aborts on it), so --to is resolved before the call.
			if _, err := cmdutil.ResolveIDs(g, cmd, nil); err != nil {
				return err
			}
			m, err := g.Manager(cmd.Context())
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), max(g.Timeout, 3*time.Minute))
			st, err := m.MigrateJob(ctx, args[0], opts)
			cancel()
			if err != nil {
				return fmt.Errorf("migrate %s: %w", args[0], err)
			}
			if !w.Waiting() {
				return g.Printer().Print(cmdutil.Result{Data: st, Table: func(w io.Writer) { migrationTable(w, g.Now(), st) }})
			}
			p := g.Printer()
			st, err = followMigration(g, cmd.Context(), m, st, w.Timeout, func(st *norsk.MigrationState, entry int) {
				if _, ok := p.(*cmdutil.TablePrinter); ok {
					printPhaseLine(g.Out, st, entry)
				}
			})
			if err != nil {
				return err
			}
			if err := p.Print(cmdutil.Result{Data: st, Table: func(w io.Writer) {
				fmt.Fprintln(w)
				migrationSummary(w, st)
			}}); err != nil {
				return err
			}
			if st.GetPhase() == norsk.PhaseAborted {
				return fmt.Errorf("migration %s aborted: %s", st.GetMigrationId(), st.GetAbortReason())
			}
			return nil
		},
	}
	f := c.Flags()
	f.StringVar(&opts.TargetNodeID, "to", "", "the target node (default: placement chooses)")
	f.StringVar(&strategy, "strategy", "stopThenStart", "stopThenStart, overlap or handover")
	f.StringVar(&opts.SourceRole, "source-role", "", "the source instance key (default: the job's current one)")
	f.BoolVar(&opts.OverrideReservation, "override-reservation", false, "let the target onto an exclusively reserved hot spare")
	w.Add(c, "the migration, printing each phase, until it is done or aborted", 10*time.Minute)
	cmdutil.CompleteEnum(c, "strategy", "stopThenStart", "overlap", "handover")
	_ = c.RegisterFlagCompletionFunc("to", g.CompleteNodeIDs)
	return c
}

// printPhaseLine prints phase history entry i of st, one line.
func printPhaseLine(w io.Writer, st *norsk.MigrationState, i int) {
	h := st.GetPhaseHistory()
	e := h[i]
	since := e.GetAt().AsTime().Sub(st.GetStartedAt().AsTime())
	detail := ""
	switch e.GetPhase() {
	case norsk.PhasePlacing:
		if st.GetRequestedTargetNodeId() != "" {
			detail = "target " + st.GetRequestedTargetNodeId() + " (named)"
		}
	case norsk.PhaseLaunching:
		detail = fmt.Sprintf("target %s on %s", st.GetTargetRole(), st.GetTargetNodeId())
	case norsk.PhaseStoppingSource:
		detail = fmt.Sprintf("point of no return: stopping %s on %s", st.GetSourceRole(), st.GetSourceNodeId())
	case norsk.PhaseDone:
		detail = fmt.Sprintf("the job runs on %s as %s", st.GetTargetNodeId(), st.GetTargetRole())
	case norsk.PhaseAborted:
		detail = st.GetAbortReason()
	}
	fmt.Fprintf(w, "%s  +%-8s %-22s %s\n", e.GetAt().AsTime().Local().Format("15:04:05.000"), cmdutil.FmtDur(since), norsk.PhaseName(e.GetPhase()), detail)
}

// followMigration follows the event stream from the record's revision
// until the migration is done or aborted (calling phase for each new phase
// entry, the ones already recorded included) and returns its last record.
func followMigration(g *cmdutil.Globals, ctx context.Context, m *norsk.Manager, st *norsk.MigrationState, timeout time.Duration, phase func(*norsk.MigrationState, int)) (*norsk.MigrationState, error) {
	shown := 0
	show := func(st *norsk.MigrationState) {
		for ; shown < len(st.GetPhaseHistory()); shown++ {
			if phase != nil {
				phase(st, shown)
			}
		}
	}
	show(st)
	if migrationTerminal(st.GetPhase()) {
		return st, nil
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	s := m.EventStream(ctx, norsk.EventStreamSettings{AfterIndex: st.GetRevision()})
	defer s.Close()
	for s.Next() {
		u := s.Event().GetMigrationUpdated()
		if u == nil || u.GetMigrationId() != st.GetMigrationId() || u.GetRevision() < st.GetRevision() {
			continue
		}
		st = u
		show(st)
		if migrationTerminal(st.GetPhase()) {
			return st, nil
		}
	}
	err := s.Err()
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded) || errors.Is(err, norsk.ErrDeadlineExceeded):
		return st, fmt.Errorf("migration %s still in flight after %s (phase %s); follow it with 'norsk-ctl migration show %s'", st.GetMigrationId(), timeout, norsk.PhaseName(st.GetPhase()), st.GetMigrationId())
	case err != nil:
		return st, fmt.Errorf("following migration %s: %w", st.GetMigrationId(), err)
	}
	return st, fmt.Errorf("the event stream ended while following migration %s", st.GetMigrationId())
}

// migrationSummary is the end of a followed migration.
func migrationSummary(w io.Writer, st *norsk.MigrationState) {
	took := st.GetUpdatedAt().AsTime().Sub(st.GetStartedAt().AsTime())
	switch st.GetPhase() {
	case norsk.PhaseDone:
		fmt.Fprintf(w, "Migration %s done in %s: %s moved from %s to %s (%s, now %s)\n", st.GetMigrationId(), cmdutil.FmtDur(took),
			st.GetSourceJobId(), st.GetSourceNodeId(), st.GetTargetNodeId(), norsk.StrategyName(st.GetStrategy()), st.GetTargetRole())
	case norsk.PhaseAborted:
		fmt.Fprintf(w, "Migration %s aborted after %s: %s\n", st.GetMigrationId(), cmdutil.FmtDur(took), st.GetAbortReason())
	default:
		fmt.Fprintf(w, "Migration %s is %s\n", st.GetMigrationId(), norsk.PhaseName(st.GetPhase()))
	}
	if sum := st.GetApplySummary(); sum != nil {
		fmt.Fprintf(w, "  applied: %s; skew %.0f ms\n", strings.Join(sum.GetApplied(), ", "), sum.GetSkewMs())
		for _, f := range sum.GetFailed() {
			fmt.Fprintf(w, "  NOT applied: %s (%s)\n", f.GetId(), f.GetReason())
		}
	}
}

// migrationTable shows one migration.
func migrationTable(w io.Writer, now time.Time, st *norsk.MigrationState) {
	fmt.Fprintf(w, "Migration\t%s\n", st.GetMigrationId())
	fmt.Fprintf(w, "Job\t%s\n", st.GetSourceJobId())
	fmt.Fprintf(w, "Strategy\t%s\n", norsk.StrategyName(st.GetStrategy()))
	fmt.Fprintf(w, "Phase\t%s\n", norsk.PhaseName(st.GetPhase()))
	fmt.Fprintf(w, "Source\t%s on %s\n", st.GetSourceRole(), st.GetSourceNodeId())
	target := st.GetTargetNodeId()
	if target == "" {
		target = "(not placed)"
	}
	fmt.Fprintf(w, "Target\t%s on %s\n", st.GetTargetRole(), target)
	fmt.Fprintf(w, "Started\t%s\n", cmdutil.Ago(now, st.GetStartedAt()))
	fmt.Fprintf(w, "Point of no return\t%v\n", st.GetPastPointOfNoReturn())
	if st.GetAbortReason() != "" {
		fmt.Fprintf(w, "Aborted\t%s\n", st.GetAbortReason())
	}
	if st.GetRequestedBy() != "" {
		fmt.Fprintf(w, "Requested by\t%s\n", st.GetRequestedBy())
	}
	if st.GetRepair() {
		fmt.Fprintf(w, "Repair\t%s\n", st.GetReason())
	} else if st.GetReason() != "" {
		fmt.Fprintf(w, "Reason\t%s\n", st.GetReason())
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "PHASE\tAT\tAFTER")
	for _, e := range st.GetPhaseHistory() {
		fmt.Fprintf(w, "%s\t%s\t+%s\n", norsk.PhaseName(e.GetPhase()), e.GetAt().AsTime().Local().Format("15:04:05.000"), cmdutil.FmtDur(e.GetAt().AsTime().Sub(st.GetStartedAt().AsTime())))
	}
}

// NewMigrationCommand is the migration group: list, show, abort, forget.
func NewMigrationCommand(g *cmdutil.Globals) *cobra.Command {
	cmd := cmdutil.NewGroup("migration", "List, inspect, abort and forget migrations")
	var job string
	list := &cobra.Command{
		Use:   "list",
		Short: "Every migration the Manager holds, newest first (in flight, done, aborted)",
		Args:  cmdutil.ExactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			all, err := cmdutil.Ask(g, cmd, func(ctx context.Context, m *norsk.Manager) ([]*norsk.MigrationState, error) {
				return m.ListMigrations(ctx, job)
			}, "list migrations")
			if err != nil {
				return err
			}
			return g.Printer().Print(cmdutil.Result{Data: cmdutil.Messages(all), Table: func(w io.Writer) {
				fmt.Fprintln(w, "ID\tJOB\tSTRATEGY\tPHASE\tFROM\tTO\tSTARTED\tREASON")
				for _, st := range all {
					to := st.GetTargetNodeId()
					if to == "" {
						to = "-"
					}
					reason := st.GetAbortReason()
					if reason == "" {
						reason = "-"
					}
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", st.GetMigrationId(), st.GetSourceJobId(), norsk.StrategyName(st.GetStrategy()),
						norsk.PhaseName(st.GetPhase()), st.GetSourceNodeId(), to, cmdutil.Ago(g.Now(), st.GetStartedAt()), reason)
				}
			}, Wide: func(w io.Writer) { migrationsWideTable(w, g.Now(), all) }})
		},
	}
	cmdutil.Watchable(g, list)
	list.Flags().StringVar(&job, "job", "", "only this job's migrations")
	show := &cobra.Command{
		Use:               "show ID",
		ValidArgsFunction: g.CompleteMigrationIDs,
		Aliases:           []string{"get"},
		Short:             "One migration: its phases with their times, its source and target, why it aborted",
		Args:              cmdutil.ExactArgs("ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := cmdutil.ResolveMigrationArg(g, cmd, args); err != nil {
				return err
			}
			st, err := cmdutil.Ask(g, cmd, func(ctx context.Context, m *norsk.Manager) (*norsk.MigrationState, error) {
				return m.GetMigration(ctx, args[0])
			}, "show migration %s", args[0])
			if err != nil {
				return err
			}
			return g.Printer().Print(cmdutil.Result{Data: st, Table: func(w io.Writer) { migrationTable(w, g.Now(), st) }})
		},
	}
	var reason string
	abort := &cobra.Command{
		Use:               "abort ID",
		ValidArgsFunction: g.CompleteMigrationIDs,
		Short:             "Roll an in-flight migration back (refused past the point of no return)",
		Args:              cmdutil.ExactArgs("ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := cmdutil.ResolveMigrationArg(g, cmd, args); err != nil {
				return err
			}
			if _, err := cmdutil.Ask(g, cmd, func(ctx context.Context, m *norsk.Manager) (struct{}, error) {
				return struct{}{}, m.CancelMigration(ctx, args[0], reason)
			}, "abort migration %s", args[0]); err != nil {
				return err
			}
			return g.PrintDone("migration", args[0], "aborted")
		},
	}
	abort.Flags().StringVar(&reason, "reason", "aborted with norsk-ctl", "why (kept on the migration)")
	var allTerminal bool
	forget := &cobra.Command{
		Use:               "forget [ID] [--all-terminal]",
		ValidArgsFunction: g.CompleteMigrationIDs,
		Short:             "Delete a finished migration's record (or every done and aborted one)",
		Args: func(cmd *cobra.Command, args []string) error {
			if allTerminal == (len(args) == 1) || len(args) > 1 {
				return cmdutil.UsageErrorf("%s takes a migration ID or --all-terminal", cmd.CommandPath())
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if allTerminal {
				ids, err := cmdutil.Ask(g, cmd, func(ctx context.Context, m *norsk.Manager) ([]string, error) {
					return m.ForgetTerminalMigrations(ctx)
				}, "forget finished migrations")
				if err != nil {
					return err
				}
				return g.Printer().Print(cmdutil.Result{Data: map[string][]string{"migrationIds": ids}, Table: func(w io.Writer) {
					fmt.Fprintf(w, "Forgot %d finished migration(s)\n", len(ids))
				}})
			}
			if err := cmdutil.ResolveMigrationArg(g, cmd, args); err != nil {
				return err
			}
			ok, err := cmdutil.Ask(g, cmd, func(ctx context.Context, m *norsk.Manager) (bool, error) {
				return m.ForgetMigration(ctx, args[0])
			}, "forget migration %s", args[0])
			if err != nil {
				return err
			}
			if !ok { // a Manager from before unknown ids were NOT_FOUND
				return g.PrintDone("migration", args[0], "was not known")
			}
			return g.PrintDone("migration", args[0], "forgotten")
		},
	}
	forget.Flags().BoolVar(&allTerminal, "all-terminal", false, "forget every done and aborted migration")
	cmd.AddCommand(list, show, abort, forget)
	return cmd
}
