package bundles

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/norsk-go/norsk-manager/internal/cli/cmdutil"
	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

// NewBundleCommand is the bundle group: bundles (AutoManager v1), their
// replica jobs, stop times and leases.
func NewBundleCommand(g *cmdutil.Globals) *cobra.Command {
	cmd := cmdutil.NewGroup("bundle", "Create, inspect and drive bundles: jobs the AutoManager places and keeps running together, with replicas")
	cmd.Long = `A bundle is a workload of one or more jobs, each a template run once per
replica: replica 0 is the primary, 1 the backup, n replica-n. The Manager
expands it into jobs named <bundleId>.<jobName>.<replicaIndex> (tagged
bundleId, replicaIndex and jobName) and the AutoManager places them, keeping
replicas apart as the resilience policy asks. A job with startMode manual
stays dormant until "bundle start-job"; "bundle stop-job" stops a job and
keeps it down.`
	cmd.AddCommand(
		newBundleCreateCommand(g),
		newBundleUpdateCommand(g),
		cmdutil.Watchable(g, newBundleListCommand(g)),
		newBundleShowCommand(g),
		newBundleDeleteCommand(g),
		newBundleStartJobCommand(g),
		newBundleStopJobCommand(g),
		newBundleStopTimeCommand(g),
		newBundleRenewLeaseCommand(g),
	)
	return cmd
}

// readBundleSpec reads and decodes the bundle spec file name ("-" = stdin),
// by the rules job create applies to a job spec.
func readBundleSpec(g *cmdutil.Globals, name string) (*norsk.Bundle, error) {
	if name == "" {
		return nil, cmdutil.UsageErrorf("give the bundle spec with -f FILE (- for stdin)")
	}
	data, err := g.ReadInput(name, "the bundle spec")
	if err != nil {
		return nil, err
	}
	b, err := norsk.DecodeBundleSpec(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return b, nil
}

// BundleCreated is what bundle create and bundle update print.
type BundleCreated struct {
	BundleID string `json:"bundleId"`
	Revision string `json:"revision,omitempty"` // a decimal string, as protojson writes uint64
	// Notes say why a job of the bundle cannot run anywhere now (no node's
	// runtime runs its services): the bundle is stored all the same.
	Notes []string `json:"notes,omitempty"`
}

// bundleNotes reads the new bundle back and lists its jobs that no node's
// runtime can run, each with the reason the bundle's view gives. Best
// effort: a bundle that cannot be read back has no notes.
func bundleNotes(g *cmdutil.Globals, cmd *cobra.Command, id string) []string {
	bw, err := cmdutil.Ask(g, cmd, func(ctx context.Context, m *norsk.Manager) (*norsk.BundleWithJobs, error) {
		return m.BundleById(ctx, id)
	}, "read bundle %s", id)
	if err != nil {
		return nil
	}
	var out []string
	for _, j := range bw.GetJobs() {
		for _, d := range j.GetDegradations() {
			if strings.HasPrefix(d, "runtime: ") {
				out = append(out, fmt.Sprintf("job %s runs nowhere for now: %s", j.GetJobId(), strings.TrimPrefix(d, "runtime: ")))
			}
		}
	}
	return out
}

func newBundleCreateCommand(g *cmdutil.Globals) *cobra.Command {
	var (
		file string
		w    cmdutil.WaitFlags
	)
	cmd := &cobra.Command{
		Use:   "create -f FILE",
		Short: "Create a bundle from a YAML or JSON spec; its replica jobs are created with it",
		Long: `Create the bundle of a spec file, YAML or JSON, with the API's field names
(bundleId or bundle_id, resiliencePolicy, jobs[].jobName, jobs[].job, …) and
enum values in full (ANTI_AFFINITY_FORBID) or short (forbid), read as job
create reads a job spec. Without a bundleId the Manager makes one up. Prints
the bundle's id (-o json: {"bundleId"}). See examples/bundles/.

A bundle is a declaration: create returns once it is stored. With --wait it
follows the bundle until every replica job that is not dormant runs (the
AutoManager places them; a node lost meanwhile moves them), and fails when
one ends or --wait-timeout passes first.`,
		Example: `  norsk-ctl bundle create -f examples/bundles/resilient.yaml
  cat bundle.json | norsk-ctl bundle create -f -`,
		Args: cmdutil.ExactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := w.Check(cmd); err != nil {
				return err
			}
			b, err := readBundleSpec(g, file)
			if err != nil {
				return err
			}
			label := strings.TrimSpace("create bundle " + b.GetBundleId())
			id, err := cmdutil.Ask(g, cmd, func(ctx context.Context, m *norsk.Manager) (string, error) {
				return m.CreateBundle(ctx, b)
			}, "%s", label)
			if err != nil {
				return err
			}
			c := BundleCreated{BundleID: id, Notes: bundleNotes(g, cmd, id)}
			if err := g.Printer().Print(cmdutil.Result{Data: c, Table: func(w io.Writer) {
				fmt.Fprintf(w, "Bundle %s created (norsk-ctl bundle show %s).\n", id, id)
				for _, n := range c.Notes {
					fmt.Fprintf(w, "Note: %s\n", n)
				}
			}}); err != nil || !w.Waiting() {
				return err
			}
			fmt.Fprintf(g.ErrOut, "Waiting for the jobs of bundle %s to run…\n", id)
			return waitBundleRunning(g, cmd, id, w.Timeout)
		},
	}
	cmd.Flags().StringVarP(&file, "filename", "f", "", "the bundle spec (- for stdin)")
	// A bundle is a declaration (its jobs may be dormant, or wait for a
	// node): create returns once it is stored unless asked to follow.
	w.AddDefault(cmd, "the bundle until every replica job that is not dormant runs", 2*time.Minute, false)
	return cmd
}

