package cluster

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/user"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/norsk-go/norsk-manager/internal/cli/cmdutil"
	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

// NewClusterCommand is the cluster group: the Manager members' own cluster.
func NewClusterCommand(g *cmdutil.Globals) *cobra.Command {
	cmd := cmdutil.NewGroup("cluster", "Manager cluster: members, quorum, events, recovery from quorum loss")
	cmd.Long = `A Norsk Manager runs alone or as a cluster of members (config.yaml clusterNodes,
or added at run time): the primary commits every write, the others follow, and a
witness only votes. A majority of the voters (the quorum) must be reachable for
the cluster to have a primary.

Status and events are the view of the member --manager-url names. When the
quorum is lost for good, "force-standalone" on the member with the newest state
makes it a cluster of one; "leave-quorum" makes a member discard its copy and
rejoin as a follower.`
	cmd.AddCommand(
		newClusterStatusCommand(g),
		newClusterEventsCommand(g),
		newClusterAddCommand(g),
		newClusterRemoveCommand(g),
		newClusterForceStandaloneCommand(g),
		newClusterLeaveQuorumCommand(g),
	)
	return cmd
}

func newClusterStatusCommand(g *cmdutil.Globals) *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "Show the cluster's members, roles, primary, generation and quorum",
		Long: `Show the cluster as the member called sees it: each member's role (primary,
follower, witness, or unknown when it does not answer or has not joined yet),
whether it answered just now, whether it votes, its applied index and
generation, when the primary last heard from it, and the norsk-mgr announced
beside it (marked stale after three announcement intervals without one).

The summary says who is primary, the generation and term, and the quorum:
voters reachable out of all voters, and the majority needed.`,
		Args: cmdutil.ExactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			st, err := cmdutil.Ask(g, cmd, func(ctx context.Context, m *norsk.Manager) (*norsk.ClusterStatus, error) {
				return m.GetClusterStatus(ctx)
			}, "cluster status")
			if err != nil {
				return err
			}
			return g.Printer().Print(cmdutil.Result{Data: st, Table: func(w io.Writer) { clusterStatusTable(g, w, st, false) },
				Wide: func(w io.Writer) { clusterStatusTable(g, w, st, true) }})
		},
	}
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// countOrDash is n, or "-" for a member that did not say.
func countOrDash(n uint64, known bool) string {
	if !known {
		return "-"
	}
	return strconv.FormatUint(n, 10)
}

// clusterStatusTable writes the members and the quorum; wide (-o wide) adds
// each member's raft address, API URL and whether it is a witness.
func clusterStatusTable(g *cmdutil.Globals, w io.Writer, st *norsk.ClusterStatus, wide bool) {
	if wide {
		fmt.Fprintln(w, "NAME\tROLE\tREACHABLE\tVOTER\tWITNESS\tAPPLIED\tGENERATION\tLAST CONTACT\tRAFT\tAPI\tCONTROL PLANE")
	} else {
		fmt.Fprintln(w, "NAME\tROLE\tREACHABLE\tVOTER\tAPPLIED\tGENERATION\tLAST CONTACT\tCONTROL PLANE")
	}
	var notes []string
	for _, mb := range st.GetMembers() {
		name := mb.GetName()
		if name == st.GetAnsweredBy() {
			name += " *"
		}
		cp := cmdutil.Dash(mb.GetControlPlaneUrl())
		if mb.GetControlPlaneStale() {
			cp += " (stale, announced " + cmdutil.Ago(g.Now(), mb.GetControlPlaneAnnouncedAt()) + ")"
		}
		applied, gen := countOrDash(mb.GetAppliedIndex(), mb.GetReachable()), countOrDash(mb.GetGeneration(), mb.GetReachable())
		if wide {
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", name, cmdutil.EnumWord(mb.GetRole()), yesNo(mb.GetReachable()), yesNo(mb.GetVoter()),
				yesNo(mb.GetWitness()), applied, gen, cmdutil.Ago(g.Now(), mb.GetLastContact()), cmdutil.Dash(mb.GetRaftAddress()), cmdutil.Dash(mb.GetApiUrl()), cp)
		} else {
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", name, cmdutil.EnumWord(mb.GetRole()), yesNo(mb.GetReachable()), yesNo(mb.GetVoter()),
				applied, gen, cmdutil.Ago(g.Now(), mb.GetLastContact()), cp)
		}
		if mb.GetDetail() != "" {
			notes = append(notes, mb.GetName()+": "+mb.GetDetail())
		}
	}
	health := "healthy"
	if !st.GetQuorumHealthy() {
		health = "NOT healthy"
	}
	fmt.Fprintf(w, "\nPrimary %s, generation %d, term %d; quorum %s: %d/%d voters reachable, quorum %d (answered by %s *)\n",
		orNone(st.GetPrimary()), st.GetGeneration(), st.GetTerm(), health, st.GetVotersReachable(), st.GetVoters(), st.GetQuorum(), cmdutil.Dash(st.GetAnsweredBy()))
	for _, n := range notes {
		fmt.Fprintln(w, n)
	}
	if st.GetPrimary() == "" {
		fmt.Fprintln(w, "\nNo primary: the cluster cannot commit writes. Bring the missing members back; as a last resort, run")
		fmt.Fprintln(w, "norsk-ctl cluster force-standalone against the member with the newest state.")
	}
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

