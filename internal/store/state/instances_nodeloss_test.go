package state_test

import (
	"testing"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
)

// A job that failed while its node was lost keeps its real stop reason:
// the worker's tombstone, reported when it returns, carries the failure.
func TestTombstoneReasonSurvivesNodeLoss(t *testing.T) {
	f := newFixture(t)
	f.onlineNode("a")
	f.createJob("job-1")
	tok := f.running("job-1", "primary", "a")
	f.must(cLost("a", "no stream from its worker for 30s"))

	// The worker comes back; the instance failed while it was away.
	const why = "service main exited with code 3; last output: boom"
	tomb := &managerv1.InstanceReport{JobId: "job-1", Role: "primary", FencingToken: tok,
		Phase: phaseStopped, Reason: reasonJobFailed, AdditionalReason: why, ExitCodes: map[string]int32{"main": 3}}
	f.must(cOnline("a", tomb))

	in := f.instance("job-1", "primary")
	if in.GetPhase() != phaseStopped {
		t.Fatalf("instance = %v, want stopped", in)
	}
	if in.GetStopReason() != reasonJobFailed || in.GetStopAdditionalReason() != why {
		t.Errorf("the tombstone's reason was dropped: instance stop reason = %v %q, want %v %q",
			in.GetStopReason(), in.GetStopAdditionalReason(), reasonJobFailed, why)
	}
	found := false
	for _, e := range f.history("job-1") {
		if s := e.GetStopping(); s != nil && s.GetReason() == reasonJobFailed {
			found = true
		}
	}
	if !found {
		t.Errorf("no history entry carries the job failure; history = %s", entryKinds(f.history("job-1")))
	}
}

// A prepared (deferStart) instance held by a node that was lost and came
// back is adopted as prepared again.
func TestPreparedInstanceReadoptedAfterNodeLoss(t *testing.T) {
	f := newFixture(t)
	f.onlineNode("a")
	f.createJob("job-1")
	tok := f.must(cBindOpts("job-1", "backup", "a", &managerv1.StartJobOptions{DeferStart: true})).Value.(uint64)
	f.must(cReports("a", report("job-1", "backup", tok, phasePrepared)))
	if in := f.instance("job-1", "backup"); in.GetPhase() != phasePrepared {
		t.Fatalf("setup: %v", in)
	}
	f.must(cLost("a", "gone"))
	f.must(cOnline("a", report("job-1", "backup", tok, phasePrepared)))
	in := f.instance("job-1", "backup")
	if in.GetPhase() != phasePrepared {
		t.Errorf("after the worker returned holding it prepared, instance phase = %v (desired %v), want PREPARED",
			in.GetPhase(), in.GetDesired())
	}
}

// A job is not started elsewhere while its old copy is still stopping on a
// node being terminated: its worker is connected and may still run it.
func TestRebindWaitsForStopOnTerminatingNode(t *testing.T) {
	f := newFixture(t)
	f.onlineNode("a")
	f.onlineNode("b")
	f.createJob("job-1")
	f.running("job-1", "primary", "a")

	// The same stop on an online node: refused until stopped.
	f.must(cStop("job-1", "primary", "a"))
	if res := f.apply(cBind("job-1", "primary", "b")); res.Err == nil {
		t.Fatal("setup: a rebind while stopping on an online node was accepted")
	}
	f.must(cReports("a", report("job-1", "primary", f.instance("job-1", "primary").GetFencingToken(), phaseStopped)))
	f.running("job-1", "primary", "a")

	// Terminating the node: its worker is still connected and stopping it.
	f.must(cTerminate("a"))
	if in := f.instance("job-1", "primary"); in.GetPhase() != phaseStopping {
		t.Fatalf("setup: %v", in)
	}
	if res := f.apply(cBind("job-1", "primary", "b")); res.Err == nil {
		t.Errorf("rebind accepted while the instance is still stopping on terminating node a: two copies may run at once")
	}
}
