package worker

import (
	"io"
	"log/slog"
	"testing"
	"time"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/internal/clock"
)

// TestLeaseGrants: the lease runs from the agent's start until a grant;
// a grant extends it from its heartbeat's send time; grants for a heartbeat
// never sent, with no TTL, or older than the last one change nothing.
func TestLeaseGrants(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1000, 0)
	fc := clock.NewFake(t0)
	a, err := New(Config{ManagerURL: "http://127.0.0.1:1", DataDir: t.TempDir(), Clock: fc, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	a.beginLease()
	if got := a.leaseMono(); got != 1 {
		t.Fatalf("mono at the start: %d, want 1", got)
	}
	if v := a.leaseView(); v.granted || !v.fenceAt().Equal(t0.Add(10*time.Second)) || v.ttl != DefaultLeaseTTL {
		t.Fatalf("before any grant: %+v (fence at %v)", v, v.fenceAt())
	}
	fc.Advance(4 * time.Second)
	if got := a.leaseMono(); got != 4001 {
		t.Fatalf("mono at 4 s: %d, want 4001", got)
	}
	g := func(mono uint64, ttlMs int64, paused bool) {
		a.onLeaseGrant(&managerv1.LeaseGrant{HeartbeatMonoMs: mono, TtlMs: ttlMs, Paused: paused})
	}
	g(3001, 9000, false)
	if v := a.leaseView(); !v.granted || !v.fenceAt().Equal(t0.Add(9*time.Second)) || v.paused {
		t.Fatalf("after a grant for 3 s with a 9 s TTL: fence at %v, want %v", v.fenceAt(), t0.Add(9*time.Second))
	}
	for _, bad := range []struct {
		mono uint64
		ttl  int64
	}{{5001, 9000}, {0, 9000}, {4001, 0}, {2001, 30_000}} {
		g(bad.mono, bad.ttl, true)
		if v := a.leaseView(); !v.fenceAt().Equal(t0.Add(9*time.Second)) || v.paused {
			t.Fatalf("grant %+v changed the lease: fence at %v, paused %v", bad, v.fenceAt(), v.paused)
		}
	}
	g(4001, 9000, true)
	v := a.leaseView()
	if !v.paused || v.expired(t0.Add(time.Hour)) {
		t.Fatalf("paused: %+v", v)
	}
	g(4001, 9000, false) // the same heartbeat again: a resume
	if v := a.leaseView(); v.paused || v.expired(t0.Add(10*time.Second-time.Millisecond)) || !v.expired(t0.Add(10*time.Second)) {
		t.Fatalf("resumed: %+v (fence at %v)", v, v.fenceAt())
	}
}
