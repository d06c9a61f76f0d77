package jobs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"time"

	"github.com/spf13/cobra"

	"github.com/norsk-go/norsk-manager/internal/cli/cmdutil"
	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

// instanceFlags are the flags that name an instance of a job.
type instanceFlags struct {
	node, role string
	w          cmdutil.WaitFlags
}

func (f *instanceFlags) add(cmd *cobra.Command, g *cmdutil.Globals, waitWhat string) {
	cmd.Flags().StringVar(&f.node, "node", "", "the node's id (required)")
	cmd.Flags().StringVar(&f.role, "role", "primary", "the instance's role")
	f.w.Add(cmd, "the event stream until the instance "+waitWhat, 60*time.Second)
	_ = cmd.RegisterFlagCompletionFunc("node", g.CompleteNodeIDs)
}

func (f *instanceFlags) check(cmd *cobra.Command) error {
	if f.node == "" {
		return cmdutil.UsageErrorf("--node is required")
	}
	if f.role == "" {
		return cmdutil.UsageErrorf("--role must not be empty")
	}
	return f.w.Check(cmd)
}

func newJobStartCommand(g *cmdutil.Globals) *cobra.Command {
	var (
		f           instanceFlags
		runtimeRole string
		deferStart  bool
	)
	cmd := &cobra.Command{
		Use:   "start ID --node NODE [--role primary]",
		Short: "Start a job's instance on a node and wait until it runs",
		Long: `Bind the instance (ID, --role) to --node and start it. With --wait (the
default) follow the event stream until the instance runs, printing its ports,
or is prepared (--defer-start), and fail with the reason when it stops first.`,
		Example:           `  norsk-ctl job start news-1 --node node-1 --role primary`,
		Args:              cmdutil.ExactArgs("ID"),
		ValidArgsFunction: g.CompleteJobIDs,
		Annotations:       cmdutil.WithIDFlags(cmdutil.TakesIDs("job"), "node=node"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := f.check(cmd); err != nil {
				return err
			}
			m, err := g.Manager(cmd.Context())
			if err != nil {
				return err
			}
			ctx, cancel := g.Call(cmd.Context())
			token, err := m.StartJob(ctx, args[0], f.role, f.node, norsk.StartJobOptions{RuntimeRole: runtimeRole, DeferStart: deferStart})
			cancel()
			if err != nil {
				return fmt.Errorf("start job %s (%s) on %s: %w", args[0], f.role, f.node, err)
			}
			target := instanceTarget{jobID: args[0], role: f.role, nodeID: f.node, token: token}
			if !f.w.Waiting() {
				in := &norsk.Instance{JobId: args[0], Role: f.role, NodeId: f.node, FencingToken: token, Phase: norsk.InstancePhaseProvisioned}
				return printInstance(g, in, "started")
			}
			fmt.Fprintf(g.ErrOut, "Started %s with fencing token %d; waiting for it to %s…\n", target, token, map[bool]string{true: "be prepared", false: "run"}[deferStart])
			want := wantRunning
			if deferStart {
				want = wantPrepared
			}
			return waitAndPrint(g, cmd.Context(), m, target, token, want, "provisioned", f.w.Timeout)
		},
	}
	f.add(cmd, g, "runs (or is prepared, with --defer-start)")
	cmd.Flags().StringVar(&runtimeRole, "runtime-role", "", "the role the job is told (NORSK_RUNTIME_ROLE); default --role")
	cmd.Flags().BoolVar(&deferStart, "defer-start", false, "create the containers but start none (then: job start-prepared)")
	return cmd
}

