package automanager

import (
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"
	"pgregory.net/rapid"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
)

var drainT0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// placedJob is an AutoManager-placed job with one instance per (role, node).
func placedJob(id string, auto bool, insts ...*managerv1.Instance) *managerv1.JobWithHistory {
	j := &managerv1.Job{JobId: id}
	if auto {
		j.AutoPlacement = &managerv1.AutoPlacement{}
	}
	return &managerv1.JobWithHistory{Job: j, Instances: insts}
}

func inst(job, role, node string, phase managerv1.InstancePhase) *managerv1.Instance {
	return &managerv1.Instance{JobId: job, Role: role, NodeId: node, Phase: phase}
}

func drainIn(jobs []*managerv1.JobWithHistory, migs []*managerv1.MigrationState, now time.Time) drainInput {
	return newDrainInput(View{Jobs: jobs, Migrations: migs}, now)
}

func results(d *managerv1.NodeDrain) string {
	s := ""
	for i, it := range d.GetItems() {
		if i > 0 {
			s += " "
		}
		s += it.GetJobId() + ":" + DrainItemResultWord(it.GetResult())
	}
	return s
}

// DrainItemResultWord names a result for the tests.
func DrainItemResultWord(r managerv1.DrainItemResult) string {
	return map[managerv1.DrainItemResult]string{drainPending: "pending", drainMoving: "moving", drainMoved: "moved", drainFailed: "failed",
		drainSkipped: "skipped", drainStopped: "stopped", drainGone: "gone"}[r]
}

const phRun = managerv1.InstancePhase_INSTANCE_PHASE_RUNNING

