package nodes

import (
	"context"
	"fmt"
	"time"

	"github.com/hashicorp/go-memdb"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
)

// reconcile makes one pass of bringing the worker on l in line with the
// store: it ends the session (errSessionEnded, after recording everything
// already received: reports, notices, migration reports and images) when
// the node's record no longer matches the one the stream was opened for;
// sends the node's discovery access, access replica and control-plane URLs
// when they changed; sends the commands Plan gives for the difference
// between what the worker holds (s.wv) and the store (each at most once
// per ResendAfter, a lease-protected start only after the stream's first
// heartbeat); and finishes a terminating node once its worker has stopped
// everything or TerminateTimeout has passed (telling the worker, then
// errSessionEnded). It returns the watch set of everything it read, for
// pump to wait on. Only the session's goroutine calls it: it
// sends on the stream.
func (cn *conn) reconcile(ctx context.Context, l *link, s *sessionState) (memdb.WatchSet, error) {
	cfg := &cn.c.cfg
	node := l.rec.GetNode()
	r := cfg.Store.State().Snapshot()
	ws := memdb.NewWatchSet()
	ws.Add(r.AbandonCh())
	cur := r.Node(ws, cn.nodeID)
	if cur == nil || cur.GetNode().GetAddress() != node.GetAddress() || cur.GetNodeSecret() != l.rec.GetNodeSecret() || cur.GetNode().GetTls() != node.GetTls() {
		// What was already received is still the truth of what ran:
		// the instance reports and notices, the migration reports and
		// the images.
		batch, _, _ := s.drain(cn, l.in, nil, cap(l.in))
		if err := cn.recordReceived(ctx, s, batch); err != nil {
			cn.log.Warn("cannot record what the worker reported before the session ended", "err", err)
		}
		return nil, errSessionEnded
	}
	// The node's discovery access, first thing after the hello and
	// whenever it changes (discovery.go).
	if err := cn.syncDiscovery(l.stream, s, r, ws); err != nil {
		return nil, err
	}
	// The access replica likewise (access_replica.go).
	if err := cn.syncAccessReplica(l.stream, s, r, ws); err != nil {
		return nil, err
	}
	// And the cluster's norsk-mgr URLs (control_planes.go).
	if err := cn.syncControlPlanes(l.stream, s, ws); err != nil {
		return nil, err
	}
	insts := r.InstancesOnNode(ws, cn.nodeID)
	jobOf := func(id string) *managerv1.Job {
		if j := r.Job(ws, id); j != nil {
			return j.GetJob()
		}
		return nil
	}
	for _, a := range Plan(insts, jobOf, s.wv) {
		if !s.heartbeatSeen && holdForLease(a, jobOf) {
			// A lease-protected instance starts only once the worker has
			// refreshed its lease on this stream (it sends a heartbeat
			// right after its hello): a worker whose lease ran out
			// while it was cut off would otherwise stop it again at once.
			continue
		}
		if p, ok := s.pending[a.key]; ok && p.kind == a.kind && p.token == a.token && cfg.Clock.Now().Sub(p.sentAt) < cfg.ResendAfter {
			continue
		}
		s.seq++
		a.msg.Seq = s.seq
		if err := l.stream.Send(a.msg); err != nil {
			return nil, fmt.Errorf("send %s: %w", a.kind, err)
		}
		s.pending[a.key] = pend{kind: a.kind, token: a.token, sentAt: cfg.Clock.Now()}
		s.seqKind[s.seq] = a.kind
		if m := cfg.Metrics; m != nil {
			m.CommandsSent.WithLabelValues(a.kind.String()).Inc()
		}
		cn.log.Debug("command sent", "kind", a.kind.String(), "instance", a.key, "token", a.token)
	}
	// A terminating node is finished once its worker has stopped
	// everything (or has had long enough to).
	if cur.GetNode().GetState() == managerv1.NodeState_NODE_STATE_STOPPING {
		if s.terminateBy.IsZero() {
			s.terminateBy = cfg.Clock.Now().Add(cfg.TerminateTimeout)
		}
		if allStopped(insts) || !cfg.Clock.Now().Before(s.terminateBy) {
			cn.terminate(ctx, l, s, cur.GetDeregistering())
			return nil, errSessionEnded
		}
	}
	return ws, nil
}

// terminate tells the worker its node is terminated (or deregistered),
// gives it a moment to answer, and records the node finished: once it is,
// this connection is closed.
func (cn *conn) terminate(ctx context.Context, l *link, s *sessionState, dereg bool) {
	reason := "terminated"
	if dereg {
		reason = "deregistered"
	}
	s.seq++
	seq := s.seq
	if err := l.stream.Send(&managerv1.ControllerMessage{Seq: seq, Msg: &managerv1.ControllerMessage_Terminate{Terminate: &managerv1.Terminate{Reason: reason, Deregistered: dereg}}}); err == nil {
		if m := cn.c.cfg.Metrics; m != nil {
			m.CommandsSent.WithLabelValues("terminate").Inc()
		}
		cn.awaitAck(ctx, s, seq, l.in)
	}
	cn.finish(ctx, reason)
}

// awaitAck waits (at most 10 s) for the worker to acknowledge command seq,
// recording what arrives meanwhile (until the stream ends): reports,
// notices, migration reports and images, as pump does.
func (cn *conn) awaitAck(ctx context.Context, s *sessionState, seq uint64, in <-chan received) {
	t := cn.c.cfg.Clock.NewTimer(10 * time.Second)
	defer t.Stop()
	for {
		select {
		case r := <-in:
			if r.err != nil {
				return
			}
			if a := r.msg.GetAck(); a != nil && a.GetSeq() == seq {
				return
			}
			if err := cn.recordReceived(ctx, s, s.handle(cn, r.msg, nil)); err != nil {
				cn.log.Warn("cannot record what the worker reported while terminating", "err", err)
			}
		case <-t.C():
			cn.log.Warn("worker did not acknowledge the terminate in 10s")
			return
		case <-ctx.Done():
			return
		}
	}
}

// holdForLease reports whether a is the start of a lease-protected
// instance, held until the worker's first heartbeat on the stream.
func holdForLease(a action, jobOf func(id string) *managerv1.Job) bool {
	if a.kind != actStart && a.kind != actStartPrepared {
		return false
	}
	jobID, _ := splitKey(a.key)
	return jobOf(jobID).GetLeaseProtected()
}

// allStopped reports whether every one of insts is STOPPED.
func allStopped(insts []*managerv1.Instance) bool {
	for _, in := range insts {
		if in.GetPhase() != managerv1.InstancePhase_INSTANCE_PHASE_STOPPED {
			return false
		}
	}
	return true
}