func newJobStopCommand(g *cmdutil.Globals) *cobra.Command {
	var (
		f     instanceFlags
		grace time.Duration
	)
	cmd := &cobra.Command{
		Use:               "stop ID --node NODE [--role primary]",
		Short:             "Stop a job's instance on a node",
		Args:              cmdutil.ExactArgs("ID"),
		ValidArgsFunction: g.CompleteJobIDs,
		Annotations:       cmdutil.WithIDFlags(cmdutil.TakesIDs("job"), "node=node"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := f.check(cmd); err != nil {
				return err
			}
			if grace < 0 {
				return cmdutil.UsageErrorf("--grace must not be negative")
			}
			m, err := g.Manager(cmd.Context())
			if err != nil {
				return err
			}
			// The instance's fencing token is where waiting starts: every
			// later step of the instance has a higher index.
			var token uint64
			if f.w.Waiting() {
				j, err := jobByID(g, cmd, args[0])
				if err != nil {
					return err
				}
				in := findInstance(j, f.role)
				if in == nil || in.GetNodeId() != f.node {
					return fmt.Errorf("stop job %s: no %s instance on node %s", args[0], f.role, f.node)
				}
				token = in.GetFencingToken()
			}
			ctx, cancel := g.Call(cmd.Context())
			err = m.StopJob(ctx, args[0], f.role, f.node, norsk.StopJobOptions{Grace: grace})
			cancel()
			if err != nil {
				return fmt.Errorf("stop job %s (%s) on %s: %w", args[0], f.role, f.node, err)
			}
			target := instanceTarget{jobID: args[0], role: f.role, nodeID: f.node, token: token}
			if !f.w.Waiting() {
				return g.PrintDone("job", args[0], fmt.Sprintf("(%s on %s) stopping", f.role, f.node))
			}
			fmt.Fprintf(g.ErrOut, "Stopping %s; waiting for it to stop…\n", target)
			return waitAndPrint(g, cmd.Context(), m, target, token, wantStopped, "stopping", f.w.Timeout)
		},
	}
	f.add(cmd, g, "has stopped")
	cmd.Flags().DurationVar(&grace, "grace", 0, "how long services get to exit before they are killed (0 = the worker's default)")
	return cmd
}

func newJobStartPreparedCommand(g *cmdutil.Globals) *cobra.Command {
	var f instanceFlags
	cmd := &cobra.Command{
		Use:               "start-prepared ID --node NODE [--role primary]",
		Short:             "Start an instance that was started with --defer-start",
		Args:              cmdutil.ExactArgs("ID"),
		ValidArgsFunction: g.CompleteJobIDs,
		Annotations:       cmdutil.WithIDFlags(cmdutil.TakesIDs("job"), "node=node"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := f.check(cmd); err != nil {
				return err
			}
			m, err := g.Manager(cmd.Context())
			if err != nil {
				return err
			}
			var token uint64
			if f.w.Waiting() {
				j, err := jobByID(g, cmd, args[0])
				if err != nil {
					return err
				}
				if in := findInstance(j, f.role); in != nil && in.GetNodeId() == f.node {
					token = in.GetFencingToken()
				}
			}
			ctx, cancel := g.Call(cmd.Context())
			err = m.StartPreparedJob(ctx, args[0], f.role, f.node)
			cancel()
			if err != nil {
				return fmt.Errorf("start prepared job %s (%s) on %s: %w", args[0], f.role, f.node, err)
			}
			target := instanceTarget{jobID: args[0], role: f.role, nodeID: f.node, token: token}
			if !f.w.Waiting() || token == 0 {
				return g.PrintDone("job", args[0], fmt.Sprintf("(%s on %s) starting", f.role, f.node))
			}
			return waitAndPrint(g, cmd.Context(), m, target, token, wantRunning, "prepared", f.w.Timeout)
		},
	}
	f.add(cmd, g, "runs")
	return cmd
}

func findInstance(j *norsk.JobWithHistory, role string) *norsk.Instance {
	for _, in := range j.GetInstances() {
		if in.GetRole() == role {
			return in
		}
	}
	return nil
}

// instanceTarget is the instance a wait is about: its binding's fencing
// token tells it from earlier and later bindings of the same role.
type instanceTarget struct {
	jobID, role, nodeID string
	token               uint64
}

func (t instanceTarget) String() string {
	return fmt.Sprintf("job %s (%s on %s)", t.jobID, t.role, t.nodeID)
}

// is reports whether ref names the target instance.
func (t instanceTarget) is(ref *norsk.InstanceRef) bool {
	return ref != nil && ref.GetRole() == t.role && ref.GetNodeId() == t.nodeID &&
		(ref.GetFencingToken() == 0 || t.token == 0 || ref.GetFencingToken() == t.token)
}

type want int

const (
	wantRunning want = iota
	wantPrepared
	wantStopped
)

func (w want) String() string {
	return [...]string{"run", "be prepared", "stop"}[w]
}