func newClusterEventsCommand(g *cmdutil.Globals) *cobra.Command {
	var (
		limit int
		kinds []string
		since string
	)
	cmd := &cobra.Command{
		Use:   "events [--limit N] [--kind K]... [--since WHEN]",
		Short: "Show the member's own cluster event log, newest first",
		Long: `Show what happened to the member called, newest first: role changes and why,
lease failures, members expected, joining or retiring, forced recoveries,
takeovers settling. Each member keeps its own log; for the whole cluster's
picture, ask every member (--manager-url) and merge by time.

--kind is repeatable (or comma-separated): role-change, lease-failure,
member-expected, member-joined, member-retired, handing-over, force-standalone,
takeover-settled, leave-quorum, rejoined, recovery-failed. --since takes a time
(RFC 3339, or a day such as 2025-03-01) or a duration before now (90m, 1h, 2d).`,
		Example: `  norsk-ctl cluster events
  norsk-ctl cluster events --kind role-change --since 1h
  norsk-ctl --manager-url mgr-2:6790 cluster events -o json`,
		Args: cmdutil.ExactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if limit < 1 || limit > norsk.MaxClusterEvents {
				return cmdutil.UsageErrorf("--limit must be between 1 and %d", norsk.MaxClusterEvents)
			}
			q := norsk.ClusterEventsQuery{Limit: limit, Kinds: kinds}
			if since != "" {
				t, err := cmdutil.ParseWhen(since, g.Now())
				if err != nil {
					return cmdutil.UsageErrorf("--since: %v", err)
				}
				q.Since = t
			}
			page, err := cmdutil.Ask(g, cmd, func(ctx context.Context, m *norsk.Manager) (*norsk.ClusterEventsPage, error) {
				return m.GetClusterEvents(ctx, q)
			}, "cluster events")
			if err != nil {
				return err
			}
			return g.Printer().Print(cmdutil.Result{Data: page, Table: func(w io.Writer) { clusterEventsTable(w, page) }})
		},
	}
	f := cmd.Flags()
	f.IntVar(&limit, "limit", norsk.DefaultClusterEvents, fmt.Sprintf("the most events to show (at most %d)", norsk.MaxClusterEvents))
	f.StringSliceVar(&kinds, "kind", nil, "only events of this kind (repeatable)")
	f.StringVar(&since, "since", "", "only events at or after this time (RFC 3339, or a duration ago: 1h, 2d)")
	return cmd
}

func clusterEventsTable(w io.Writer, page *norsk.ClusterEventsPage) {
	if len(page.GetEvents()) == 0 {
		fmt.Fprintf(w, "No cluster events of member %s match.\n", cmdutil.Dash(page.GetMember()))
		return
	}
	fmt.Fprintf(w, "Cluster events of member %s, newest first:\n\n", cmdutil.Dash(page.GetMember()))
	fmt.Fprintln(w, "TIME\tKIND\tTERM\tGENERATION\tDETAIL")
	for _, e := range page.GetEvents() {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", cmdutil.Timestamp(e.GetAt()), e.GetKind(),
			countOrDash(e.GetTerm(), e.GetTerm() > 0), countOrDash(e.GetGeneration(), e.GetGeneration() > 0), cmdutil.Dash(e.GetDetail()))
	}
}