// bundlePoll is how often bundle create --wait looks at the bundle.
const bundlePoll = 250 * time.Millisecond

// waitBundleRunning polls the bundle until every replica job that is not
// dormant runs; a job that ended, or the timeout, fails it with what is
// not running.
func waitBundleRunning(g *cmdutil.Globals, cmd *cobra.Command, id string, timeout time.Duration) error {
	if timeout <= 0 {
		return cmdutil.UsageErrorf("--wait-timeout must be positive")
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
	defer cancel()
	m, err := g.Manager(ctx)
	if err != nil {
		return err
	}
	tick := time.NewTicker(bundlePoll)
	defer tick.Stop()
	// known: what the last answer said is not running (a read the
	// deadline cuts short must not hide it).
	var known []string
	read := false
	for {
		cctx, ccancel := g.Call(ctx)
		bw, err := m.BundleById(cctx, id)
		ccancel()
		var waiting []string
		if err == nil {
			for _, j := range bw.GetJobs() {
				if t := j.GetTerminalState(); t != nil {
					return fmt.Errorf("bundle %s: job %s ended: %s %s", id, j.GetJobId(), cmdutil.EnumWord(t.GetKind()), t.GetReason())
				}
				if j.GetDormant() || (j.GetNodeId() != "" && j.GetPhase() == norsk.InstancePhaseRunning) {
					continue
				}
				where := "not placed"
				if j.GetNodeId() != "" {
					where = cmdutil.EnumWord(j.GetPhase()) + " on " + j.GetNodeId()
				}
				waiting = append(waiting, j.GetJobId()+" ("+where+")")
			}
			if len(waiting) == 0 {
				fmt.Fprintf(g.ErrOut, "Every job of bundle %s runs.\n", id)
				return nil
			}
			known, read = waiting, true
		}
		select {
		case <-ctx.Done():
			if cmd.Context().Err() != nil {
				return cmd.Context().Err()
			}
			if !read {
				return fmt.Errorf("bundle %s: gave up after %s: %w", id, timeout, err)
			}
			return fmt.Errorf("bundle %s: not every job runs after %s: %s", id, timeout, strings.Join(known, ", "))
		case <-tick.C:
		}
	}
}

func newBundleUpdateCommand(g *cmdutil.Globals) *cobra.Command {
	var (
		file     string
		revision uint64
	)
	cmd := &cobra.Command{
		Use:   "update -f FILE [--revision N]",
		Short: "Replace a bundle's spec: new jobs are created, removed ones deleted, changed ones rolled a replica at a time",
		Long: `Replace the spec of the bundle the file names (bundleId is required). With a
revision (the spec's revision, or --revision N: the revision "bundle show"
printed) the Manager applies it only if the bundle is still at that revision;
without one the update overwrites whatever changed since. Replica jobs new to
the bundle are created, jobs no longer in it are stopped and deleted, and
jobs whose template changed are rolled by the AutoManager one replica at a
time. Dormant marks, the stop time and the lease are kept. Prints the new
revision.`,
		Args: cmdutil.ExactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			b, err := readBundleSpec(g, file)
			if err != nil {
				return err
			}
			if b.GetBundleId() == "" {
				return fmt.Errorf("%s: the spec has no bundleId", file)
			}
			if cmd.Flags().Changed("revision") {
				b.Revision = revision
			}
			rev, err := cmdutil.Ask(g, cmd, func(ctx context.Context, m *norsk.Manager) (uint64, error) {
				return m.UpdateBundle(ctx, b)
			}, "update bundle %s", b.GetBundleId())
			if err != nil {
				return err
			}
			c := BundleCreated{BundleID: b.GetBundleId(), Revision: strconv.FormatUint(rev, 10)}
			return g.Printer().Print(cmdutil.Result{Data: c, Table: func(w io.Writer) {
				fmt.Fprintf(w, "Bundle %s updated: revision %d\n", c.BundleID, rev)
			}})
		},
	}
	cmd.Flags().StringVarP(&file, "filename", "f", "", "the bundle spec (- for stdin)")
	cmd.Flags().Uint64Var(&revision, "revision", 0, "the revision the update is based on (overrides the spec's; 0 = overwrite)")
	return cmd
}