// waiter follows a target instance through events until it reaches what is
// wanted (done), or cannot any more (failed).
type waiter struct {
	target instanceTarget
	want   want
	// last is what was last seen of the instance, for a timeout message;
	// stopping is the reason it is stopping, when it is.
	last, stopping string
	// inSnapshot: the current snapshot held the job.
	inSnapshot bool
}

// step looks at one event. It returns done when the wait is over, with a
// non-nil error when the instance did not get where it was wanted.
func (w *waiter) step(ev *norsk.Event) (done bool, err error) {
	t := w.target
	switch k := ev.GetKind().(type) {
	case *norsk.Event_JobCreated:
		return w.entry(k.JobCreated)
	case *norsk.Event_JobUpdated:
		return w.entry(k.JobUpdated)
	case *norsk.Event_JobSnapshot:
		if k.JobSnapshot.GetJob().GetJobId() == t.jobID {
			w.inSnapshot = true
			return w.snapshot(k.JobSnapshot)
		}
	case *norsk.Event_JobDeleted:
		if k.JobDeleted.GetJobId() == t.jobID {
			if w.want == wantStopped {
				return true, nil
			}
			return true, fmt.Errorf("%s: the job was deleted", t)
		}
	case *norsk.Event_NodeTerminated:
		if k.NodeTerminated.GetNode().GetNodeId() == t.nodeID && w.want != wantStopped {
			return true, fmt.Errorf("%s: node %s was terminated %s", t, t.nodeID, k.NodeTerminated.GetReason())
		}
	case *norsk.Event_InitialDataComplete:
		// A snapshot (a resync) replaced what came before: without the job
		// in it, the job is gone.
		sawJob := w.inSnapshot
		w.inSnapshot = false
		if !sawJob {
			if w.want == wantStopped {
				return true, nil
			}
			return true, fmt.Errorf("%s: the job no longer exists", t)
		}
	}
	return false, nil
}

// entry follows the history entry a job event added.
func (w *waiter) entry(e *norsk.JobEvent) (bool, error) {
	t := w.target
	if e.GetJob().GetJob().GetJobId() != t.jobID {
		return false, nil
	}
	entry := e.GetEntry()
	switch {
	case entry == nil:
		return false, nil
	case entry.GetRejected() != nil && w.want != wantStopped:
		return true, fmt.Errorf("%s: the job was marked failed: %s", t, entry.GetRejected().GetReason())
	case entry.GetCompleted() != nil && w.want != wantStopped:
		return true, fmt.Errorf("%s: the job was completed", t)
	}
	if !t.is(cmdutil.HistoryInstance(entry)) {
		return false, nil
	}
	w.last = cmdutil.HistoryEvent(entry)
	switch {
	case entry.GetRunning() != nil:
		return w.want != wantStopped, nil
	case entry.GetPrepared() != nil:
		return w.want == wantPrepared, nil
	case entry.GetStopping() != nil:
		w.stopping = cmdutil.StoppingReason(entry.GetStopping())
		w.last += " (" + w.stopping + ")"
	case entry.GetStopped() != nil:
		if w.want == wantStopped {
			return true, nil
		}
		return true, w.failure(cmdutil.HistoryDetails(entry))
	}
	return false, nil
}

// snapshot judges the instance from a job snapshot (a resync).
func (w *waiter) snapshot(j *norsk.JobWithHistory) (bool, error) {
	in := findInstance(j, w.target.role)
	if in == nil || in.GetNodeId() != w.target.nodeID || (w.target.token != 0 && in.GetFencingToken() != w.target.token) {
		if w.want == wantStopped {
			return true, nil
		}
		return true, fmt.Errorf("%s: the instance is no longer bound (another start replaced it, or it was removed)", w.target)
	}
	w.last = cmdutil.EnumWord(in.GetPhase())
	switch in.GetPhase() {
	case norsk.InstancePhaseRunning:
		return w.want != wantStopped, nil
	case norsk.InstancePhasePrepared:
		return w.want == wantPrepared, nil
	case norsk.InstancePhaseStopped:
		if w.want == wantStopped {
			return true, nil
		}
		w.stopping = cmdutil.StoppingReason(&norsk.InstanceStopping{Reason: in.GetStopReason(), AdditionalReason: in.GetStopAdditionalReason()})
		return true, w.failure("")
	}
	return false, nil
}

