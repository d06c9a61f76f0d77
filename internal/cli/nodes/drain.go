package nodes

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/norsk-go/norsk-manager/internal/cli/cmdutil"
	"github.com/norsk-go/norsk-manager/internal/cli/migrations"
	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

func newNodeDrainCommand(g *cmdutil.Globals) *cobra.Command {
	var (
		strategy   string
		deadline   time.Duration
		noDeadline bool
		parallel   int
		undo       bool
		noWait     bool
	)
	c := &cobra.Command{
		Use:   "drain NODE",
		Short: "Move every job off a node in the Manager (make-before-break by default); the node takes no new work",
		Long: `Drain a node. The Manager marks it draining, so placement puts nothing new on
it, and its AutoManager migrates every AutoManager-placed job away, --parallel
at a time, with the overlap strategy by default (make-before-break: the new
copy runs before the old one stops; the same default as 'migrate' is not: a
drain moves many jobs at once and should never open a gap), or --strategy
handover / stopThenStart. A move that fails is retried. When --deadline
passes, what has not moved is stopped, with that reason in its history. A job
not placed by the AutoManager (started on a named node) is left running and
reported.

The drain runs in the Manager, stored with the node: it goes on if this
command is interrupted, and survives a Manager restart or failover. This
command follows it live, one line per job as it moves, and ends with a
summary; it exits non-zero when the node was not drained. --no-wait returns
at once. Running 'node drain NODE' again while a drain runs re-attaches to it
(its options stand; undo and drain again to change them). 'node list' shows
the progress: draining (3/7 moved).

--undo cancels a running drain (no new move starts; a move already started
finishes) and lets the node take new work again.`,
		Example: `  norsk-ctl node drain encoder-7
  norsk-ctl node drain encoder-7 --strategy handover --deadline 20m --parallel 4
  norsk-ctl node drain encoder-7 --no-wait     # start it and return
  norsk-ctl node drain encoder-7               # re-attach to the running drain
  norsk-ctl node drain encoder-7 --undo`,
		Args:              cmdutil.ExactArgs("NODE"),
		ValidArgsFunction: g.CompleteNodeIDs,
		Annotations:       cmdutil.TakesIDs("node"),
		RunE: func(cmd *cobra.Command, args []string) error {
			node := args[0]
			// An undo carries no other option (the Manager refuses one that does).
			opts := norsk.DrainOptions{Undo: true}
			if !undo {
				opts = norsk.DrainOptions{NoDeadline: noDeadline, Parallel: parallel}
				s, err := migrations.ParseStrategy(strategy)
				if err != nil {
					return err
				}
				if strategy == "" {
					s = norsk.StrategyOverlap
				}
				opts.Strategy = s
				if parallel < 1 {
					return cmdutil.UsageErrorf("--parallel %d: want at least 1", parallel)
				}
				if noDeadline && cmd.Flags().Changed("deadline") {
					return cmdutil.UsageErrorf("--deadline and --no-deadline: give one")
				}
				if !noDeadline {
					if deadline <= 0 {
						return cmdutil.UsageErrorf("--deadline %s: want a positive duration (or --no-deadline)", deadline)
					}
					opts.Deadline = deadline
				}
			} else if cmd.Flags().Changed("strategy") || cmd.Flags().Changed("deadline") || cmd.Flags().Changed("parallel") || noDeadline {
				return cmdutil.UsageErrorf("--undo takes no other drain option")
			}
			type answer struct {
				d        *norsk.NodeDrain
				attached bool
			}
			a, err := cmdutil.Ask(g, cmd, func(ctx context.Context, m *norsk.Manager) (answer, error) {
				d, attached, err := m.DrainNode(ctx, node, opts)
				return answer{d, attached}, err
			}, "drain node %s", node)
			if err != nil {
				return err
			}
			d := a.d
			if undo {
				if d != nil && d.GetState() == norsk.DrainCancelled {
					return g.PrintDone("node", node, "drain undone ("+d.GetSummary()+"); the node takes new work again")
				}
				return g.PrintDone("node", node, "takes new work again")
			}
			table := g.Human()
			if table {
				if a.attached {
					fmt.Fprintf(g.Out, "Node %s is already being drained (since %s): following it; its options stand\n", node, cmdutil.Ago(g.Now(), d.GetStartedAt()))
				}
				fmt.Fprintf(g.Out, "Draining %s: %s, %d at once, %s\n", node, norsk.StrategyName(d.GetStrategy()), d.GetParallel(), deadlineWords(g.Now(), d))
			}
			if noWait {
				if table {
					fmt.Fprintf(g.Out, "The drain runs in the Manager; follow it with 'norsk-ctl node drain %s' (re-attach) or 'norsk-ctl node list'\n", node)
					return nil
				}
				return g.Printer().Print(cmdutil.Result{Data: d})
			}
			m, err := g.Manager(cmd.Context())
			if err != nil {
				return err
			}
			d, err = followDrain(g, cmd.Context(), m, d, func(it *norsk.DrainItem) {
				if table {
					drainItemLine(g.Out, it)
				}
			})
			if err != nil {
				if cmd.Context().Err() != nil {
					fmt.Fprintf(g.ErrOut, "Detached: the drain of %s goes on in the Manager (%s); re-attach with 'norsk-ctl node drain %s'\n", node, d.GetSummary(), node)
					return nil
				}
				return err
			}
			if err := g.Printer().Print(cmdutil.Result{Data: d, Table: func(w io.Writer) { drainSummary(w, d) }}); err != nil {
				return err
			}
			switch d.GetState() {
			case norsk.DrainDrained:
				return nil
			case norsk.DrainCancelled:
				return fmt.Errorf("drain %s: undone before it ended (%s)", node, d.GetSummary())
			}
			return fmt.Errorf("drain %s: not drained (%s)", node, d.GetSummary())
		},
	}
	f := c.Flags()
	f.StringVar(&strategy, "strategy", "", "overlap (default: make-before-break), handover or stopThenStart")
	f.DurationVar(&deadline, "deadline", time.Hour, "stop what has not moved after this long")
	f.BoolVar(&noDeadline, "no-deadline", false, "no deadline: wait for every move (one that keeps failing is given up after 3 attempts)")
	f.IntVar(&parallel, "parallel", 2, "jobs moved at once")
	f.BoolVar(&undo, "undo", false, "cancel the running drain and let the node take new work again")
	f.BoolVar(&noWait, "no-wait", false, "return once the drain is started (it runs in the Manager)")
	_ = c.RegisterFlagCompletionFunc("strategy", cobra.FixedCompletions([]string{"overlap", "handover", "stopThenStart"}, cobra.ShellCompDirectiveNoFileComp))
	return c
}

