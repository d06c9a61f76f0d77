package worker_test

import (
	"context"
	"strings"
	"testing"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/internal/runtime"
	"github.com/norsk-go/norsk-manager/internal/runtime/docker"
	"github.com/norsk-go/norsk-manager/internal/runtime/runtimetest"
	"github.com/norsk-go/norsk-manager/internal/testimage"
)

// sampleMediaImage is the sample media job, built FROM scratch (nothing is
// pulled).
const sampleMediaImage = "norsk-sample-media:worker-test"

// TestJobSocketInAContainer: with the docker runtime the instance's socket
// directory is mounted at /run/norsk, and the sample media job in its
// container attaches and answers the propose through it.
func TestJobSocketInAContainer(t *testing.T) {
	t.Parallel()
	cli := testimage.EnsureImage(t, sampleMediaImage, "github.com/norsk-go/norsk-manager/examples/sample-media")
	e := newEnv(t)
	rt, err := docker.New(context.Background(), docker.Config{NodeID: e.nodeID, Client: cli, Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = rt.Remove(context.Background(), runtime.Key{JobID: "cam", Role: "primary"})
		_ = rt.Close()
	})
	cfg := e.jsConfig()
	cfg.Runtime = ""
	cfg.RuntimeImpl = rt
	a := e.run(cfg)
	c, _ := e.dial(a, noHeartbeats)
	j := job("cam", &managerv1.Service{Name: "media", Image: sampleMediaImage, Env: map[string]string{"SINK": "-", "FRAME_RATE": "25"}})
	startRunning(t, c, j, "primary", 6)
	runtimetest.Eventually(t, wait, "the job in its container attaches", func() bool { return a.JobAttached("cam", "primary") })

	seq := send(t, c, getStateMsg("cam", "primary", 6, migA))
	expectAck(t, c, seq, "")
	r := expectMigration(t, c, kindState, "cam", "primary", 6, migA)
	if !strings.Contains(string(r.GetPayload()), `"nextSeq":`) || r.GetRefused() != "" {
		t.Fatalf("state report: %v", r)
	}
	seq = send(t, c, abortMsg("cam", "primary", migA, "test over"))
	expectAck(t, c, seq, "")
	seq = send(t, c, stopMsg("cam", "primary", 6, 2000, reasonUser, ""))
	expectReport(t, c, phaseStopping)
	expectReport(t, c, phaseStopped)
	expectAck(t, c, seq, "")
}
