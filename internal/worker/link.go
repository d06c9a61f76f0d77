package worker

import (
	"context"
	"errors"
	"time"
)

// maxReregisterInterval caps the growing interval between re-registrations
// while no stream comes up (unless ReregisterAfter is longer).
const maxReregisterInterval = 2 * time.Minute

// linkState is whether a Control stream is up, and since when it is not.
type linkState struct {
	up        bool
	downSince time.Time
}

// setStreamUp records that a Control stream came up or went away.
func (a *Agent) setStreamUp(up bool) {
	a.linkMu.Lock()
	if up != a.link.up {
		a.link.up = up
		if !up {
			a.link.downSince = a.clock.Now()
		}
	}
	a.linkMu.Unlock()
	select {
	case a.linkChanged <- struct{}{}:
	default:
	}
}

func (a *Agent) linkSnapshot() linkState {
	a.linkMu.Lock()
	defer a.linkMu.Unlock()
	return a.link
}

// runLink is the worker's link to the Manager: the retry state machine over
// the registration call. With registerNow it first registers with the node
// secret (the address may have changed since the last run). Then, whenever
// no Control stream has been up for ReregisterAfter, it registers again, and
// keeps doing so, at a growing interval, while none comes up. A secret the
// Manager has refused again and again (registerUntil confirms it) means the
// slot was deregistered: the worker stops everything and Run returns
// ErrDeregistered.
func (a *Agent) runLink(ctx context.Context, registerNow bool) {
	interval := a.cfg.ReregisterAfter
	maxInterval := max(maxReregisterInterval, a.cfg.ReregisterAfter)
	lastRegistered := a.clock.Now()
	if registerNow {
		if !a.reregister(ctx, false) {
			return
		}
		lastRegistered = a.clock.Now()
	}
	for {
		st := a.linkSnapshot()
		if st.up {
			interval = a.cfg.ReregisterAfter
			select {
			case <-a.linkChanged:
				continue
			case <-ctx.Done():
				return
			}
		}
		since := st.downSince
		if lastRegistered.After(since) {
			since = lastRegistered
		}
		wait := interval - a.clock.Now().Sub(since)
		if wait > 0 {
			t := a.clock.NewTimer(wait)
			select {
			case <-t.C():
			case <-a.linkChanged:
			case <-ctx.Done():
				t.Stop()
				return
			}
			t.Stop()
			continue
		}
		a.logger().Info("no Control stream for a while; registering again", "after", interval)
		if !a.reregister(ctx, true) {
			return
		}
		lastRegistered = a.clock.Now()
		interval = min(2*interval, maxInterval)
	}
}

// reregister registers with the node secret until it succeeds. It returns
// false when the link must end: ctx ended, the slot was deregistered (the
// Manager refused the secret, confirmed over repeated attempts), or
// (reconnect) the node was terminated while the stream was down — then the
// node is being shut down.
func (a *Agent) reregister(ctx context.Context, reconnect bool) bool {
	id := a.identity()
	req := a.registerRequest("", id.NodeSecret)
	req.Reconnect = reconnect
	resp, err := a.registerUntil(ctx, req)
	var refused *errRefused
	var terminated *errNodeTerminated
	switch {
	case errors.As(err, &refused):
		a.logger().Warn("the Manager keeps refusing the node secret: the node was deregistered; stopping every instance", "err", err)
		a.shutdownNode(nil, 0, "node deregistered", true)
		return false
	case errors.As(err, &terminated):
		a.logger().Warn("the Manager terminated this node while its stream was down; stopping every instance", "err", err)
		a.shutdownNode(nil, 0, "node terminated", false)
		return false
	case err != nil:
		return false // ctx ended
	}
	if resp.GetNodeId() != "" && resp.GetNodeId() != id.NodeID {
		a.logger().Warn("the Manager answered a registration with another node id; keeping ours", "answered", resp.GetNodeId())
	}
	if ms := resp.GetHeartbeatIntervalMs(); ms > 0 {
		a.heartbeatDefault.Store(int64(time.Duration(ms) * time.Millisecond))
	}
	a.logger().Info("registered with the Manager", "address", a.advertise)
	return true
}
