package cluster

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/norsk-go/norsk-manager/internal/cli/cmdutil"
	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

// NewLeaseCommand is the lease group: the leases of lease-protected jobs.
func NewLeaseCommand(g *cmdutil.Globals) *cobra.Command {
	cmd := cmdutil.NewGroup("lease", "Leases of lease-protected jobs: status, pause for a Manager's maintenance, resume")
	cmd.Long = `A lease-protected job (leaseProtected: true) runs only while its node's worker
holds a lease: each heartbeat the primary answers extends it by the lease TTL
(config.yaml leaseTTL, default 15s). A worker that no Manager member has
answered for two thirds of the TTL stops its lease-protected instances, and the
Manager starts a lost holder's job elsewhere only once its lease has expired.

Pause leases before taking a single Manager down for maintenance: workers then
keep their lease-protected jobs without refreshing, and no such job whose
holder was lost starts again until the leases are resumed. On resume every
lease's grace runs from then.`
	cmd.AddCommand(
		newLeaseStatusCommand(g),
		newLeasePauseCommand(g),
		newLeaseResumeCommand(g),
	)
	return cmd
}

func newLeaseStatusCommand(g *cmdutil.Globals) *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "Show whether leases are paused, and every lease held now",
		Long: `Show whether leases are paused (why, by whom, since when), the lease TTL, and
every lease held now: one per lease-protected instance that has not stopped,
with its node, fencing token, when its holder last refreshed it, when it runs
out unless refreshed again, and whether it has. While paused nothing expires.`,
		Args: cmdutil.ExactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			st, err := cmdutil.Ask(g, cmd, func(ctx context.Context, m *norsk.Manager) (*norsk.LeaseStatus, error) {
				return m.GetLeaseStatus(ctx)
			}, "lease status")
			if err != nil {
				return err
			}
			return g.Printer().Print(cmdutil.Result{Data: st, Table: func(w io.Writer) { leaseStatusTable(w, g.Now(), st) }})
		},
	}
}

func leaseStatusTable(w io.Writer, now time.Time, st *norsk.LeaseStatus) {
	ttl := cmdutil.DurationMs(st.GetTtlMs())
	if st.GetPaused() {
		fmt.Fprintf(w, "Leases PAUSED since %s (%s) by %s: %s\n", cmdutil.Timestamp(st.GetSince()), cmdutil.Ago(now, st.GetSince()), cmdutil.Dash(st.GetBy()), cmdutil.Dash(st.GetReason()))
		fmt.Fprintf(w, "Workers keep their lease-protected jobs without refreshing; resume with: norsk-ctl lease resume\n")
	} else {
		fmt.Fprintf(w, "Leases running (TTL %s)", ttl)
		if st.GetSince() != nil {
			fmt.Fprintf(w, "; last resumed %s by %s", cmdutil.Ago(now, st.GetSince()), cmdutil.Dash(st.GetBy()))
		}
		fmt.Fprintln(w)
	}
	if len(st.GetLeases()) == 0 {
		fmt.Fprintln(w, "No lease-protected instance holds a lease.")
		return
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "JOB\tROLE\tNODE\tTOKEN\tREFRESHED\tEXPIRES\tEXPIRED")
	for _, l := range st.GetLeases() {
		expires := cmdutil.Ago(now, l.GetExpiresAt())
		if st.GetPaused() {
			expires = "never (paused)"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%s\t%s\t%s\n", l.GetJobId(), l.GetRole(), l.GetNodeId(), l.GetFencingToken(),
			cmdutil.Ago(now, l.GetRefreshedAt()), expires, yesNo(l.GetExpired()))
	}
}

func newLeasePauseCommand(g *cmdutil.Globals) *cobra.Command {
	var reason, by string
	cmd := &cobra.Command{
		Use:   "pause --reason WHY [--by WHO]",
		Short: "Pause leases for a Manager's maintenance",
		Long: `Pause leases: workers keep their lease-protected jobs without refreshing their
leases, and no such job whose holder was lost starts again until "norsk-ctl
lease resume". The reason is shown to every operator (lease status). Pausing
while paused changes nothing. Needs an admin token.`,
		Example: `  norsk-ctl lease pause --reason "upgrading the Manager" --by alice`,
		Args:    cmdutil.ExactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if reason == "" {
				return cmdutil.UsageErrorf("--reason is required: say why leases are paused")
			}
			if by == "" {
				by = DefaultBy()
			}
			if _, err := cmdutil.Ask(g, cmd, func(ctx context.Context, m *norsk.Manager) (struct{}, error) {
				return struct{}{}, m.PauseLeases(ctx, reason, by)
			}, "pause leases"); err != nil {
				return err
			}
			data := map[string]any{"paused": true, "reason": reason, "by": by}
			return g.Printer().Print(cmdutil.Result{Data: data, Table: func(w io.Writer) {
				fmt.Fprintf(w, "Leases paused by %s: %s\n", by, reason)
				fmt.Fprintln(w, "Workers keep their lease-protected jobs without refreshing; no such job whose holder was lost starts again until: norsk-ctl lease resume")
			}})
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why leases are paused, shown to every operator (required)")
	cmd.Flags().StringVar(&by, "by", "", "who pauses, recorded with the pause and in the audit log (default: the local user name)")
	return cmd
}

func newLeaseResumeCommand(g *cmdutil.Globals) *cobra.Command {
	var by string
	cmd := &cobra.Command{
		Use:   "resume [--by WHO]",
		Short: "Resume leases; every lease's grace then runs from now",
		Long: `End a pause of leases: workers refresh their leases again, and every lease's
grace runs from now. Resuming while not paused changes nothing. Needs an admin
token.`,
		Args: cmdutil.ExactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if by == "" {
				by = DefaultBy()
			}
			if _, err := cmdutil.Ask(g, cmd, func(ctx context.Context, m *norsk.Manager) (struct{}, error) {
				return struct{}{}, m.ResumeLeases(ctx, by)
			}, "resume leases"); err != nil {
				return err
			}
			data := map[string]any{"paused": false, "by": by}
			return g.Printer().Print(cmdutil.Result{Data: data, Table: func(w io.Writer) {
				fmt.Fprintf(w, "Leases resumed by %s; every lease's grace runs from now.\n", by)
			}})
		},
	}
	cmd.Flags().StringVar(&by, "by", "", "who resumes, recorded with the resume and in the audit log (default: the local user name)")
	return cmd
}