// followDrain follows d on the event stream until it ends, calling item
// for each item whose result changed. It reopens the stream from the last
// revision seen when it breaks (a Manager failover), and returns when the
// drain ends or ctx does.
func followDrain(g *cmdutil.Globals, ctx context.Context, m *norsk.Manager, d *norsk.NodeDrain, item func(*norsk.DrainItem)) (*norsk.NodeDrain, error) {
	seen := map[string]string{}
	show := func(d *norsk.NodeDrain) {
		for _, it := range d.GetItems() {
			k := it.GetJobId() + "/" + it.GetRole()
			v := fmt.Sprintf("%d/%s/%s/%d", it.GetResult(), it.GetMigrationId(), it.GetReason(), it.GetAttempts())
			if seen[k] != v {
				seen[k] = v
				item(it)
			}
		}
	}
	show(d)
	failures := 0
	for d.GetState() == norsk.DrainRunning {
		// The stream is the live path; a poll every few seconds backs it
		// (a member whose stream stalls across a failover): when the
		// drain moved on without an event, the stream is ended and the
		// drain read.
		sctx, cancel := context.WithCancel(ctx)
		polled := make(chan struct{})
		go func(rev uint64) {
			defer close(polled)
			t := time.NewTicker(3 * time.Second)
			defer t.Stop()
			for {
				select {
				case <-sctx.Done():
					return
				case <-t.C:
				}
				if cur, err := m.NodeDrain(sctx, d.GetNodeId()); err == nil && cur.GetRevision() > rev {
					cancel()
					return
				}
			}
		}(d.GetRevision())
		s := m.EventStream(sctx, norsk.EventStreamSettings{AfterIndex: d.GetRevision(), SkipSnapshot: true})
		for s.Next() {
			failures = 0
			u := s.Event().GetNodeDrainUpdated()
			if u == nil || u.GetNodeId() != d.GetNodeId() || u.GetRevision() <= d.GetRevision() {
				continue
			}
			d = u
			show(d)
			if d.GetState() != norsk.DrainRunning {
				break
			}
		}
		err := s.Err()
		s.Close()
		cancel()
		<-polled
		if d.GetState() != norsk.DrainRunning {
			break
		}
		if ctx.Err() != nil {
			return d, ctx.Err()
		}
		failures++
		if failures > 30 {
			return d, fmt.Errorf("following the drain of %s: %w", d.GetNodeId(), err)
		}
		// The stream broke (a failover): read where the drain stands, then
		// follow on from there.
		t := time.NewTimer(time.Second)
		select {
		case <-ctx.Done():
			t.Stop()
			return d, ctx.Err()
		case <-t.C:
		}
		if cur, err := m.NodeDrain(ctx, d.GetNodeId()); err == nil && cur.GetRevision() >= d.GetRevision() {
			if cur.GetRevision() > d.GetRevision() {
				failures = 0 // it moved on: the follow is working
			}
			d = cur
			show(d)
		} else if errors.Is(err, norsk.ErrNotFound) {
			return d, fmt.Errorf("following the drain of %s: %w", d.GetNodeId(), err)
		}
	}
	return d, nil
}

