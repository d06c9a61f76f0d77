package main

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/examples/exampletest"
	"github.com/norsk-go/norsk-manager/pkg/jobsocket/jobsockettest"
)

// runMedia runs the program's run with a recorder as its stdout sink until
// the test ends (or the returned stop is called).
func runMedia(t *testing.T, cfg config, rec *recorder, log *exampletest.Log) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, cfg, rec, testLogger(log)) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	}
	t.Cleanup(stop)
	return stop
}

func fromJob(t *testing.T, w *jobsockettest.Worker) *managerv1.JobSocketFromJob {
	t.Helper()
	m, err := w.Next(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func awaitAttach(t *testing.T, w *jobsockettest.Worker) {
	t.Helper()
	if _, err := w.AwaitAttach(10 * time.Second); err != nil {
		t.Fatal(err)
	}
}

// TestHandoverOverJobSockets runs two instances of the program, each on a
// fake worker's job socket, and plays the Manager's relay between them
// (the source's stream drops once in the middle, as when its worker
// restarts). The sink gets every frame exactly once.
func TestHandoverOverJobSockets(t *testing.T) {
	const rate = 50
	interval := time.Second / rate
	const mig = "3f9c1e2a-0000-4000-8000-000000000001"
	wsrc := jobsockettest.NewWorker(t, &managerv1.JobSocketHelloAck{JobId: "cam", Role: "primary", RuntimeRole: "primary", NodeId: "n1"})
	wtgt := jobsockettest.NewWorker(t, &managerv1.JobSocketHelloAck{JobId: "cam", Role: "primary@3f9c1e2a", RuntimeRole: "primary", NodeId: "n2",
		MigrationId: mig, Handover: true})
	rec := newRecorder()
	var srcLog, tgtLog exampletest.Log

	srcCfg := mediaConfig("n1", rate, 300*time.Millisecond)
	srcCfg.JobSocket = wsrc.Path
	stopSrc := runMedia(t, srcCfg, rec, &srcLog)
	awaitAttach(t, wsrc)
	exampletest.Eventually(t, 10*time.Second, "the source streams", func() bool { return rec.has(5) })

	// The propose.
	if err := wsrc.Send(&managerv1.JobSocketToJob{Msg: &managerv1.JobSocketToJob_GetState{GetState: &managerv1.JobSocketGetState{MigrationId: mig}}}); err != nil {
		t.Fatal(err)
	}
	st := fromJob(t, wsrc).GetState()
	if st.GetMigrationId() != mig || st.GetRefused() != "" {
		t.Fatalf("state %v", st)
	}
	decodePosition(t, st.GetPayload())

	// The target starts, silent, and is handed the state.
	wtgt.SetGreeting(&managerv1.JobSocketToJob{Msg: &managerv1.JobSocketToJob_InitialState{InitialState: &managerv1.JobSocketInitialState{
		MigrationId: mig, Payload: st.GetPayload(),
	}}})
	tgtCfg := mediaConfig("n2", rate, 300*time.Millisecond)
	tgtCfg.JobSocket, tgtCfg.MigrationID, tgtCfg.Handover = wtgt.Path, mig, true
	stopTgt := runMedia(t, tgtCfg, rec, &tgtLog)
	awaitAttach(t, wtgt)
	ready := fromJob(t, wtgt).GetReady()
	if ready.GetMigrationId() != mig {
		t.Fatalf("ready %v", ready)
	}

	// The source's stream drops; it attaches again, and is told to stop.
	wsrc.Drop()
	awaitAttach(t, wsrc)
	if err := wsrc.Send(&managerv1.JobSocketToJob{Msg: &managerv1.JobSocketToJob_StopOutputAt{StopOutputAt: &managerv1.JobSocketStopOutputAt{
		MigrationId: mig, Payload: ready.GetPayload(),
	}}}); err != nil {
		t.Fatal(err)
	}
	stopped := fromJob(t, wsrc).GetStoppedOutput()
	cut := decodePosition(t, stopped.GetPayload())
	if err := wtgt.Send(&managerv1.JobSocketToJob{Msg: &managerv1.JobSocketToJob_ApplyFrom{ApplyFrom: &managerv1.JobSocketApplyFrom{
		MigrationId: mig, Payload: stopped.GetPayload(),
	}}}); err != nil {
		t.Fatal(err)
	}
	applied := fromJob(t, wtgt).GetApplied()
	var sum applySummary
	if err := json.Unmarshal(applied.GetPayload(), &sum); err != nil || len(sum.Failed) != 0 || sum.SkewMs < 0 {
		t.Fatalf("applied %s: %v", applied.GetPayload(), err)
	}
	exampletest.Eventually(t, 10*time.Second, "the target streams", func() bool { return rec.has(cut.NextSeq + 10) })
	stopSrc()
	stopTgt()

	r := rec.chk.Report()
	if !r.Continuous() || r.First != 0 || r.Duplicates != 0 {
		t.Fatalf("stream %v\nsource log:\n%s\ntarget log:\n%s", r, srcLog.String(), tgtLog.String())
	}
	t.Logf("the gap at the cut is %s; one frame interval is %s (timing: see BenchmarkMigration)",
		rec.at(cut.NextSeq).Sub(rec.at(cut.NextSeq-1)), interval)
}