func newBundleListCommand(g *cmdutil.Globals) *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List bundles: state, pool, replicas, jobs and how many replica jobs are placed",
		Args:  cmdutil.ExactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			list, err := cmdutil.Ask(g, cmd, func(ctx context.Context, m *norsk.Manager) ([]*norsk.BundleWithJobs, error) {
				return m.ListBundles(ctx)
			}, "list bundles")
			if err != nil {
				return err
			}
			return g.Printer().Print(cmdutil.Result{Data: cmdutil.Messages(list), Table: func(w io.Writer) { bundlesTable(w, list) },
				Wide: func(w io.Writer) { bundlesWideTable(w, g.Now(), list) }})
		},
	}
}

// bundleReplicas is how many replicas a bundle's view shows.
func bundleReplicas(bw *norsk.BundleWithJobs) int {
	n := 0
	for _, j := range bw.GetJobs() {
		n = max(n, int(j.GetReplicaIndex())+1)
	}
	return n
}

// placed reports whether a replica job has an instance bound to a node that
// has not stopped.
func placed(j *norsk.BundleJobStatus) bool {
	return j.GetNodeId() != "" && j.GetPhase() != norsk.InstancePhaseStopped
}

// bundlesTable writes one row per bundle.
func bundlesTable(w io.Writer, list []*norsk.BundleWithJobs) {
	fmt.Fprintln(w, "BUNDLE\tSTATE\tPOOL\tREPLICAS\tJOBS\tPLACED")
	for _, bw := range list {
		b, n := bw.GetBundle(), 0
		for _, j := range bw.GetJobs() {
			if placed(j) {
				n++
			}
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%d\t%d/%d\n", b.GetBundleId(), cmdutil.EnumWord(b.GetState()), cmdutil.Dash(b.GetPool()),
			bundleReplicas(bw), len(b.GetJobs()), n, len(bw.GetJobs()))
	}
}

func newBundleShowCommand(g *cmdutil.Globals) *cobra.Command {
	return &cobra.Command{
		Use:               "show ID",
		Aliases:           []string{"get"},
		Short:             "Show a bundle and, per replica job, its role, node, phase, dormant mark and degradations",
		Args:              cmdutil.ExactArgs("ID"),
		ValidArgsFunction: g.CompleteBundleIDs,
		Annotations:       cmdutil.TakesIDs("bundle"),
		RunE: func(cmd *cobra.Command, args []string) error {
			bw, err := cmdutil.Ask(g, cmd, func(ctx context.Context, m *norsk.Manager) (*norsk.BundleWithJobs, error) {
				return m.BundleById(ctx, args[0])
			}, "get bundle %s", args[0])
			if err != nil {
				return err
			}
			return g.Printer().Print(cmdutil.Result{Data: bw, Table: func(w io.Writer) { bundleTable(g, w, bw) }})
		},
	}
}

