package automanager

import (
	"context"
	"fmt"
	"log/slog"
	"testing"

	"pgregory.net/rapid"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/internal/clock"
)

// A migration target placed on the AutoManager's kept state lands where
// one placed on a fresh read of the whole state does, with the same
// summary, refusal and degradations, for any fleet: nodes online,
// starting, draining or lost, with or without the job socket, and targets
// pinned or not, by any strategy.
func TestKeptTargetPlacementMatchesRead(t *testing.T) {
	t.Parallel()
	states := []managerv1.NodeState{nodeOnline, nodeOnline, nodeOnline, nodeStarting, nodeStopping, managerv1.NodeState_NODE_STATE_LOST}
	strategies := []managerv1.MigrationStrategy{stratOverlap, stratHandover, stratStopThenStart}
	rapid.Check(t, func(t *rapid.T) {
		api := &countingAPI{fakeAPI: newFakeAPI(), reads: map[string]int{}}
		nn := rapid.IntRange(2, 8).Draw(t, "nodes")
		for i := range nn {
			n := node(fmt.Sprintf("n%d", i), "rack", fmt.Sprintf("r%d", i%3))
			n.Hardware.Vcpus = uint32(rapid.IntRange(1, 3).Draw(t, "vcpus"))
			n.State = rapid.SampledFrom(states).Draw(t, "state")
			if i == 0 {
				n.State = nodeOnline // the jobs run on online nodes
			}
			n.Elastic = n.State == nodeStarting && rapid.Bool().Draw(t, "elastic")
			if rapid.Bool().Draw(t, "draining") {
				n.Draining = true
			}
			if rapid.Bool().Draw(t, "socket") {
				n.Capabilities = []*managerv1.Capability{{Name: JobSocketCapability, Count: 1}}
			}
			api.nodes = append(api.nodes, n)
		}
		nj := rapid.IntRange(1, 10).Draw(t, "jobs")
		for i := range nj {
			jh := autoJob(fmt.Sprintf("j%d", i))
			jh.Job.State = managerv1.JobState_JOB_STATE_ACTIVE
			api.put(jh)
			on := rapid.IntRange(0, nn-1).Draw(t, "on")
			if api.nodes[on].GetState() != nodeOnline {
				on = 0
			}
			api.instance(jh.Job.JobId, "primary", fmt.Sprintf("n%d", on), phRunning)
		}
		am := New(Config{API: api, Clock: clock.NewFake(t0), Logger: slog.New(slog.DiscardHandler)})
		ctx := context.Background()
		if _, err := am.Pass(ctx); err != nil {
			t.Fatal(err)
		}
		if got := api.starts(); len(got) > 0 {
			t.Fatalf("every job runs on an online node, yet the pass started %v", got)
		}
		// The saga without the kept state reads the fake, as the mirror did.
		read := newSaga(api, clock.NewFake(t0), slog.New(slog.DiscardHandler), Policy{}, nil)
		kept := keptTargets{am}
		for k := range rapid.IntRange(1, 4).Draw(t, "migrations") {
			job := fmt.Sprintf("j%d", rapid.IntRange(0, nj-1).Draw(t, "source"))
			src := api.jobs[job].GetInstances()[0].GetNodeId()
			st := &managerv1.MigrationState{MigrationId: fmt.Sprintf("m%d", k), SourceJobId: job, SourceRole: "primary", SourceNodeId: src,
				TargetRole: fmt.Sprintf("primary@m%d", k), Strategy: rapid.SampledFrom(strategies).Draw(t, "strategy")}
			if rapid.Bool().Draw(t, "pinned") {
				st.RequestedTargetNodeId = fmt.Sprintf("n%d", rapid.IntRange(0, nn).Draw(t, "pin")) // n<nn> is no node
			}
			node, summary, why, degr, ok := kept.placeTarget(st)
			rn, rs, rw, rd := read.placeTarget(ctx, &migration{st: st})
			if !ok {
				continue // the kept state declined; the saga read instead
			}
			if node != rn || summary != rs || why != rw || fmt.Sprint(degr) != fmt.Sprint(rd) {
				t.Fatalf("migration of %s (%v, pin %q):\nkept: %q %q %q %v\nread: %q %q %q %v",
					job, st.GetStrategy(), st.GetRequestedTargetNodeId(), node, summary, why, degr, rn, rs, rw, rd)
			}
		}
	})
}