// drainItemLine prints one item's new result.
func drainItemLine(w io.Writer, it *norsk.DrainItem) {
	name := it.GetJobId()
	if it.GetRole() != "" {
		name += "/" + it.GetRole()
	}
	switch it.GetResult() {
	case norsk.DrainItemPending:
		if it.GetReason() != "" {
			fmt.Fprintf(w, "  %-40s retrying (attempt %d failed): %s\n", name, it.GetAttempts(), it.GetReason())
		}
	case norsk.DrainItemMoving:
		to := it.GetTargetNodeId()
		if to == "" {
			to = "(placing)"
		}
		fmt.Fprintf(w, "  %-40s moving to %s (migration %s)\n", name, to, shortMigrationID(it.GetMigrationId()))
	case norsk.DrainItemMoved:
		fmt.Fprintf(w, "  %-40s moved to %s\n", name, it.GetTargetNodeId())
	case norsk.DrainItemGone:
		fmt.Fprintf(w, "  %-40s left the node: %s\n", name, it.GetReason())
	default:
		fmt.Fprintf(w, "  %-40s %s: %s\n", name, norsk.DrainItemResultName(it.GetResult()), it.GetReason())
	}
}

// drainSummary ends a followed drain: drained, or not and why.
func drainSummary(w io.Writer, d *norsk.NodeDrain) {
	took := ""
	if d.GetEndedAt() != nil && d.GetStartedAt() != nil {
		took = " in " + cmdutil.FmtDur(d.GetEndedAt().AsTime().Sub(d.GetStartedAt().AsTime()))
	}
	switch d.GetState() {
	case norsk.DrainDrained:
		fmt.Fprintf(w, "\nNode %s drained%s: %s; it takes no new work (undo with --undo)\n", d.GetNodeId(), took, d.GetSummary())
		return
	case norsk.DrainCancelled:
		fmt.Fprintf(w, "\nDrain of %s undone%s: %s\n", d.GetNodeId(), took, d.GetSummary())
	default:
		fmt.Fprintf(w, "\nNode %s NOT drained%s: %s\n", d.GetNodeId(), took, d.GetSummary())
	}
	for _, it := range d.GetItems() {
		switch it.GetResult() {
		case norsk.DrainItemMoved, norsk.DrainItemGone:
		default:
			fmt.Fprintf(w, "  %-40s %s: %s\n", it.GetJobId()+"/"+it.GetRole(), norsk.DrainItemResultName(it.GetResult()), it.GetReason())
		}
	}
}

// deadlineWords says when a drain's deadline falls.
func deadlineWords(now time.Time, d *norsk.NodeDrain) string {
	if d.GetDeadline() == nil {
		return "no deadline"
	}
	at := d.GetDeadline().AsTime()
	return fmt.Sprintf("deadline %s (in %s)", at.Local().Format("15:04:05"), cmdutil.FmtDur(at.Sub(now).Round(time.Second)))
}

// nodeStateWords is a node's state for tables: its drain's progress while
// one runs ("draining (3/7 moved)").
func nodeStateWords(n *norsk.Node) string {
	state := cmdutil.EnumWord(n.GetState())
	if n.GetState() == norsk.NodeStateOnline && !n.GetConnected() {
		state += " (disconnected)"
	}
	if n.GetState() != norsk.NodeStateOnline {
		return state
	}
	d := n.GetDrain()
	switch {
	case d.GetState() == norsk.DrainRunning:
		return fmt.Sprintf("draining (%d/%d moved)", d.GetMoved(), d.GetTotal())
	case !n.GetDraining():
		return state
	case d.GetState() == norsk.DrainDrained:
		return "drained"
	case d.GetState() == norsk.DrainNotDrained:
		return fmt.Sprintf("not drained (%d/%d moved)", d.GetMoved(), d.GetTotal())
	}
	return "draining"
}

// shortMigrationID is a migration id's first 8 hex digits, as the CLI
// prints them.
func shortMigrationID(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}

// nodeDrainLines shows a node's drain in 'node get'.
func nodeDrainLines(w io.Writer, now time.Time, n *norsk.Node) {
	d := n.GetDrain()
	if d == nil {
		if n.GetDraining() {
			fmt.Fprintf(w, "Draining:\tyes (no new work)\n")
		}
		return
	}
	fmt.Fprintf(w, "Drain:\t%s since %s: %s (%s, %d at once, %s)\n", norsk.DrainStateName(d.GetState()), cmdutil.Ago(now, d.GetStartedAt()), d.GetSummary(),
		norsk.StrategyName(d.GetStrategy()), d.GetParallel(), deadlineWords(now, d))
	for _, it := range d.GetItems() {
		switch it.GetResult() {
		case norsk.DrainItemMoved, norsk.DrainItemGone:
		default:
			fmt.Fprintf(w, "\t  %s/%s %s: %s\n", it.GetJobId(), it.GetRole(), norsk.DrainItemResultName(it.GetResult()), cmdutil.Dash(it.GetReason()))
		}
	}
}