// bundleTable writes the human view of one bundle.
func bundleTable(g *cmdutil.Globals, w io.Writer, bw *norsk.BundleWithJobs) {
	b, now := bw.GetBundle(), g.Now()
	fmt.Fprintf(w, "Bundle:\t%s\n", b.GetBundleId())
	state := cmdutil.EnumWord(b.GetState())
	if b.GetDeletingReason() != "" {
		state += ": " + b.GetDeletingReason()
	}
	fmt.Fprintf(w, "State:\t%s\n", state)
	fmt.Fprintf(w, "Pool:\t%s\n", cmdutil.Dash(b.GetPool()))
	fmt.Fprintf(w, "Replicas:\t%d\t%s\n", bundleReplicas(bw), resilience(b.GetResiliencePolicy()))
	if a := b.GetIntraReplicaPlacement().GetSpreadAttribute(); a != "" {
		fmt.Fprintf(w, "Spread:\t%s\n", a)
	}
	fmt.Fprintf(w, "Stop at:\t%s\n", when(now, b.GetStopAt()))
	fmt.Fprintf(w, "Lease:\t%s\n", when(now, b.GetLeaseExpiresAt()))
	fmt.Fprintf(w, "Created:\t%s\n", cmdutil.Ago(now, b.GetCreatedAt()))
	fmt.Fprintf(w, "Revision:\t%d\n", b.GetRevision())
	fmt.Fprintln(w)
	fmt.Fprintln(w, "JOB ID\tNAME\tREPLICA\tROLE\tNODE\tPHASE\tDORMANT\tDEGRADATIONS")
	for _, j := range bw.GetJobs() {
		phase := "-"
		if j.GetNodeId() != "" {
			phase = cmdutil.EnumWord(j.GetPhase())
		}
		if t := j.GetTerminalState(); t != nil {
			phase = cmdutil.EnumWord(t.GetKind())
			if t.GetReason() != "" {
				phase += ": " + t.GetReason()
			}
		}
		dormant := "no"
		if j.GetDormant() {
			dormant = "yes"
		}
		fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\n", j.GetJobId(), j.GetJobName(), j.GetReplicaIndex(), j.GetRole(),
			cmdutil.Dash(j.GetNodeId()), phase, dormant, cmdutil.Dash(strings.Join(j.GetDegradations(), "; ")))
	}
}

// resilience describes a resilience policy: "(backups to pool x; same node:
// forbid, same az: allow, same cloud: allow)".
func resilience(p *norsk.ResiliencePolicy) string {
	if p == nil {
		return "(no resilience policy: a primary only)"
	}
	s := fmt.Sprintf("same node: %s, same az: %s, same cloud: %s", cmdutil.EnumWord(p.GetSameNode()), cmdutil.EnumWord(p.GetSameAz()), cmdutil.EnumWord(p.GetSameCloud()))
	if p.GetPool() != "" {
		s = "backups to pool " + p.GetPool() + "; " + s
	}
	return "(" + s + ")"
}

// when is "2025-03-01T13:00:00Z (in 1h)", or "-".
func when(now time.Time, ts *timestamppb.Timestamp) string {
	if ts == nil {
		return "-"
	}
	return fmt.Sprintf("%s (%s)", cmdutil.Timestamp(ts), cmdutil.Ago(now, ts))
}

func newBundleDeleteCommand(g *cmdutil.Globals) *cobra.Command {
	return &cobra.Command{
		Use:               "delete ID",
		Short:             "Delete a bundle: its jobs are stopped, then removed with it",
		Args:              cmdutil.ExactArgs("ID"),
		ValidArgsFunction: g.CompleteBundleIDs,
		Annotations:       cmdutil.TakesIDs("bundle"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, err := cmdutil.Ask(g, cmd, func(ctx context.Context, m *norsk.Manager) (struct{}, error) {
				return struct{}{}, m.DeleteBundle(ctx, args[0])
			}, "delete bundle %s", args[0]); err != nil {
				return err
			}
			return g.PrintDone("bundle", args[0], "is being deleted: its jobs are stopped, then removed with it")
		},
	}
}

// replicaJobArgs reads ID REPLICA JOBNAME.
func replicaJobArgs(args []string) (string, uint32, string, error) {
	r, err := strconv.ParseUint(args[1], 10, 32)
	if err != nil {
		return "", 0, "", cmdutil.UsageErrorf("REPLICA %q: want a replica index (0 = primary, 1 = backup, n = replica-n)", args[1])
	}
	return args[0], uint32(r), args[2], nil
}

