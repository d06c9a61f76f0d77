package worker

import (
	"context"
	"fmt"
	"sync"
	"time"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/internal/clock"
)

// Leases of lease-protected jobs (Job.lease_protected).
//
// Every heartbeat carries its send time on the worker's monotonic clock
// (Heartbeat.sent_mono_ms: milliseconds since the agent started, plus one,
// so never 0). The primary answers each with a LeaseGrant echoing it: the
// worker's lease then runs until that send time plus the grant's TTL —
// counting from the send time, not the receipt, keeps the worker's view of
// its lease shorter than the Manager's, which counts from the receipt.
//
// The fencing loop (runFence) stops every lease-protected instance once two
// thirds of the TTL have passed since the newest granted heartbeat was sent
// without a newer grant: the last third is the time to stop them before the
// Manager's view of the lease runs out and it may start them elsewhere.
// While the last grant said leases are paused, nothing is stopped. Before
// any grant since the agent started, the lease runs from the agent's start
// with Config.LeaseTTL, so a worker restarted while cut off still stops the
// instances it adopted.
//
// A fenced instance is stopped as a Manager's stop would (reason
// NODE_STOPPED), leaving a tombstone whose STOPPED report reaches the
// Manager when a stream comes back; nothing restarts it (a stopped
// instance's restart policy no longer applies). Instances of jobs that are
// not lease-protected are never touched.

// leaseFraction is the part of the TTL (numerator/denominator) after which
// a worker without a newer grant stops its lease-protected instances.
const (
	leaseFenceNum = 2
	leaseFenceDen = 3
)

// leaseState is the worker's lease as the last grant left it.
type leaseState struct {
	mu sync.Mutex
	// start is when the agent started: sent_mono_ms counts from it.
	start time.Time
	// sent is the send time of the newest granted heartbeat (start before
	// any grant), mono its sent_mono_ms (0 before any grant).
	sent time.Time
	mono uint64
	ttl  time.Duration
	// paused: the last grant said leases are paused.
	paused bool
}

// leaseView is a copy of the lease's state.
type leaseView struct {
	start, sent time.Time
	granted     bool
	ttl         time.Duration
	paused      bool
}

// fenceAt is when the lease-protected instances are stopped unless a newer
// grant (or a pause) comes first.
func (v leaseView) fenceAt() time.Time {
	return v.sent.Add(v.ttl * leaseFenceNum / leaseFenceDen)
}

// expired reports whether lease-protected instances must be stopped at now.
func (v leaseView) expired(now time.Time) bool {
	return !v.paused && !now.Before(v.fenceAt())
}

// why is the additional reason of a fenced instance's stop.
func (v leaseView) why(now time.Time) string {
	if !v.granted {
		return fmt.Sprintf("lease expired: no Manager member has answered since the worker started %s ago (lease TTL %s)",
			roughly(now.Sub(v.start)), v.ttl)
	}
	return fmt.Sprintf("lease expired: no Manager member answered for %s (lease TTL %s)", roughly(now.Sub(v.sent)), v.ttl)
}

// roughly rounds d for a message: to the second from one second up.
func roughly(d time.Duration) time.Duration {
	if d >= time.Second {
		return d.Round(time.Second)
	}
	return d.Round(time.Millisecond)
}

// beginLease starts the lease at the agent's start, with Config.LeaseTTL.
func (a *Agent) beginLease() {
	now := a.clock.Now()
	a.lease.mu.Lock()
	a.lease.start, a.lease.sent, a.lease.mono = now, now, 0
	a.lease.ttl = a.cfg.LeaseTTL
	a.lease.paused = false
	a.lease.mu.Unlock()
}

func (a *Agent) leaseView() leaseView {
	a.lease.mu.Lock()
	defer a.lease.mu.Unlock()
	l := &a.lease
	return leaseView{start: l.start, sent: l.sent, granted: l.mono != 0, ttl: l.ttl, paused: l.paused}
}

// leaseMono is now on the lease's clock: milliseconds since the agent
// started, plus one (never 0).
func (a *Agent) leaseMono() uint64 {
	a.lease.mu.Lock()
	start := a.lease.start
	a.lease.mu.Unlock()
	return monoSince(start, a.clock.Now())
}

func monoSince(start, now time.Time) uint64 {
	d := now.Sub(start)
	if d < 0 {
		d = 0
	}
	return uint64(d/time.Millisecond) + 1
}

// onLeaseGrant takes a LeaseGrant: it extends the lease when it answers a
// heartbeat newer than the last granted one (a grant for a heartbeat never
// sent, or with no TTL, is ignored), and remembers whether leases are
// paused.
func (a *Agent) onLeaseGrant(g *managerv1.LeaseGrant) {
	mono := g.GetHeartbeatMonoMs()
	ttl := time.Duration(g.GetTtlMs()) * time.Millisecond
	now := a.clock.Now()
	a.lease.mu.Lock()
	l := &a.lease
	switch {
	case mono == 0 || ttl <= 0 || mono > monoSince(l.start, now):
		a.lease.mu.Unlock()
		a.logger().Warn("ignoring a lease grant that answers no heartbeat of this worker", "heartbeat_mono_ms", mono, "ttl_ms", g.GetTtlMs())
		return
	case mono < l.mono:
		a.lease.mu.Unlock()
		return // answers an older heartbeat than the last grant did
	}
	wasPaused := l.paused
	l.mono = mono
	l.sent = l.start.Add(time.Duration(mono-1) * time.Millisecond)
	l.ttl = ttl
	l.paused = g.GetPaused()
	a.lease.mu.Unlock()
	if wasPaused != g.GetPaused() {
		if g.GetPaused() {
			a.logger().Info("leases are paused: lease-protected instances are kept without refreshing")
		} else {
			a.logger().Info("leases are resumed")
		}
	}
	a.wakeFence()
}

// wakeFence makes the fencing loop look again.
func (a *Agent) wakeFence() {
	select {
	case a.fenceWake <- struct{}{}:
	default:
	}
}

// runFence is the fencing loop: it stops the lease-protected instances
// once the lease has run out (see the top of this file). It waits on the
// clock only while some lease-protected instance runs and leases are not
// paused; otherwise it waits for a grant or a change of those instances.
func (a *Agent) runFence(ctx context.Context) {
	for {
		v := a.leaseView()
		now := a.clock.Now()
		var t clock.Timer
		var fire <-chan time.Time
		if !v.paused && a.sup.AnyProtected() {
			if v.expired(now) {
				a.logger().Warn("the lease has run out: stopping the lease-protected instances", "why", v.why(now))
				a.sup.FenceProtected()
			} else {
				t = a.clock.NewTimer(v.fenceAt().Sub(now))
				fire = t.C()
			}
		}
		a.fenceChecks.Add(1)
		select {
		case <-ctx.Done():
		case <-a.fenceWake:
		case <-fire:
		}
		if t != nil {
			t.Stop()
		}
		if ctx.Err() != nil {
			return
		}
	}
}