func TestPlanDrain(t *testing.T) {
	t.Parallel()
	start := func(par uint32, deadline time.Duration) *managerv1.NodeDrain {
		d := &managerv1.NodeDrain{NodeId: "n1", State: drainRunning, Parallel: par, Strategy: stratOverlap, Revision: 7}
		if deadline > 0 {
			d.Deadline = timestamppb.New(drainT0.Add(deadline))
		}
		return d
	}
	withItems := func(d *managerv1.NodeDrain, items ...*managerv1.DrainItem) *managerv1.NodeDrain {
		d.Listed, d.Items = true, items
		return d
	}
	item := func(job string, r managerv1.DrainItemResult, mig string) *managerv1.DrainItem {
		return &managerv1.DrainItem{JobId: job, Role: "primary", Result: r, MigrationId: mig, Attempts: 1}
	}
	mig := func(id, job string, phase managerv1.MigrationPhase, target string) *managerv1.MigrationState {
		return &managerv1.MigrationState{MigrationId: id, SourceJobId: job, SourceRole: "primary", Phase: phase, TargetNodeId: target, AbortReason: "no room"}
	}
	for _, tc := range []struct {
		name    string
		d       *managerv1.NodeDrain
		jobs    []*managerv1.JobWithHistory
		migs    []*managerv1.MigrationState
		at      time.Duration
		want    string
		migrate []string
		stop    []string
		cancel  []string
		state   managerv1.NodeDrainState
	}{{
		name: "lists the node and starts parallel at once; a job started by hand is skipped",
		d:    start(2, time.Hour),
		jobs: []*managerv1.JobWithHistory{
			placedJob("a", true, inst("a", "primary", "n1", phRun)), placedJob("b", true, inst("b", "primary", "n1", phRun)),
			placedJob("c", true, inst("c", "primary", "n1", phRun)), placedJob("h", false, inst("h", "primary", "n1", phRun)),
			placedJob("x", true, inst("x", "primary", "n2", phRun)),
		},
		want: "a:pending b:pending c:pending h:skipped", migrate: []string{"a", "b"}, state: drainRunning,
	}, {
		name: "a done migration is moved, an aborted one waits for its retry",
		d:    withItems(start(1, time.Hour), item("a", drainMoving, "m1"), item("b", drainMoving, "m2")),
		jobs: []*managerv1.JobWithHistory{
			placedJob("a", true, inst("a", "primary", "n1", managerv1.InstancePhase_INSTANCE_PHASE_STOPPED), inst("a", "primary@m1", "n2", phRun)),
			placedJob("b", true, inst("b", "primary", "n1", phRun)),
		},
		migs: []*managerv1.MigrationState{mig("m1", "a", phDone, "n2"), mig("m2", "b", phAborted, "")},
		want: "a:moved b:pending", state: drainRunning,
	}, {
		name: "with no deadline an item is given up after the last attempt; the drain ends not drained",
		d:    withItems(start(1, 0), &managerv1.DrainItem{JobId: "b", Role: "primary", Result: drainMoving, MigrationId: "m2", Attempts: DrainMaxAttempts}),
		jobs: []*managerv1.JobWithHistory{placedJob("b", true, inst("b", "primary", "n1", phRun))},
		migs: []*managerv1.MigrationState{mig("m2", "b", phAborted, "")},
		want: "b:failed", state: drainNotDrained,
	}, {
		name: "past the deadline what is pending is stopped and what moves is aborted",
		d:    withItems(start(2, time.Minute), item("a", drainPending, ""), item("b", drainMoving, "m2")),
		jobs: []*managerv1.JobWithHistory{
			placedJob("a", true, inst("a", "primary", "n1", phRun)), placedJob("b", true, inst("b", "primary", "n1", phRun)),
		},
		migs: []*managerv1.MigrationState{mig("m2", "b", phLaunching, "n2")},
		at:   2 * time.Minute,
		want: "a:pending b:moving", stop: []string{"a"}, cancel: []string{"b"}, state: drainRunning,
	}, {
		name: "a job that left the node by itself is gone; one moved by another hand is moved; all done: drained",
		d:    withItems(start(2, time.Hour), item("a", drainPending, ""), item("b", drainPending, "")),
		jobs: []*managerv1.JobWithHistory{
			placedJob("a", true, inst("a", "primary", "n1", managerv1.InstancePhase_INSTANCE_PHASE_STOPPED)),
			placedJob("b", true, inst("b", "primary", "n3", phRun)),
		},
		want: "a:gone b:moved", state: drainDrained,
	}, {
		name: "a pending job with a migration in flight adopts it (a start whose record was lost)",
		d:    withItems(start(1, time.Hour), item("a", drainPending, "")),
		jobs: []*managerv1.JobWithHistory{placedJob("a", true, inst("a", "primary", "n1", phRun))},
		migs: []*managerv1.MigrationState{mig("m9", "a", phApplying, "n2")},
		want: "a:moving", state: drainRunning,
	}, {
		name: "a migration target on the node waits for its migration, not adopting it",
		d:    withItems(start(1, time.Hour), &managerv1.DrainItem{JobId: "a", Role: "primary@m9", Result: drainPending}),
		jobs: []*managerv1.JobWithHistory{placedJob("a", true, inst("a", "primary", "n2", phRun), inst("a", "primary@m9", "n1", phRun))},
		migs: []*managerv1.MigrationState{{MigrationId: "m9", SourceJobId: "a", SourceRole: "primary", Phase: phApplying, TargetNodeId: "n1"}},
		want: "a:pending", state: drainRunning,
	}, {
		name: "an empty node is drained at once",
		d:    start(2, time.Hour),
		want: "", state: drainDrained,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			p := planDrain(tc.d, drainIn(tc.jobs, tc.migs, drainT0.Add(tc.at)))
			if got := results(p.Drain); got != tc.want {
				t.Errorf("items = %q, want %q", got, tc.want)
			}
			names := func(idx []int) []string {
				var out []string
				for _, i := range idx {
					out = append(out, p.Drain.GetItems()[i].GetJobId())
				}
				return out
			}
			if got := fmt.Sprint(names(p.Migrate)); got != fmt.Sprint(tc.migrate) {
				t.Errorf("migrate %s, want %v", got, tc.migrate)
			}
			if got := fmt.Sprint(names(p.Stop)); got != fmt.Sprint(tc.stop) {
				t.Errorf("stop %s, want %v", got, tc.stop)
			}
			if got := fmt.Sprint(names(p.Cancel)); got != fmt.Sprint(tc.cancel) {
				t.Errorf("cancel %s, want %v", got, tc.cancel)
			}
			if p.Drain.GetState() != tc.state {
				t.Errorf("state %s, want %s", p.Drain.GetState(), tc.state)
			}
		})
	}
}