func newBundleStartJobCommand(g *cmdutil.Globals) *cobra.Command {
	return &cobra.Command{
		Use:   "start-job ID REPLICA JOBNAME",
		Short: "Start a dormant bundle job (start mode manual, or stopped by stop-job): the AutoManager places it",
		Example: `  norsk-ctl bundle start-job news 0 recorder    # the primary's recorder
  norsk-ctl bundle start-job news 1 recorder    # the backup's`,
		Args:              cmdutil.ExactArgs("ID", "REPLICA", "JOBNAME"),
		ValidArgsFunction: g.CompleteBundleIDs,
		Annotations:       cmdutil.TakesIDs("bundle"),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, replica, name, err := replicaJobArgs(args)
			if err != nil {
				return err
			}
			if _, err := cmdutil.Ask(g, cmd, func(ctx context.Context, m *norsk.Manager) (struct{}, error) {
				return struct{}{}, m.StartBundleJob(ctx, id, replica, name)
			}, "start job %s of replica %d of bundle %s", name, replica, id); err != nil {
				return err
			}
			return g.PrintDone("bundle", id, fmt.Sprintf("job %s of replica %d started (no longer dormant)", name, replica))
		},
	}
}

func newBundleStopJobCommand(g *cmdutil.Globals) *cobra.Command {
	var grace time.Duration
	cmd := &cobra.Command{
		Use:               "stop-job ID REPLICA JOBNAME [--grace 10s]",
		Short:             "Stop a bundle job and keep it down (dormant) until start-job",
		Args:              cmdutil.ExactArgs("ID", "REPLICA", "JOBNAME"),
		ValidArgsFunction: g.CompleteBundleIDs,
		Annotations:       cmdutil.TakesIDs("bundle"),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, replica, name, err := replicaJobArgs(args)
			if err != nil {
				return err
			}
			if grace < 0 {
				return cmdutil.UsageErrorf("--grace must not be negative")
			}
			if _, err := cmdutil.Ask(g, cmd, func(ctx context.Context, m *norsk.Manager) (struct{}, error) {
				return struct{}{}, m.StopBundleJob(ctx, id, replica, name, norsk.StopBundleJobOptions{Grace: grace})
			}, "stop job %s of replica %d of bundle %s", name, replica, id); err != nil {
				return err
			}
			return g.PrintDone("bundle", id, fmt.Sprintf("job %s of replica %d stopping, and kept down (dormant)", name, replica))
		},
	}
	cmd.Flags().DurationVar(&grace, "grace", 0, "how long services get to exit before they are killed (0 = the worker's default)")
	return cmd
}

// bundleTime is what stop-time and renew-lease print.
type bundleTime struct {
	BundleID string `json:"bundleId"`
	// StopAt and LeaseExpiresAt are RFC 3339 times.
	StopAt         string `json:"stopAt,omitempty"`
	LeaseExpiresAt string `json:"leaseExpiresAt,omitempty"`
	// Cleared: stop-time --clear.
	Cleared bool `json:"cleared,omitempty"`
}

