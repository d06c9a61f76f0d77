package worker_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
)

// TestUpdateRemovingAServiceDoesNotFailTheInstance: a service an update
// removed from the job keeps running (updates never stop running services,
// ADR 0005); when it then exits, the instance does not fail and its other
// services keep running.
func TestUpdateRemovingAServiceDoesNotFailTheInstance(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := e.run(e.config())
	c, _ := e.dial(a, noHeartbeats)
	flag := filepath.Join(t.TempDir(), "flag")
	side := withRestart(flagScript("side", flag, 0), managerv1.RestartMode_RESTART_MODE_ALWAYS, 0, 0)
	startRunning(t, c, job("upd", svc("main"), side), "primary", 2)
	mainPID := pidOf(t, e.dataDir, "upd", "main")

	// The operator drops the sidecar from the spec.
	nj := job("upd", svc("main"))
	nj.CurrentHash = 9
	seq := send(t, c, &managerv1.ControllerMessage{Msg: &managerv1.ControllerMessage_Update{Update: &managerv1.UpdateInstance{Job: nj, Role: "primary", FencingToken: 2}}})
	expectReport(t, c, phaseRunning)
	expectAck(t, c, seq, "")

	// The old sidecar (still running, as updates never recreate) exits.
	if err := os.WriteFile(flag, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := c.NextNonHeartbeat(3 * time.Second)
	if err == nil && m.GetReport().GetPhase() == phaseStopping {
		t.Fatalf("the instance failed because a service removed by an update exited: %v", m.GetReport())
	}
	if !alive(mainPID) {
		t.Fatal("the main service was stopped")
	}
}
