package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

// drainOutcome is what a drain did with one job.
type drainOutcome struct {
	JobID       string `json:"jobId"`
	Role        string `json:"role"`
	MigrationID string `json:"migrationId,omitempty"`
	To          string `json:"to,omitempty"`
	// Result is moved, failed, skipped or inFlight.
	Result string `json:"result"`
	Reason string `json:"reason,omitempty"`
	TookMs int64  `json:"tookMs,omitempty"`
}

type drainSummary struct {
	NodeID string         `json:"nodeId"`
	Jobs   []drainOutcome `json:"jobs"`
}

func newNodeDrainCommand(g *globals) *cobra.Command {
	var (
		strategy string
		deadline time.Duration
		parallel int
		undo     bool
	)
	c := &cobra.Command{
		Use:   "drain NODE",
		Short: "Move every job off a node (make-before-break by default); the node takes no new work",
		Long: `Drain a node: it is marked draining, so placement puts nothing new on it, and
every AutoManager-placed job running there is migrated away — with the
overlap strategy by default (make-before-break: the new copy runs before the
old one stops), or --strategy handover / stopThenStart. One line is printed
per job as it moves, and a summary at the end; the command fails if a job
could not be moved (or is not placed by the AutoManager, so cannot be) or
--deadline passed. The node stays draining until 'norsk-ctl node drain NODE
--undo'.`,
		Example: `  norsk-ctl node drain encoder-7
  norsk-ctl node drain encoder-7 --strategy handover --deadline 5m
  norsk-ctl node drain encoder-7 --undo`,
		Args:              exactArgs("NODE"),
		ValidArgsFunction: g.completeNodeIDs,
		RunE: func(cmd *cobra.Command, args []string) error {
			node := args[0]
			m, err := g.manager(cmd.Context())
			if err != nil {
				return err
			}
			if undo {
				if _, err := ask(g, cmd, func(ctx context.Context, m *norsk.Manager) (*norsk.Node, error) {
					return m.SetNodeDraining(ctx, node, false)
				}, "undrain node %s", node); err != nil {
					return err
				}
				return g.printDone("node", node, "takes new work again")
			}
			s, err := parseStrategy(strategy)
			if err != nil {
				return err
			}
			if strategy == "" {
				s = norsk.StrategyOverlap
			}
			if parallel < 1 {
				return usageErrorf("--parallel %d: want at least 1", parallel)
			}
			if _, err := ask(g, cmd, func(ctx context.Context, m *norsk.Manager) (*norsk.Node, error) {
				return m.SetNodeDraining(ctx, node, true)
			}, "drain node %s", node); err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), deadline)
			defer cancel()
			jobs, err := ask(g, cmd, func(ctx context.Context, m *norsk.Manager) ([]*norsk.JobWithHistory, error) {
				return m.JobSearch(ctx, norsk.JobSearchSettings{})
			}, "list jobs")
			if err != nil {
				return err
			}
			type work struct{ jobID, role string }
			var todo []work
			var outcomes []drainOutcome
			for _, jh := range jobs {
				for _, in := range jh.GetInstances() {
					if in.GetNodeId() != node || in.GetPhase() == norsk.InstancePhaseStopped || in.GetDesired() == norsk.InstanceDesiredStopped {
						continue
					}
					if !autoPlaced(jh.GetJob()) {
						outcomes = append(outcomes, drainOutcome{JobID: in.GetJobId(), Role: in.GetRole(), Result: "skipped",
							Reason: "not placed by the AutoManager (started by hand): stop it or move it yourself"})
						continue
					}
					todo = append(todo, work{in.GetJobId(), in.GetRole()})
				}
			}
			table := g.output == "" || g.output == "table"
			var mu sync.Mutex
			line := func(format string, a ...any) {
				if table {
					mu.Lock()
					fmt.Fprintf(g.out, format+"\n", a...)
					mu.Unlock()
				}
			}
			line("Draining %s: %d job(s) to move (%s), %d skipped", node, len(todo), norsk.StrategyName(s), len(outcomes))
			for _, o := range outcomes {
				line("  %-32s skipped: %s", o.JobID, o.Reason)
			}
			sem := make(chan struct{}, parallel)
			var wg sync.WaitGroup
			results := make([]drainOutcome, len(todo))
			for i, w := range todo {
				wg.Add(1)
				sem <- struct{}{}
				go func() {
					defer wg.Done()
					defer func() { <-sem }()
					start := time.Now()
					o := drainOutcome{JobID: w.jobID, Role: w.role}
					defer func() {
						o.TookMs = time.Since(start).Milliseconds()
						results[i] = o
						switch o.Result {
						case "moved":
							line("  %-32s moved to %s in %s (%s)", o.JobID, o.To, fmtDur(time.Since(start)), o.MigrationID)
						default:
							line("  %-32s %s: %s", o.JobID, o.Result, o.Reason)
						}
					}()
					st, err := m.MigrateJob(ctx, w.jobID, norsk.MigrateOptions{Strategy: s, SourceRole: w.role})
					if err != nil {
						o.Result, o.Reason = "failed", err.Error()
						if st != nil {
							o.MigrationID = st.GetMigrationId()
						}
						return
					}
					o.MigrationID, o.To = st.GetMigrationId(), st.GetTargetNodeId()
					line("  %-32s %s → %s (%s)", w.jobID, node, st.GetTargetNodeId(), norsk.PhaseName(st.GetPhase()))
					st, err = g.followMigration(ctx, m, st, deadline, nil)
					switch {
					case err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded):
						o.Result, o.Reason = "inFlight", fmt.Sprintf("still %s when the drain's deadline passed", norsk.PhaseName(st.GetPhase()))
					case err != nil:
						o.Result, o.Reason = "failed", err.Error()
					case st.GetPhase() == norsk.PhaseDone:
						o.Result = "moved"
					default:
						o.Result, o.Reason = "failed", st.GetAbortReason()
					}
				}()
			}
			wg.Wait()
			outcomes = append(outcomes, results...)
			sort.SliceStable(outcomes, func(i, j int) bool { return outcomes[i].JobID < outcomes[j].JobID })
			sum := drainSummary{NodeID: node, Jobs: outcomes}
			count := map[string]int{}
			for _, o := range outcomes {
				count[o.Result]++
			}
			if err := g.printer().Print(result{data: sum, table: func(w io.Writer) {
				fmt.Fprintf(w, "\nNode %s drained: %d moved, %d failed, %d skipped, %d still in flight; it takes no new work (undo with --undo)\n",
					node, count["moved"], count["failed"], count["skipped"], count["inFlight"])
			}}); err != nil {
				return err
			}
			if n := len(outcomes) - count["moved"]; n > 0 {
				return fmt.Errorf("drain %s: %d job(s) were not moved", node, n)
			}
			return nil
		},
	}
	f := c.Flags()
	f.StringVar(&strategy, "strategy", "", "overlap (default), handover or stopThenStart")
	f.DurationVar(&deadline, "deadline", 15*time.Minute, "give up waiting after this long")
	f.IntVar(&parallel, "parallel", 2, "jobs moved at once")
	f.BoolVar(&undo, "undo", false, "let the node take new work again")
	return c
}

// autoPlaced: the AutoManager places (and so can migrate) the job.
func autoPlaced(j *norsk.Job) bool {
	return j.GetTags()["bundleId"] != "" || j.GetAutoPlacement() != nil
}
