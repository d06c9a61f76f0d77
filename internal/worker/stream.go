package worker

import (
	"context"
	"errors"
	"sync"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/internal/runtime"
	"github.com/norsk-go/norsk-manager/internal/worker/hostinfo"
)

// session is one Control stream's outbound side: a FIFO the stream's
// handler goroutine drains, so that sends never happen concurrently.
type session struct {
	id     uint64
	ctx    context.Context // ends when the stream is replaced or gone
	cancel context.CancelCauseFunc

	mu    sync.Mutex
	queue []outbound
	wake  chan struct{}
}

// outbound is a message to send and what to do once it has been sent.
type outbound struct {
	msg  *managerv1.WorkerMessage
	sent func()
}

// enqueue queues msg. It never blocks. Messages queued on a session that
// has ended are dropped.
func (s *session) enqueue(msg *managerv1.WorkerMessage) { s.enqueueThen(msg, nil) }

// enqueueThen queues msg; sent (if not nil) runs once msg has been sent.
func (s *session) enqueueThen(msg *managerv1.WorkerMessage, sent func()) {
	if s.ctx.Err() != nil {
		return
	}
	s.mu.Lock()
	s.queue = append(s.queue, outbound{msg: msg, sent: sent})
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *session) pop() (outbound, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.queue) == 0 {
		return outbound{}, false
	}
	m := s.queue[0]
	s.queue[0] = outbound{}
	s.queue = s.queue[1:]
	return m, true
}

// Why the worker ends a session.
var (
	errReplaced = errors.New("the Control stream was replaced by a newer one")
	errShutdown = errors.New("the worker is shutting down")
)

// snapshot is the last report published for an instance. deliver is set
// for a tombstone: it is called once the Manager says it has committed the
// report (ReportsRecorded), not merely once it was sent — a Manager that
// fails before committing gets it again in the next hello.
type snapshot struct {
	key     runtime.Key
	report  *managerv1.InstanceReport
	deliver func()
}

// Epoch orders the Managers' primaries: a newer cluster generation, then a
// newer raft term. The zero epoch (a Manager that does not say) orders
// before every other and is always accepted.
type Epoch struct{ Generation, Term uint64 }

// EpochOf is the epoch a Manager's hello says its primary has.
func EpochOf(hello *managerv1.ControllerHello) Epoch {
	return Epoch{Generation: hello.GetManagerGeneration(), Term: hello.GetManagerTerm()}
}

// Before reports whether e is older than o.
func (e Epoch) Before(o Epoch) bool {
	if e.Generation != o.Generation {
		return e.Generation < o.Generation
	}
	return e.Term < o.Term
}

// errSuperseded refuses a hello from a primary older than one this worker
// already follows: a deposed primary must not take the stream back.
var errSuperseded = errors.New("a newer Manager primary already holds this worker's stream")

// openSession makes a new stream the current one (ending the previous) and
// queues its hello with the inventory. Reports published from then on go to
// it. Nil once the agent shuts down; errSuperseded when epoch is older than
// the newest primary's that opened a session.
func (a *Agent) openSession(ctx context.Context, epoch Epoch) (*session, error) {
	a.pubMu.Lock()
	if a.streamsClosed {
		a.pubMu.Unlock()
		return nil, nil
	}
	if epoch != (Epoch{}) {
		if epoch.Before(a.epoch) {
			a.pubMu.Unlock()
			return nil, errSuperseded
		}
		a.epoch = epoch
	}
	if a.cur != nil {
		a.cur.cancel(errReplaced)
	}
	sctx, cancel := context.WithCancelCause(ctx)
	a.nextSession++
	s := &session{id: a.nextSession, ctx: sctx, cancel: cancel, wake: make(chan struct{}, 1)}
	a.cur = s
	var inv []*managerv1.InstanceReport
	for _, snap := range a.sortedSnaps() {
		inv = append(inv, snap.report)
	}
	id := a.identity()
	hello := &managerv1.WorkerHello{
		NodeId:            id.NodeID,
		Hardware:          hostinfo.Hardware(a.cfg.GPUs),
		Capabilities:      a.cfg.Capabilities,
		Runtime:           a.runtimeName,
		WorkerVersion:     a.cfg.Version,
		Inventory:         inv,
		WorkerIncarnation: a.incarnation,
	}
	if a.images != nil {
		hello.HeldImages = a.images.Snapshot()
	}
	s.enqueue(&managerv1.WorkerMessage{Msg: &managerv1.WorkerMessage_Hello{Hello: hello}})
	a.flushMigrationReportsLocked(s)
	a.flushNoticesLocked(s)
	a.pubMu.Unlock()
	a.setStreamUp(true)
	return s, nil
}

// closeSession ends a stream's session. The handshake reports it had not
// sent go to the next stream (migration_report.go).
func (a *Agent) closeSession(s *session) {
	a.pubMu.Lock()
	wasCurrent := a.cur == s
	if wasCurrent {
		a.cur = nil
	}
	a.rescueMigrationReportsLocked(s)
	a.pubMu.Unlock()
	s.cancel(nil)
	if wasCurrent {
		a.setStreamUp(false)
	}
}

// publish records r as the instance's current report and sends it on the
// current stream. deliver is set for a tombstone (see snapshot).
func (a *Agent) publish(key runtime.Key, r *managerv1.InstanceReport, deliver func()) {
	a.pubMu.Lock()
	defer a.pubMu.Unlock()
	a.snaps[key] = &snapshot{key: key, report: r, deliver: deliver}
	if a.cur != nil {
		a.cur.enqueue(reportMessage(r))
	}
}

// onRecorded delivers the tombstones whose STOPPED reports the Manager has
// committed: each instance then forgets its tombstone.
func (a *Agent) onRecorded(m *managerv1.ReportsRecorded) {
	var delivers []func()
	a.pubMu.Lock()
	for _, r := range m.GetReports() {
		snap := a.snaps[runtime.Key{JobID: r.GetJobId(), Role: r.GetRole()}]
		if snap == nil || snap.deliver == nil || snap.report.GetPhase() != managerv1.InstancePhase_INSTANCE_PHASE_STOPPED ||
			snap.report.GetFencingToken() != r.GetFencingToken() {
			continue
		}
		delivers = append(delivers, snap.deliver)
		snap.deliver = nil
	}
	a.pubMu.Unlock()
	for _, d := range delivers {
		d()
	}
}

// unpublish forgets an instance that the worker no longer holds.
func (a *Agent) unpublish(key runtime.Key) {
	a.pubMu.Lock()
	defer a.pubMu.Unlock()
	delete(a.snaps, key)
}

// sendReport sends a report of something the worker does not hold (any
// more) on the current stream, if one is up.
func (a *Agent) sendReport(r *managerv1.InstanceReport) {
	a.pubMu.Lock()
	defer a.pubMu.Unlock()
	if a.cur != nil {
		a.cur.enqueue(reportMessage(r))
	}
}

func reportMessage(r *managerv1.InstanceReport) *managerv1.WorkerMessage {
	return &managerv1.WorkerMessage{Msg: &managerv1.WorkerMessage_Report{Report: r}}
}
