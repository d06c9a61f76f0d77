package nodes

import (
	"context"
	"testing"
	"time"

	"connectrpc.com/connect"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
)

// TestReportJustBeforeStreamEndIsRecorded: every report the worker sends
// before its stream ends is recorded before the end is handled. Here the
// worker sends a STOPPED report (a tombstone it forgets once sent) and its
// stream ends at once; on reconnecting it no longer holds the instance. The
// store must keep the worker's own reason (JOB_FAILED, with its additional
// reason), not "not found on the worker when it reconnected" (NODE_STOPPED).
// Repeated, as the report and the end arrive together.
func TestReportJustBeforeStreamEndIsRecorded(t *testing.T) {
	t.Parallel()
	const rounds = 40
	lost := 0
	for i := 0; i < rounds; i++ {
		if !reportSurvivesStreamEnd(t) {
			lost++
		}
	}
	if lost > 0 {
		t.Fatalf("in %d of %d rounds the STOPPED report received just before the stream ended was dropped", lost, rounds)
	}
}

func reportSurvivesStreamEnd(t *testing.T) bool {
	t.Helper()
	st := newMemStore()
	var tok uint64
	const why = "service main exited with code 3; last output: boom"
	w := newFakeWorker(t, func(ctx context.Context, attempt int, s *connect.BidiStream[managerv1.ControllerMessage, managerv1.WorkerMessage]) error {
		if err := awaitManagerHello(s); err != nil {
			return err
		}
		if attempt == 1 {
			_ = s.Send(workerHello(&managerv1.InstanceReport{JobId: "job-1", Role: "primary", FencingToken: tok, Phase: managerv1.InstancePhase_INSTANCE_PHASE_RUNNING}))
			_ = s.Send(reportMsg(&managerv1.InstanceReport{JobId: "job-1", Role: "primary", FencingToken: tok,
				Phase: managerv1.InstancePhase_INSTANCE_PHASE_STOPPED, Reason: managerv1.StoppingReason_STOPPING_REASON_JOB_FAILED,
				AdditionalReason: why, ExitCodes: map[string]int32{"main": 3}}))
			return nil // the stream ends right after the report
		}
		// Reconnected: the tombstone was sent, so the worker no longer holds it.
		_ = s.Send(workerHello())
		for {
			if _, err := s.Receive(); err != nil {
				return nil
			}
		}
	})
	tok = setupNode(t, st, w.addr)
	runController(t, Config{Store: st, HeartbeatInterval: time.Hour, LostGrace: time.Hour})
	var in *managerv1.Instance
	eventually(t, 10*time.Second, "the instance to stop", func() bool {
		in = st.State().Snapshot().Instance(nil, "job-1", "primary")
		return in.GetPhase() == managerv1.InstancePhase_INSTANCE_PHASE_STOPPED
	})
	if in.GetStopReason() != managerv1.StoppingReason_STOPPING_REASON_JOB_FAILED {
		t.Logf("instance stopped with %v %q (the worker's JOB_FAILED report was dropped)", in.GetStopReason(), in.GetStopAdditionalReason())
		return false
	}
	return true
}
