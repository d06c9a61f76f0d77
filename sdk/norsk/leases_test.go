package norsk_test

import (
	"errors"
	"testing"
	"time"

	"github.com/norsk-go/norsk-manager/sdk/norsk"
	"github.com/norsk-go/norsk-manager/sdk/norsk/norsktest"
)

func TestLeases(t *testing.T) {
	t.Parallel()
	srv := norsktest.NewServer(t)
	srv.SetClock(func() time.Time { return t0 })
	srv.AddNode(&norsk.Node{NodeId: "node-1"})
	m := connectTo(t, srv)
	ctx := t.Context()

	for _, bad := range [][2]string{{"", "ops"}, {"maintenance", ""}} {
		if err := m.PauseLeases(ctx, bad[0], bad[1]); !errors.Is(err, norsk.ErrInvalidArgument) {
			t.Fatalf("PauseLeases(%q, %q) = %v, want ErrInvalidArgument", bad[0], bad[1], err)
		}
	}
	if err := m.ResumeLeases(ctx, ""); !errors.Is(err, norsk.ErrInvalidArgument) {
		t.Fatalf("ResumeLeases without by = %v, want ErrInvalidArgument", err)
	}

	if _, err := m.CreateJob(ctx, &norsk.Job{JobId: "guarded", LeaseProtected: true, Services: []*norsk.Service{{Name: "main", Image: "hello:dev"}}}); err != nil {
		t.Fatal(err)
	}
	tok, err := m.StartJob(ctx, "guarded", "primary", "node-1", norsk.StartJobOptions{})
	if err != nil {
		t.Fatal(err)
	}
	st, err := m.GetLeaseStatus(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.GetPaused() || st.GetTtlMs() != 15_000 || len(st.GetLeases()) != 1 {
		t.Fatalf("status = %v", st)
	}
	if l := st.GetLeases()[0]; l.GetJobId() != "guarded" || l.GetNodeId() != "node-1" || l.GetFencingToken() != tok || l.GetExpired() {
		t.Fatalf("lease = %v", l)
	}

	if err := m.PauseLeases(ctx, "maintenance", "ops"); err != nil {
		t.Fatal(err)
	}
	if st, err = m.GetLeaseStatus(ctx); err != nil || !st.GetPaused() || st.GetReason() != "maintenance" || st.GetBy() != "ops" || st.GetSince() == nil {
		t.Fatalf("paused status = %v, %v", st, err)
	}
	if err := m.ResumeLeases(ctx, "ops"); err != nil {
		t.Fatal(err)
	}
	if st, err = m.GetLeaseStatus(ctx); err != nil || st.GetPaused() || st.GetReason() != "" {
		t.Fatalf("resumed status = %v, %v", st, err)
	}
}
