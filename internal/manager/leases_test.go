package manager_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/norsk-go/norsk-manager/internal/manager"
	"github.com/norsk-go/norsk-manager/internal/testcluster"
	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

// TestLeases: pausing needs a reason and who pauses (refused otherwise,
// changing nothing); the status shows a pause with its reason and who made
// it; a running lease-protected job holds a lease on its node that is
// refreshed by the worker's heartbeats and not expired; resuming clears the
// pause.
func TestLeases(t *testing.T) {
	t.Parallel()
	c := testcluster.New(t, testcluster.Options{Workers: 1})
	cl, ctx := c.Client(), testcluster.Context(t)

	for _, bad := range []struct{ reason, by string }{{"", "alice"}, {"maintenance", ""}} {
		if err := cl.PauseLeases(ctx, bad.reason, bad.by); !errors.Is(err, norsk.ErrInvalidArgument) {
			t.Fatalf("PauseLeases(%q, %q): %v, want INVALID_ARGUMENT", bad.reason, bad.by, err)
		}
	}
	if err := cl.ResumeLeases(ctx, ""); !errors.Is(err, norsk.ErrInvalidArgument) {
		t.Fatalf("ResumeLeases without by: %v, want INVALID_ARGUMENT", err)
	}
	st, err := cl.GetLeaseStatus(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.GetPaused() || st.GetReason() != "" || st.GetBy() != "" || st.GetSince() != nil || len(st.GetLeases()) != 0 {
		t.Fatalf("after refused calls: %v, want no pause and no lease", st)
	}
	if st.GetTtlMs() != manager.DefaultLeaseTTL.Milliseconds() {
		t.Fatalf("ttl %d ms, want the default %s", st.GetTtlMs(), manager.DefaultLeaseTTL)
	}

	// A running lease-protected job holds a lease on its node.
	job := &norsk.Job{JobId: "guarded", LeaseProtected: true, Services: []*norsk.Service{{Name: "main", Command: []string{testcluster.TestProg(t)}}}}
	if _, err := cl.CreateJob(ctx, job); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.CreateJob(ctx, &norsk.Job{JobId: "plain", Services: []*norsk.Service{{Name: "main", Command: []string{testcluster.TestProg(t)}}}}); err != nil {
		t.Fatal(err)
	}
	node := c.Node("worker-1").GetNodeId()
	for _, id := range []string{"guarded", "plain"} {
		if _, err := cl.StartJob(ctx, id, "primary", node, norsk.StartJobOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	in := c.WaitPhase("guarded", "primary", norsk.InstancePhaseRunning)
	c.WaitPhase("plain", "primary", norsk.InstancePhaseRunning)
	start := time.Now()
	var l *norsk.Lease
	c.Eventually("the worker to refresh its lease", func() bool {
		st, err = cl.GetLeaseStatus(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(st.GetLeases()) != 1 {
			t.Fatalf("leases %v, want one (the lease-protected job's only)", st.GetLeases())
		}
		l = st.GetLeases()[0]
		return l.GetRefreshedAt().AsTime().After(start)
	})
	if l.GetJobId() != "guarded" || l.GetRole() != "primary" || l.GetNodeId() != node || l.GetFencingToken() != in.GetFencingToken() {
		t.Fatalf("lease %v, want guarded/primary on %s under token %d", l, node, in.GetFencingToken())
	}
	if l.GetExpired() || !l.GetExpiresAt().AsTime().Equal(l.GetRefreshedAt().AsTime().Add(manager.DefaultLeaseTTL)) || !l.GetExpiresAt().AsTime().After(time.Now()) {
		t.Fatalf("lease %v: want it to expire one TTL after its refresh, in the future", l)
	}

	// Pause, then resume.
	if err := cl.PauseLeases(ctx, "manager maintenance", "alice"); err != nil {
		t.Fatal(err)
	}
	st, err = cl.GetLeaseStatus(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !st.GetPaused() || st.GetReason() != "manager maintenance" || st.GetBy() != "alice" || st.GetSince() == nil ||
		len(st.GetLeases()) != 1 || st.GetLeases()[0].GetExpired() {
		t.Fatalf("paused: %v", st)
	}
	if err := cl.ResumeLeases(ctx, "bob"); err != nil {
		t.Fatal(err)
	}
	st, err = cl.GetLeaseStatus(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.GetPaused() || st.GetReason() != "" || st.GetBy() != "bob" || len(st.GetLeases()) != 1 || st.GetLeases()[0].GetExpired() {
		t.Fatalf("resumed: %v", st)
	}
	// Still running: the worker kept refreshing its lease throughout.
	if in := c.WaitPhase("guarded", "primary", norsk.InstancePhaseRunning); in.GetFencingToken() != l.GetFencingToken() {
		t.Fatalf("instance %v", in)
	}
}

// TestLeaseTTLConfig: a lease TTL shorter than three heartbeat intervals is
// refused at startup (managercmd's TestParseConfigFileLease checks that
// config.yaml's leaseTTL is applied).
func TestLeaseTTLConfig(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cfg := manager.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", NodeName: "m1", Logger: slog.New(slog.DiscardHandler),
		HeartbeatInterval: 5 * time.Second, LeaseTTL: 14 * time.Second}
	if s, err := manager.New(ctx, cfg); err == nil {
		_ = s.Close()
		t.Fatal("a lease TTL of 14s with 5s heartbeats was accepted")
	} else if !strings.Contains(err.Error(), "leaseTTL 14s is shorter than 3 × heartbeatInterval (5s)") || !strings.Contains(err.Error(), "at least 15s") {
		t.Fatalf("error %q does not say what is wrong", err)
	}
}