// DefaultBy is who a cluster change is recorded as made by, without --by:
// the local user's name ($USER when the system cannot say).
func DefaultBy() string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	if u := os.Getenv("USER"); u != "" {
		return u
	}
	return "norsk-ctl"
}

// byFlag registers --by on cmd.
func byFlag(cmd *cobra.Command, by *string) {
	cmd.Flags().StringVar(by, "by", "", "who asks, recorded in the cluster events and the audit log (default: the local user name)")
}

func newClusterAddCommand(g *cmdutil.Globals) *cobra.Command {
	var (
		witness bool
		by      string
	)
	cmd := &cobra.Command{
		Use:   "add NODE [--witness] [--by WHO]",
		Short: "Add a member (or a witness) to the cluster at run time",
		Long: `Make the cluster expect a new member: a Manager whose node name no config.yaml
names. It joins when its Manager starts with clusterState: existing and the
existing members in its own clusterNodes. A witness (--witness) votes but holds
no job state, serves no API and never leads. Adding a member already expected
changes nothing. Prints every member the cluster now expects.`,
		Example: `  norsk-ctl cluster add mgr-4
  norsk-ctl cluster add wit-1 --witness --by alice`,
		Args: cmdutil.ExactArgs("NODE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if by == "" {
				by = DefaultBy()
			}
			m, err := g.Manager(cmd.Context())
			if err != nil {
				return err
			}
			ctx, cancel := g.Call(cmd.Context())
			defer cancel()
			node := args[0]
			members, err := m.AddClusterMember(ctx, node, by, norsk.AddClusterMemberOptions{Witness: witness})
			if err != nil {
				return fmt.Errorf("add cluster member %s: %w", node, err)
			}
			what := "member"
			if witness {
				what = "witness"
			}
			return g.Printer().Print(cmdutil.Result{Data: map[string]any{"members": members}, Table: func(w io.Writer) {
				fmt.Fprintf(w, "The cluster expects %s %s (added by %s).\n", what, node, by)
				fmt.Fprintf(w, "Members now expected: %s\n", strings.Join(members, ", "))
				fmt.Fprintf(w, "Start %s's Manager with clusterState: existing and the existing members in its clusterNodes; it joins then.\n", node)
			}})
		},
	}
	cmd.Flags().BoolVar(&witness, "witness", false, "add a witness: it votes but holds no job state and serves no API")
	byFlag(cmd, &by)
	return cmd
}

func newClusterRemoveCommand(g *cmdutil.Globals) *cobra.Command {
	return &cobra.Command{
		Use:   "remove NODE",
		Short: "Retire a member from the cluster",
		Long: `Retire the member on NODE from the cluster's membership. Removing the primary
first hands its role to another full member; the last full member cannot be
removed. Stop the retired member's Manager afterwards.`,
		Args: cmdutil.ExactArgs("NODE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			m, err := g.Manager(cmd.Context())
			if err != nil {
				return err
			}
			ctx, cancel := g.Call(cmd.Context())
			defer cancel()
			if err := m.RemoveClusterMember(ctx, args[0]); err != nil {
				return fmt.Errorf("remove cluster member %s: %w", args[0], err)
			}
			fmt.Fprintf(g.Out, "Member %s removed from the cluster; stop its Manager now.\n", args[0])
			return nil
		},
	}
}

// errNotConfirmed: the user did not confirm a dangerous command.
var errNotConfirmed = errors.New("not confirmed")

// confirm prints what is about to happen and asks for "yes" on stdin.
func confirm(g *cmdutil.Globals, what string) error {
	fmt.Fprintf(g.ErrOut, "%s\nType yes to go on: ", what)
	line, err := bufio.NewReader(g.In).ReadString('\n')
	if err != nil && line == "" {
		fmt.Fprintln(g.ErrOut)
	}
	if strings.TrimSpace(strings.ToLower(line)) != "yes" {
		return fmt.Errorf("%w: nothing was done (answer yes, or pass --yes)", errNotConfirmed)
	}
	return nil
}

