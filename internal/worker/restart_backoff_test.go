package worker_test

import (
	"testing"
	"time"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/internal/clock"
	"github.com/norsk-go/norsk-manager/internal/runtime/runtimetest"
)

// TestWorkerRestartDuringBackoffBooksOneRestart: an exit is counted against
// the restart budget once, even when the worker restarts during its backoff:
// with a budget of one restart, the successor worker restarts the service
// (one restart reported) instead of failing the instance.
func TestWorkerRestartDuringBackoffBooksOneRestart(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	fc := clock.NewFake(time.Now())
	cfg := e.config()
	cfg.Clock = fc
	a := e.run(cfg)
	c, _ := e.dial(a, noHeartbeats)
	base := settledTimers(t, fc, 1) // the heartbeat

	s := withRestart(svc("main", "-exit", "3", "-run", "20ms"), managerv1.RestartMode_RESTART_MODE_ON_FAILURE, 1, 60)
	startRunning(t, c, job("flaky", s), "primary", 1)
	awaitTimer(t, fc, base) // the exit was booked; the 1 s backoff is pending
	c.Close()
	if err := a.stop(t); err != nil {
		t.Fatalf("Run: %v", err)
	}

	cfg2 := e.config()
	cfg2.Token = ""
	b := e.run(cfg2)
	// The restarted service exits again after 20 ms, and with the budget
	// then spent the instance fails: what counts is that it was restarted
	// first, once.
	var r *managerv1.InstanceReport
	runtimetest.Eventually(t, wait, "the adopted instance settles", func() bool {
		r = inventoryFind(b.Inventory(), "flaky", "primary")
		return r.GetPhase() == phaseStopped || r.GetRestarts() >= 1
	})
	if r.GetRestarts() != 1 {
		t.Fatalf("one exit, budget of 1 restart: after a worker restart during the backoff the instance reported %d restarts (%v, %v %q), want 1",
			r.GetRestarts(), r.GetPhase(), r.GetReason(), r.GetAdditionalReason())
	}
}
