package nodes

import (
	"context"
	"fmt"
	"time"

	"github.com/hashicorp/go-memdb"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/internal/store/state"
)

// pump waits for one of: a change to what reconcile read (ws), the next
// heartbeat interval (or the moment the worker's silence would reach the
// silence limit), a command queued on cn.out (sent at once), or the
// worker's messages (taken with whatever else has already arrived, so that
// reports are batched). It then records the batch's reports and notices,
// migration reports and images, in that order (recordReceived) and before
// the stream's end is handled (a worker forgets a stopped instance once it
// has reported it); confirms the recorded STOPPED reports; and answers the newest
// heartbeat with a lease grant. It returns the stream's end, or an error
// when recording or sending fails; when the worker has been silent for the
// silence limit it returns an error and when it was last heard from
// (silentSince). Only the session's goroutine calls it: it sends on the
// stream.
func (cn *conn) pump(ctx, sctx context.Context, l *link, s *sessionState, ws memdb.WatchSet) (silentSince time.Time, err error) {
	cfg := &cn.c.cfg
	wctx, wcancel := context.WithCancel(sctx)
	changed := ws.WatchCh(wctx)
	// Wake at the next heartbeat, or when the worker's silence would
	// reach the lost grace, whichever is sooner.
	wake := cfg.HeartbeatInterval
	if until := l.heardAt().Add(cn.silenceLimit()).Sub(cfg.Clock.Now()); until < wake {
		wake = max(until, time.Millisecond)
	}
	tick := cfg.Clock.NewTimer(wake)
	var batch []*managerv1.InstanceReport
	var ended error // the stream's end, once reached
	select {
	case <-ctx.Done():
		wcancel()
		tick.Stop()
		return time.Time{}, ctx.Err()
	case <-changed:
	case <-tick.C():
	case o := <-cn.out:
		if err := s.sendOutbound(cn, l.stream.Send, o); err != nil {
			wcancel()
			tick.Stop()
			return time.Time{}, err
		}
	case r := <-l.in:
		// Take it and what else has arrived, to batch the reports.
		var took bool
		if batch, took, ended = s.take(cn, r, batch); took {
			batch, _, ended = s.drain(cn, l.in, batch, cap(l.in)-1)
		}
	}
	wcancel()
	tick.Stop()
	// The reports are recorded before the stream's end is handled: a
	// worker forgets a stopped instance once it has reported it.
	if err := cn.recordReceived(ctx, s, batch); err != nil {
		return time.Time{}, err
	}
	if ended != nil {
		return time.Time{}, ended
	}
	if err := confirmStopped(l.stream, batch); err != nil {
		return time.Time{}, fmt.Errorf("confirm recorded reports: %w", err)
	}
	if err := cn.grantLease(l.stream, s); err != nil {
		return time.Time{}, fmt.Errorf("send lease grant: %w", err)
	}
	// A worker silent for the lost grace is down since it was last
	// heard from: the session ends and the node is lost at once (a host
	// that vanished sends no reset; decision 0048).
	last := l.heardAt()
	if silent := cfg.Clock.Now().Sub(last); silent >= cn.silenceLimit() {
		return last, fmt.Errorf("nothing from the worker for %s", silent.Round(time.Millisecond))
	}
	return time.Time{}, nil
}

// grantLease answers the newest heartbeat taken since the last grant (if
// it carried its send time) with a LeaseGrant: the worker's leases run
// from that send time for LeaseTTL, or without end while leases are
// paused. Only the session's goroutine calls it: it sends on the stream.
// It is sent after the batch's reports are recorded, so a primary that
// cannot commit (and is about to lose its role) grants nothing.
func (cn *conn) grantLease(stream *controlStream, s *sessionState) error {
	if s.grantDue == 0 {
		return nil
	}
	sent := s.grantDue
	s.grantDue = 0
	paused := cn.c.cfg.Store.State().Snapshot().LeaseState().GetPaused()
	return stream.Send(&managerv1.ControllerMessage{Msg: &managerv1.ControllerMessage_Lease{Lease: &managerv1.LeaseGrant{
		HeartbeatMonoMs: sent,
		TtlMs:           cn.c.cfg.LeaseTTL.Milliseconds(),
		Paused:          paused,
	}}})
}

// recordReceived records everything taken from the worker's stream and not
// yet recorded, in this order: batch's instance reports with the notices,
// the migration reports, then the images (recordImages). Every path that
// takes messages off the stream (pump, reconcile ending a session, and
// awaitAck while terminating) records through it, so that no kind is
// dropped. It stops at the first write that fails.
func (cn *conn) recordReceived(ctx context.Context, s *sessionState, batch []*managerv1.InstanceReport) error {
	if err := cn.recordReports(ctx, batch, s.takeNotices()); err != nil {
		return err
	}
	migs := s.migrations
	s.migrations = nil
	if err := cn.recordMigrationReports(ctx, migs); err != nil {
		return err
	}
	return cn.recordImages(ctx, s)
}

