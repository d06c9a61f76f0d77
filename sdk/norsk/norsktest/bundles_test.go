package norsktest_test

import (
	"net/http"
	"testing"
	"time"

	"connectrpc.com/connect"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1/managerv1connect"
	"github.com/norsk-go/norsk-manager/sdk/norsk/norsktest"
)

// The fake's leases: pauses are validated and kept, events emitted, and a
// lease-protected instance holds a lease while it runs.
func TestFakeLeases(t *testing.T) {
	srv := norsktest.NewServer(t)
	t0 := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	srv.SetClock(func() time.Time { return t0 })
	srv.AddNode(&managerv1.Node{NodeId: "node-1"})
	c := managerv1connect.NewManagerClient(http.DefaultClient, srv.URL) // the Connect protocol, over HTTP/1.1
	ctx := t.Context()
	svc := []*managerv1.Service{{Name: "main", Image: "hello:dev"}}

	for _, j := range []*managerv1.Job{{JobId: "guarded", LeaseProtected: true, Services: svc}, {JobId: "plain", Services: svc}} {
		if _, err := c.CreateJob(ctx, connect.NewRequest(&managerv1.CreateJobRequest{Job: j})); err != nil {
			t.Fatal(err)
		}
		if _, err := c.StartJob(ctx, connect.NewRequest(&managerv1.StartJobRequest{JobId: j.JobId, Role: "primary", NodeId: "node-1"})); err != nil {
			t.Fatal(err)
		}
	}
	st, err := c.GetLeaseStatus(ctx, connect.NewRequest(&managerv1.GetLeaseStatusRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	if st.Msg.GetPaused() || st.Msg.GetTtlMs() != norsktest.DefaultLeaseTTL.Milliseconds() || len(st.Msg.GetLeases()) != 1 {
		t.Fatalf("lease status = %v", st.Msg)
	}
	if l := st.Msg.GetLeases()[0]; l.GetJobId() != "guarded" || l.GetNodeId() != "node-1" || l.GetExpired() || !l.GetExpiresAt().AsTime().Equal(t0.Add(norsktest.DefaultLeaseTTL)) {
		t.Errorf("lease = %v", l)
	}

	for _, req := range []*managerv1.PauseLeasesRequest{{By: "ops"}, {Reason: "upgrade"}} {
		if _, err := c.PauseLeases(ctx, connect.NewRequest(req)); connect.CodeOf(err) != connect.CodeInvalidArgument {
			t.Errorf("PauseLeases(%v) = %v; want INVALID_ARGUMENT", req, err)
		}
	}
	if _, err := c.ResumeLeases(ctx, connect.NewRequest(&managerv1.ResumeLeasesRequest{})); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("ResumeLeases without by = %v; want INVALID_ARGUMENT", err)
	}
	before := srv.Index()
	for range 2 { // the second changes nothing
		if _, err := c.PauseLeases(ctx, connect.NewRequest(&managerv1.PauseLeasesRequest{Reason: "upgrade", By: "ops"})); err != nil {
			t.Fatal(err)
		}
	}
	if srv.Index() != before+1 {
		t.Errorf("two pauses took the index from %d to %d; want one write", before, srv.Index())
	}
	st, _ = c.GetLeaseStatus(ctx, connect.NewRequest(&managerv1.GetLeaseStatusRequest{}))
	if !st.Msg.GetPaused() || st.Msg.GetReason() != "upgrade" || st.Msg.GetBy() != "ops" || !st.Msg.GetSince().AsTime().Equal(t0) {
		t.Errorf("paused status = %v", st.Msg)
	}
	if _, err := c.ResumeLeases(ctx, connect.NewRequest(&managerv1.ResumeLeasesRequest{By: "ops"})); err != nil {
		t.Fatal(err)
	}
	st, _ = c.GetLeaseStatus(ctx, connect.NewRequest(&managerv1.GetLeaseStatusRequest{}))
	if st.Msg.GetPaused() || st.Msg.GetReason() != "" || st.Msg.GetBy() != "ops" {
		t.Errorf("resumed status = %v", st.Msg)
	}

	// A stopped instance holds no lease.
	if _, err := c.StopJob(ctx, connect.NewRequest(&managerv1.StopJobRequest{JobId: "guarded", Role: "primary", NodeId: "node-1"})); err != nil {
		t.Fatal(err)
	}
	st, _ = c.GetLeaseStatus(ctx, connect.NewRequest(&managerv1.GetLeaseStatusRequest{}))
	if len(st.Msg.GetLeases()) != 0 {
		t.Errorf("leases after the stop = %v", st.Msg.GetLeases())
	}
}

// The fake's bundle view says, as the Manager's does, why a job runs
// nowhere when no node's runtime can run it (issue 12 item 11).
func TestFakeBundleViewRuntime(t *testing.T) {
	srv := norsktest.NewServer(t)
	srv.AddNode(&managerv1.Node{NodeId: "node-1", Runtime: "docker"})
	c := managerv1connect.NewManagerClient(http.DefaultClient, srv.URL)
	ctx := t.Context()
	b := &managerv1.Bundle{BundleId: "cmd", Jobs: []*managerv1.BundleJobSpec{{
		JobName: "channel", Job: &managerv1.Job{Services: []*managerv1.Service{{Name: "main", Command: []string{"./hello"}}}},
	}}}
	if _, err := c.CreateBundle(ctx, connect.NewRequest(&managerv1.CreateBundleRequest{Bundle: b})); err != nil {
		t.Fatal(err)
	}
	v, err := c.BundleById(ctx, connect.NewRequest(&managerv1.BundleByIdRequest{BundleId: "cmd"}))
	if err != nil {
		t.Fatal(err)
	}
	if d := v.Msg.GetJobs()[0].GetDegradations(); len(d) != 1 || d[0] != `runtime: no node's runtime can run the job: runtime docker cannot run command-only services (docker runs images): "main" has a command and no image` {
		t.Errorf("degradations = %q", d)
	}
}