// A target the saga started takes its room in the kept state at once: the
// next target, placed before the store's record of the first is read
// back, does not count on it.
func TestKeptTargetStartedTakesRoom(t *testing.T) {
	t.Parallel()
	api := newFakeAPI()
	src := node("a")
	src.Hardware.Vcpus = 2
	api.nodes = []*managerv1.Node{src, smallNode("b")}
	for _, id := range []string{"x", "y"} {
		jh := autoJob(id)
		jh.Job.State = managerv1.JobState_JOB_STATE_ACTIVE
		api.put(jh)
		api.instance(id, "primary", "a", phRunning)
	}
	am := New(Config{API: api, Clock: clock.NewFake(t0), Logger: slog.New(slog.DiscardHandler)})
	if _, err := am.Pass(context.Background()); err != nil {
		t.Fatal(err)
	}
	kept := keptTargets{am}
	first := &managerv1.MigrationState{MigrationId: "m1", SourceJobId: "x", SourceRole: "primary", SourceNodeId: "a", TargetRole: "primary@m1", Strategy: stratOverlap}
	node, _, why, _, ok := kept.placeTarget(first)
	if !ok || node != "b" {
		t.Fatalf("first target: %q (%s), ok %v; want b", node, why, ok)
	}
	first.TargetNodeId = node
	kept.started(first)
	second := &managerv1.MigrationState{MigrationId: "m2", SourceJobId: "y", SourceRole: "primary", SourceNodeId: "a", TargetRole: "primary@m2", Strategy: stratOverlap}
	if node, _, why, _, _ := kept.placeTarget(second); node != "" {
		t.Fatalf("second target placed on %q, the room the first took (%s)", node, why)
	}
	// The store's record read back replaces the note: still one target on b.
	api.instance("x", "primary@m1", "b", phRunning)
	am.mirrorMu.Lock()
	jh, _ := api.JobById(context.Background(), "x")
	am.mirror.putJob(jh)
	got := len(am.mirror.allocs["b"]["x"])
	am.mirrorMu.Unlock()
	if got != 1 {
		t.Fatalf("b holds %d allocations of x after the read back, want 1", got)
	}
	if node, _, _, _, _ := kept.placeTarget(second); node != "" {
		t.Fatalf("second target placed on %q after the read back", node)
	}
}

// The saga places targets on the kept state while passes run: every
// access to the mirror is under mirrorMu (run with -race).
func TestKeptTargetsWhilePassesRun(t *testing.T) {
	t.Parallel()
	api := &countingAPI{fakeAPI: newFakeAPI(), reads: map[string]int{}}
	runningFleet(api.fakeAPI, 20, 40)
	am := New(Config{API: api, Clock: clock.NewFake(t0), Logger: slog.New(slog.DiscardHandler)})
	ctx := context.Background()
	if _, err := am.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	kept := keptTargets{am}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 200 {
			st := &managerv1.MigrationState{MigrationId: fmt.Sprintf("m%d", i), SourceJobId: fmt.Sprintf("job-%07d", i%40),
				SourceRole: "primary", SourceNodeId: fmt.Sprintf("node-%05d", i%20), TargetRole: fmt.Sprintf("primary@m%d", i), Strategy: stratOverlap}
			if node, _, _, _, ok := kept.placeTarget(st); ok && node != "" {
				st.TargetNodeId = node
				kept.started(st)
			}
		}
	}()
	for i := range 20 {
		if i%5 == 0 {
			if _, err := am.Pass(ctx); err != nil {
				t.Fatal(err)
			}
			continue
		}
		jh, _ := api.JobById(ctx, fmt.Sprintf("job-%07d", i))
		am.changes.note(jobEvent(jh))
		if _, err := am.passChanges(ctx, am.changes.take(), true); err != nil {
			t.Fatal(err)
		}
	}
	<-done
}