func (w *waiter) failure(details string) error {
	msg := fmt.Sprintf("%s stopped before it could %s", w.target, w.want)
	if w.stopping != "" {
		msg += ": " + w.stopping
	}
	if details != "" && details != "-" {
		msg += " (" + details + ")"
	}
	return errors.New(msg)
}

// wait follows the event stream after index after until the target gets
// where w wants it, or timeout passes.
func wait(g *cmdutil.Globals, ctx context.Context, m *norsk.Manager, w *waiter, after uint64, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	s := m.EventStream(ctx, norsk.EventStreamSettings{AfterIndex: after})
	defer s.Close()
	for s.Next() {
		pullProgress(g, w.target, s.Event())
		if done, err := w.step(s.Event()); done {
			return err
		}
	}
	err := s.Err()
	last := ""
	if w.last != "" {
		last = " (last seen: " + w.last + ")"
	}
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded) || errors.Is(err, norsk.ErrDeadlineExceeded):
		return fmt.Errorf("timed out after %s waiting for %s to %s%s", timeout, w.target, w.want, last)
	case errors.Is(err, norsk.ErrCanceled):
		return fmt.Errorf("interrupted while waiting for %s to %s%s", w.target, w.want, last)
	case err != nil:
		return fmt.Errorf("waiting for %s to %s: %w", w.target, w.want, err)
	}
	return fmt.Errorf("the event stream ended while waiting for %s to %s%s", w.target, w.want, last)
}

// pullProgress writes to stderr the image-pull notices the target's
// start adds to its job's history (its pulls' progress, end or failure),
// so a wait shows what it is waiting for.
func pullProgress(g *cmdutil.Globals, t instanceTarget, ev *norsk.Event) {
	je := ev.GetJobUpdated()
	n := je.GetEntry().GetNotice()
	if je == nil || n == nil || n.GetKind() != "image-pull" || je.GetJob().GetJob().GetJobId() != t.jobID {
		return
	}
	if in := n.GetInstance(); in.GetRole() != t.role || (t.token != 0 && in.GetFencingToken() != t.token) {
		return
	}
	fmt.Fprintf(g.ErrOut, "  %s\n", n.GetMessage())
}

// waitAndPrint waits for the target and prints the instance as it then is.
// lastSeen is the instance's phase when the wait starts, for a timeout
// message.
func waitAndPrint(g *cmdutil.Globals, ctx context.Context, m *norsk.Manager, t instanceTarget, after uint64, wt want, lastSeen string, timeout time.Duration) error {
	w := &waiter{target: t, want: wt, last: lastSeen}
	if err := wait(g, ctx, m, w, after, timeout); err != nil {
		return err
	}
	callCtx, cancel := g.Call(ctx)
	defer cancel()
	j, err := m.JobById(callCtx, t.jobID)
	var in *norsk.Instance
	switch {
	case errors.Is(err, norsk.ErrNotFound) && wt == wantStopped:
	case err != nil:
		return fmt.Errorf("get job %s: %w", t.jobID, err)
	default:
		in = findInstance(j, t.role)
	}
	if in == nil || in.GetNodeId() != t.nodeID {
		in = &norsk.Instance{JobId: t.jobID, Role: t.role, NodeId: t.nodeID, FencingToken: t.token, Phase: norsk.InstancePhaseStopped}
	}
	return printInstance(g, in, map[want]string{wantRunning: "running", wantPrepared: "prepared", wantStopped: "stopped"}[wt])
}

// printInstance reports an instance: the Instance message, or a line and
// its ports.
func printInstance(g *cmdutil.Globals, in *norsk.Instance, what string) error {
	return g.Printer().Print(cmdutil.Result{Data: in, Table: func(w io.Writer) {
		fmt.Fprintf(w, "Job %s: %s %s on %s (fencing token %d)\n", in.GetJobId(), in.GetRole(), what, in.GetNodeId(), in.GetFencingToken())
		ports := in.GetServicePortMappings()
		for _, svc := range slices.Sorted(maps.Keys(ports)) {
			for _, p := range ports[svc].GetMappings() {
				fmt.Fprintf(w, "  %s\t%s\t%s\n", svc, cmdutil.ResolvedPort(p), p.GetUrl())
			}
		}
	}})
}
