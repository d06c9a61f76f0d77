package worker_test

import (
	"context"
	"path/filepath"
	"testing"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/internal/runtime"
	"github.com/norsk-go/norsk-manager/internal/runtime/process"
)

// slowPrepareRuntime's Prepare blocks, as a long image pull does, until
// its context ends; entered says it has begun.
type slowPrepareRuntime struct {
	runtime.Runtime
	entered chan struct{}
}

func (r *slowPrepareRuntime) Prepare(ctx context.Context, spec runtime.InstanceSpec) error {
	r.entered <- struct{}{}
	<-ctx.Done()
	return ctx.Err()
}

// A stop that arrives while the start is still pulling its image ends the
// pull and stops the instance at once, with the stop's reason: the start
// is abandoned (ABORTED), not failed; so is one a newer binding overtakes.
func TestStopDuringPrepareCancelsIt(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	inner, err := process.New(process.Config{NodeID: e.nodeID, ClusterID: e.mgr.ClusterID, Dir: filepath.Join(e.dataDir, "process"), Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	rt := &slowPrepareRuntime{Runtime: inner, entered: make(chan struct{}, 4)}
	cfg := e.config()
	cfg.RuntimeImpl = rt
	a := e.run(cfg)
	c, _ := e.dial(a, noHeartbeats)

	start := send(t, c, startMsg(job("pull", svc("main")), "primary", 1))
	<-rt.entered
	stop := send(t, c, stopMsg("pull", "primary", 1, 0, reasonUser, "operator"))
	expectAck(t, c, start, "ABORTED")
	r := expectReport(t, c, phaseStopping)
	if r.GetReason() != reasonUser || r.GetAdditionalReason() != "operator" {
		t.Fatalf("STOPPING %v: want the stop's reason, not a failure", r)
	}
	expectReport(t, c, phaseStopped)
	expectAck(t, c, stop, "")

	// A newer binding overtakes the pull of an older one.
	old := send(t, c, startMsg(job("pull2", svc("main")), "primary", 1))
	<-rt.entered
	newer := send(t, c, startMsg(job("pull2", svc("main")), "primary", 2))
	expectAck(t, c, old, "ABORTED")
	r = expectReport(t, c, phaseStopping)
	if r.GetFencingToken() != 1 || r.GetReason() == managerv1.StoppingReason_STOPPING_REASON_JOB_FAILED {
		t.Fatalf("STOPPING %v: want token 1 superseded, not failed", r)
	}
	expectReport(t, c, phaseStopped)
	<-rt.entered // the newer binding prepares; the test's end stops it
	_ = newer
}