func newBundleStopTimeCommand(g *cmdutil.Globals) *cobra.Command {
	var (
		at, in  string
		clearIt bool
	)
	cmd := &cobra.Command{
		Use:   "stop-time ID (--at RFC3339 | --in DURATION | --clear)",
		Short: "Set when a bundle is deleted (--at, --in) or clear it (--clear); no job is touched now",
		Long: `Set the time the bundle is deleted (as by "bundle delete": its jobs are stopped,
then removed with it): --at a time in RFC 3339, or --in a duration from now
(90m, 1h, 2d). --clear removes the stop time. Nothing is stopped now; a time
already past deletes the bundle at once.`,
		Example: `  norsk-ctl bundle stop-time news --at 2025-06-01T18:00:00Z
  norsk-ctl bundle stop-time news --in 2h
  norsk-ctl bundle stop-time news --clear`,
		Args:              cmdutil.ExactArgs("ID"),
		ValidArgsFunction: g.CompleteBundleIDs,
		Annotations:       cmdutil.TakesIDs("bundle"),
		RunE: func(cmd *cobra.Command, args []string) error {
			given := 0
			for _, f := range []string{"at", "in", "clear"} {
				if cmd.Flags().Changed(f) {
					given++
				}
			}
			if given != 1 {
				return cmdutil.UsageErrorf("give exactly one of --at, --in and --clear")
			}
			var stopAt *time.Time
			switch {
			case cmd.Flags().Changed("at"):
				t, err := time.Parse(time.RFC3339Nano, at)
				if err != nil {
					return cmdutil.UsageErrorf("--at %q: want a time in RFC 3339, e.g. 2025-06-01T18:00:00Z", at)
				}
				stopAt = &t
			case cmd.Flags().Changed("in"):
				d, err := cmdutil.ParseDuration(in)
				if err != nil {
					return cmdutil.UsageErrorf("--in %q: want a duration such as 90m, 2h or 1d", in)
				}
				t := g.Now().Add(d)
				stopAt = &t
			case !clearIt:
				return cmdutil.UsageErrorf("--clear=false: give --at or --in to set a stop time")
			}
			if _, err := cmdutil.Ask(g, cmd, func(ctx context.Context, m *norsk.Manager) (struct{}, error) {
				return struct{}{}, m.SetBundleStopTime(ctx, args[0], stopAt)
			}, "set the stop time of bundle %s", args[0]); err != nil {
				return err
			}
			out := bundleTime{BundleID: args[0], Cleared: stopAt == nil}
			var ts *timestamppb.Timestamp
			if stopAt != nil {
				ts = timestamppb.New(*stopAt)
				out.StopAt = cmdutil.Timestamp(ts)
			}
			return g.Printer().Print(cmdutil.Result{Data: out, Table: func(w io.Writer) {
				if stopAt == nil {
					fmt.Fprintf(w, "Bundle %s: stop time cleared.\n", args[0])
					return
				}
				fmt.Fprintf(w, "Bundle %s is deleted at %s.\n", args[0], when(g.Now(), ts))
			}})
		},
	}
	cmd.Flags().StringVar(&at, "at", "", "delete the bundle at this time (RFC 3339)")
	cmd.Flags().StringVar(&in, "in", "", "delete the bundle this long from now (90m, 2h, 1d)")
	cmd.Flags().BoolVar(&clearIt, "clear", false, "clear the stop time")
	return cmd
}

func newBundleRenewLeaseCommand(g *cmdutil.Globals) *cobra.Command {
	var ttl string
	cmd := &cobra.Command{
		Use:   "renew-lease ID --ttl DURATION",
		Short: "Renew a bundle's lease: unless renewed again within the TTL, the bundle is deleted",
		Long: `Move the bundle's lease to --ttl from now (the Manager's clock; 1s to 7d). A
bundle whose lease runs out unrenewed is deleted, as by "bundle delete". A
bundle that was never renewed has no lease. Prints when it now runs out.`,
		Example:           `  norsk-ctl bundle renew-lease news --ttl 30s`,
		Args:              cmdutil.ExactArgs("ID"),
		ValidArgsFunction: g.CompleteBundleIDs,
		Annotations:       cmdutil.TakesIDs("bundle"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if ttl == "" {
				return cmdutil.UsageErrorf("--ttl is required")
			}
			d, err := cmdutil.ParseDuration(ttl)
			if err != nil {
				return cmdutil.UsageErrorf("--ttl %q: want a duration such as 30s, 10m or 1d", ttl)
			}
			exp, err := cmdutil.Ask(g, cmd, func(ctx context.Context, m *norsk.Manager) (time.Time, error) {
				return m.RenewBundleLease(ctx, args[0], d)
			}, "renew the lease of bundle %s", args[0])
			if err != nil {
				return err
			}
			ts := timestamppb.New(exp)
			out := bundleTime{BundleID: args[0], LeaseExpiresAt: cmdutil.Timestamp(ts)}
			return g.Printer().Print(cmdutil.Result{Data: out, Table: func(w io.Writer) {
				fmt.Fprintf(w, "Bundle %s: lease renewed; it runs out at %s unless renewed again.\n", args[0], when(g.Now(), ts))
			}})
		},
	}
	cmd.Flags().StringVar(&ttl, "ttl", "", "how long the lease lasts from now (30s, 10m, 1d; 1s to 7d)")
	return cmd
}