// memberName names the member m is connected to, for prompts.
func memberName(m *norsk.Manager) string {
	if n := m.Hello().GetNodeName(); n != "" {
		return n + " (" + m.URL() + ")"
	}
	return "at " + m.URL()
}

func newClusterForceStandaloneCommand(g *cmdutil.Globals) *cobra.Command {
	var (
		by  string
		yes bool
	)
	cmd := &cobra.Command{
		Use:   "force-standalone [--by WHO] [--yes]",
		Short: "Last resort after quorum loss: make this member a cluster of one, keeping its state",
		Long: `The Big Red Button, for a cluster that has lost its quorum and cannot get it
back in time: make the member --manager-url names a one-member cluster at the
next generation, keeping its state. Run it against the member with the newest
state. It is refused while the member can reach a primary (the cluster has
quorum), on a witness, and on a member with no store.

The member restarts (the connection drops) and leads alone. The other members
rejoin it as followers automatically when they are started; do not force them
too. Remove any member that will not come back with "norsk-ctl cluster remove".

Asks for confirmation unless --yes.`,
		Args: cmdutil.ExactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if by == "" {
				by = DefaultBy()
			}
			m, err := g.Manager(cmd.Context())
			if err != nil {
				return err
			}
			name := memberName(m)
			if !yes {
				if err := confirm(g, fmt.Sprintf("This makes member %s a cluster of one at the next generation, keeping its state.\n"+
					"Writes this member has not received are lost. Use it only when the quorum is lost for good.", name)); err != nil {
					return err
				}
			}
			ctx, cancel := g.Call(cmd.Context())
			defer cancel()
			gen, err := m.ForceStandalone(ctx, by)
			if err != nil {
				return fmt.Errorf("force standalone: %w", err)
			}
			data := map[string]any{"member": m.Hello().GetNodeName(), "generation": strconv.FormatUint(gen, 10)}
			return g.Printer().Print(cmdutil.Result{Data: data, Table: func(w io.Writer) {
				fmt.Fprintf(w, "Member %s forced standalone by %s: it restarts now as a cluster of one at generation %d, keeping its state.\n", name, by, gen)
				fmt.Fprintln(w, "The other members rejoin it as followers automatically when they are started (do not force them too).")
				fmt.Fprintln(w, "Remove a member that will not come back with: norsk-ctl cluster remove NODE")
				fmt.Fprintln(w, "Follow it with: norsk-ctl cluster status")
			}})
		},
	}
	byFlag(cmd, &by)
	cmd.Flags().BoolVar(&yes, "yes", false, "do not ask for confirmation")
	return cmd
}

func newClusterLeaveQuorumCommand(g *cmdutil.Globals) *cobra.Command {
	var (
		by  string
		yes bool
	)
	cmd := &cobra.Command{
		Use:   "leave-quorum [--by WHO] [--yes]",
		Short: "Make this member discard its copy and rejoin as a follower",
		Long: `Make the member --manager-url names leave the quorum: its copy of the store is
discarded at its next boot and it runs as a follower until it has joined a
cluster, then catches up from it. A primary hands its role over first (refused
when no other full member can take it). It is for the members still reachable
when force-standalone is pressed on another one. The member restarts (the
connection drops).

Asks for confirmation unless --yes.`,
		Args: cmdutil.ExactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if by == "" {
				by = DefaultBy()
			}
			m, err := g.Manager(cmd.Context())
			if err != nil {
				return err
			}
			name := memberName(m)
			if !yes {
				if err := confirm(g, fmt.Sprintf("This makes member %s discard its copy of the store and rejoin as a follower.", name)); err != nil {
					return err
				}
			}
			ctx, cancel := g.Call(cmd.Context())
			defer cancel()
			if err := m.LeaveQuorum(ctx, by); err != nil {
				return fmt.Errorf("leave quorum: %w", err)
			}
			fmt.Fprintf(g.Out, "Member %s is leaving the quorum (asked by %s): it restarts, discards its copy and rejoins as a follower.\n", name, by)
			return nil
		},
	}
	byFlag(cmd, &by)
	cmd.Flags().BoolVar(&yes, "yes", false, "do not ask for confirmation")
	return cmd
}