// The drain step's invariants over random drains and views: never more
// than parallel moves at once (adopted migrations aside), a move only for
// a pending item whose instance still runs on the node with no migration
// in flight and before the deadline, stops only past the deadline, no
// ended item reopened, every live instance on the node an item, and the
// drain ended exactly when nothing is pending or moving.
func TestPlanDrainProperties(t *testing.T) {
	t.Parallel()
	results := []managerv1.DrainItemResult{drainPending, drainMoving, drainMoved, drainFailed, drainSkipped, drainStopped, drainGone}
	phases := []managerv1.MigrationPhase{phLaunching, phApplying, phDone, phAborted}
	rapid.Check(t, func(t *rapid.T) {
		nodes := []string{"n1", "n2"}
		njobs := rapid.IntRange(0, 6).Draw(t, "jobs")
		var jobs []*managerv1.JobWithHistory
		var migs []*managerv1.MigrationState
		d := &managerv1.NodeDrain{NodeId: "n1", State: drainRunning, Parallel: uint32(rapid.IntRange(1, 3).Draw(t, "parallel")),
			Listed: rapid.Bool().Draw(t, "listed")}
		if rapid.Bool().Draw(t, "hasDeadline") {
			d.Deadline = timestamppb.New(drainT0.Add(time.Minute))
		}
		for i := range njobs {
			id := fmt.Sprintf("j%d", i)
			phase := phRun
			if rapid.Bool().Draw(t, "stopped"+id) {
				phase = managerv1.InstancePhase_INSTANCE_PHASE_STOPPED
			}
			jobs = append(jobs, placedJob(id, rapid.Bool().Draw(t, "auto"+id), inst(id, "primary", rapid.SampledFrom(nodes).Draw(t, "node"+id), phase)))
			if rapid.Bool().Draw(t, "mig"+id) {
				migs = append(migs, &managerv1.MigrationState{MigrationId: "m" + id, SourceJobId: id, SourceRole: "primary", Phase: rapid.SampledFrom(phases).Draw(t, "phase"+id), TargetNodeId: "n2"})
			}
			if d.Listed && rapid.Bool().Draw(t, "item"+id) {
				d.Items = append(d.Items, &managerv1.DrainItem{JobId: id, Role: "primary", Result: rapid.SampledFrom(results).Draw(t, "result"+id),
					MigrationId: "m" + id, Attempts: uint32(rapid.IntRange(0, 4).Draw(t, "attempts"+id))})
			}
		}
		now := drainT0.Add(time.Duration(rapid.IntRange(0, 120).Draw(t, "at")) * time.Second)
		in := drainIn(jobs, migs, now)
		before := map[string]managerv1.DrainItemResult{}
		for _, it := range d.GetItems() {
			before[it.GetJobId()] = it.GetResult()
		}
		p := planDrain(d, in)
		past := d.Deadline != nil && !now.Before(d.Deadline.AsTime())
		moving := 0
		for _, it := range p.Drain.GetItems() {
			if it.GetResult() == drainMoving {
				moving++
			}
			if b, ok := before[it.GetJobId()]; ok {
				switch b {
				case drainMoved, drainFailed, drainStopped, drainGone:
					if it.GetResult() != b {
						t.Fatalf("%s: ended item %s reopened as %s", it.GetJobId(), DrainItemResultWord(b), DrainItemResultWord(it.GetResult()))
					}
				case drainSkipped:
					if it.GetResult() != b && it.GetResult() != drainGone {
						t.Fatalf("%s: skipped item became %s", it.GetJobId(), DrainItemResultWord(it.GetResult()))
					}
				}
			}
		}
		if len(p.Migrate) > 0 && moving+len(p.Migrate) > int(d.Parallel) {
			t.Fatalf("%d moving + %d started > parallel %d", moving, len(p.Migrate), d.Parallel)
		}
		for _, idx := range p.Migrate {
			it := p.Drain.GetItems()[idx]
			i := in.instance(it.GetJobId(), it.GetRole())
			if past || it.GetResult() != drainPending || i == nil || !liveInstance(i) || i.GetNodeId() != "n1" || in.InFlight[it.GetJobId()] != nil {
				t.Fatalf("started a move for %v (instance %v, past deadline %v)", it, i, past)
			}
		}
		if len(p.Stop) > 0 && !past {
			t.Fatalf("stopped %d before the deadline", len(p.Stop))
		}
		items := map[string]bool{}
		for _, it := range p.Drain.GetItems() {
			items[it.GetJobId()] = true
		}
		for _, jh := range jobs {
			for _, i := range jh.GetInstances() {
				if liveInstance(i) && i.GetNodeId() == "n1" && !items[i.GetJobId()] {
					t.Fatalf("%s runs on the node but is no item", i.GetJobId())
				}
			}
		}
		open := false
		for _, it := range p.Drain.GetItems() {
			if r := it.GetResult(); r == drainPending || r == drainMoving {
				open = true
			}
		}
		if ended := p.Drain.GetState() != drainRunning; ended == open {
			t.Fatalf("state %s with open items %v (%s)", p.Drain.GetState(), open, results)
		}
	})
}
