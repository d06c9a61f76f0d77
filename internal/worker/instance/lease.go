package instance

import (
	"time"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/internal/runtime"
)

// The instances' part in the worker's lease (the agent keeps the lease and
// runs the fencing loop): which instances are lease-protected, and the
// stop of those the loop fences.

// leaseProtected reports whether the instance holds a binding of a
// lease-protected job that has not stopped.
func (in *instance) leaseProtected() bool {
	return in.rec != nil && !in.rec.Stopped && in.rec.Desired != desiredStopped && in.rec.job().GetLeaseProtected()
}

// onFence stops the instance if it is lease-protected and the lease has
// still run out now (a grant may have come since the fence was queued).
// Its services get a grace that fits in what is left of the TTL.
func (in *instance) onFence() {
	in.fenceQueued.Store(false)
	if !in.leaseProtected() {
		return
	}
	now := in.sup.clock.Now()
	expired, why, ends := in.sup.host.Lease(now)
	if !expired {
		return
	}
	n := time.Duration(max(1, len(in.shutdownOrder())))
	grace := min(DefaultStopGrace, ends.Sub(now)/(2*n))
	grace = max(grace, time.Millisecond) // 0 would mean the runtime's default
	in.log.Warn("stopping a lease-protected instance: its lease has run out", "token", in.rec.token(), "why", why, "grace", grace)
	in.shutdown(managerv1.StoppingReason_STOPPING_REASON_NODE_STOPPED, why, grace, true)
}

// setProtected records whether the instance of key is lease-protected,
// waking the fencing loop on a change.
func (s *Supervisor) setProtected(key runtime.Key, on bool) {
	s.mu.Lock()
	changed := s.protected[key] != on
	if on {
		s.protected[key] = true
	} else {
		delete(s.protected, key)
	}
	s.mu.Unlock()
	if changed {
		s.host.WakeFence()
	}
}

// AnyProtected reports whether a lease-protected instance runs.
func (s *Supervisor) AnyProtected() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.protected) > 0
}

// FenceProtected queues a fence for every lease-protected instance (once
// until it has been handled).
func (s *Supervisor) FenceProtected() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	for key := range s.protected {
		if in := s.insts[key]; in != nil && in.fenceQueued.CompareAndSwap(false, true) {
			in.enqueue(fenceEvent{})
		}
	}
}