// recordReports applies a batch of the worker's instance reports, and the
// notices it sent with them (written to the jobs' histories), to the store
// (nothing when both are empty).
func (cn *conn) recordReports(ctx context.Context, batch []*managerv1.InstanceReport, notices []*managerv1.WorkerNotice) error {
	if len(batch) == 0 && len(notices) == 0 {
		return nil
	}
	if m := cn.c.cfg.Metrics; m != nil {
		m.Reports.Add(float64(len(batch)))
	}
	for _, n := range notices {
		cn.log.Warn("worker notice", "instance", n.GetJobId()+"/"+n.GetRole(), "token", n.GetFencingToken(), "kind", n.GetKind(), "message", n.GetMessage())
	}
	cmd := &storev1.InstanceReports{NodeId: cn.nodeID, Reports: batch, Notices: notices}
	if _, err := cn.c.apply(ctx, &storev1.Command{Cmd: &storev1.Command_InstanceReports{InstanceReports: cmd}}); err != nil {
		return fmt.Errorf("record %d report(s) and %d notice(s) of node %s: %w", len(batch), len(notices), cn.nodeID, err)
	}
	return nil
}

// received is one item read from the worker's stream: a message, or (as the
// last item) the error that ended the stream.
type received struct {
	msg *managerv1.WorkerMessage
	err error
}

// take handles one item read from the stream, adding reports to batch. heard
// says it was a message; ended is the stream's end (nil for a message).
func (s *sessionState) take(cn *conn, r received, batch []*managerv1.InstanceReport) (_ []*managerv1.InstanceReport, heard bool, ended error) {
	if r.err != nil {
		return batch, false, r.err
	}
	return s.handle(cn, r.msg, batch), true, nil
}

// drain handles, without waiting, up to n items that have already arrived,
// adding reports to batch. It stops at the stream's end and returns it as
// ended; heard says at least one message was taken.
func (s *sessionState) drain(cn *conn, in <-chan received, batch []*managerv1.InstanceReport, n int) (_ []*managerv1.InstanceReport, heard bool, ended error) {
	for range n {
		select {
		case r := <-in:
			var h bool
			batch, h, ended = s.take(cn, r, batch)
			heard = heard || h
			if ended != nil {
				return batch, heard, ended
			}
		default:
			return batch, heard, nil
		}
	}
	return batch, heard, nil
}

// handle takes one worker message, adding reports to batch.
func (s *sessionState) handle(cn *conn, m *managerv1.WorkerMessage, batch []*managerv1.InstanceReport) []*managerv1.InstanceReport {
	switch x := m.GetMsg().(type) {
	case *managerv1.WorkerMessage_Report:
		r := x.Report
		key := state.InstanceID(r.GetJobId(), r.GetRole())
		s.wv[key] = held{token: r.GetFencingToken(), phase: r.GetPhase(), jobHash: r.GetJobHash()}
		delete(s.pending, key)
		batch = append(batch, r)
	case *managerv1.WorkerMessage_Heartbeat:
		s.heartbeatSeen = true
		if sent := x.Heartbeat.GetSentMonoMs(); sent > s.grantDue {
			s.grantDue = sent
		}
		cn.c.setLive(cn.nodeID, func(l *Live) {
			l.Load = x.Heartbeat.GetLoad()
			l.LastSeen = cn.c.cfg.Clock.Now()
			if x.Heartbeat.GetSentMonoMs() != 0 {
				l.LeaseRefreshed = l.LastSeen
			}
		})
	case *managerv1.WorkerMessage_Migration:
		s.migrations = append(s.migrations, x.Migration)
	case *managerv1.WorkerMessage_Images:
		s.images = x.Images // only the newest matters
	case *managerv1.WorkerMessage_Prefetched:
		x.Prefetched.NodeId = cn.nodeID // the stream says whose it is
		s.prefetched = append(s.prefetched, x.Prefetched)
	case *managerv1.WorkerMessage_Notice:
		if len(s.notices) < maxNotices {
			s.notices = append(s.notices, x.Notice)
		} else {
			cn.log.Warn("worker notice (not recorded: too many at once)", "instance", x.Notice.GetJobId()+"/"+x.Notice.GetRole(),
				"kind", x.Notice.GetKind(), "message", x.Notice.GetMessage())
		}
	case *managerv1.WorkerMessage_Ack:
		if s.answer(x.Ack) {
			break
		}
		kind := s.seqKind[x.Ack.GetSeq()]
		delete(s.seqKind, x.Ack.GetSeq())
		if x.Ack.GetError() != "" {
			if m := cn.c.cfg.Metrics; m != nil {
				m.CommandErrs.WithLabelValues(kind.String()).Inc()
			}
			cn.log.Warn("worker refused a command", "kind", kind.String(), "seq", x.Ack.GetSeq(), "code", x.Ack.GetErrorCode(), "err", x.Ack.GetError())
		}
	case *managerv1.WorkerMessage_Hello:
		cn.log.Warn("unexpected second hello from worker")
	}
	return batch
}
