package jobsocket

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"connectrpc.com/connect"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1/managerv1connect"
	"github.com/norsk-go/norsk-manager/internal/runtime"
	jsapi "github.com/norsk-go/norsk-manager/pkg/jobsocket"
)

// Why a job's stream (an attachment) ends.
var (
	errSocketClosed   = errors.New("the instance's job socket was closed")
	errAttachReplaced = errors.New("the job attached again on a newer stream")
	errAttachEnded    = errors.New("the job's stream ended")
)

// Info is what an instance's socket tells its job and reports under:
// the token it is held under, the runtime role it runs as.
type Info struct {
	Token       uint64
	RuntimeRole string
	// MigrationID is the migration the instance was started as the target
	// of ("" = none, or its handover was applied); Handover says it is a
	// handover's target, InitialState the source's state it was started
	// with.
	MigrationID  string
	Handover     bool
	InitialState []byte
}

// jobSocket is the job socket of one instance: its server, the job's
// current stream and the instance's part in a handover (migration.go).
type jobSocket struct {
	m     *Sockets
	key   runtime.Key
	token uint64
	dir   string
	path  string
	ln    *net.UnixListener
	srv   *http.Server
	log   *slog.Logger

	// order is held while a message is sent and its acknowledgement queued,
	// and while a message from the job is handled: a command's ack always
	// reaches the Manager before the report of the job's answer to it.
	order sync.Mutex

	mu   sync.Mutex
	info Info
	// att is the job's current stream (nil: the job is not attached).
	att     *attachment
	nextAtt uint64
	// mig is the migration the instance takes part in (zero: none);
	// appliedID the target migration it applied.
	mig       handover
	appliedID string
	// appliedSummary is the job's applied payload for appliedID, repeated
	// to a repeated cutover-apply.
	appliedSummary []byte
	// pendingAbort is an abort the job could not be told (it was not
	// attached): it follows the next hello_ack.
	pendingAbort *managerv1.JobSocketAbortMigration
	// opened is when the socket was opened; waiting a get_state held
	// until the job first attaches (await.go).
	opened  time.Time
	waiting *heldGetState
	closed  bool
}

func newJobSocket(m *Sockets, key runtime.Key, info Info, dir, path string, ln *net.UnixListener) *jobSocket {
	s := &jobSocket{
		m: m, key: key, token: info.Token, dir: dir, path: path, ln: ln, info: info,
		log: m.log.With("instance", key.String(), "job_socket", path), opened: m.now(),
	}
	if info.MigrationID != "" && info.Handover {
		s.mig = handover{id: info.MigrationID, side: sideTarget, stage: stageLaunched}
	}
	return s
}

// attachment is one Attach stream of a job: a FIFO of messages to send,
// drained by the stream's handler, so that sends never run concurrently.
type attachment struct {
	id     uint64
	client string
	ctx    context.Context
	cancel context.CancelCauseFunc

	mu    sync.Mutex
	queue []toJob
	wake  chan struct{}
}

// toJob is a message for the job and what to do once the stream has taken
// it (err nil) or could not (the stream ended first, or the send failed).
type toJob struct {
	msg  *managerv1.JobSocketToJob
	sent func(err error)
}

// push queues a message; it never blocks.
func (t *attachment) push(msg *managerv1.JobSocketToJob, sent func(error)) {
	t.mu.Lock()
	t.queue = append(t.queue, toJob{msg: msg, sent: sent})
	t.mu.Unlock()
	select {
	case t.wake <- struct{}{}:
	default:
	}
}

func (t *attachment) pop() (toJob, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.queue) == 0 {
		return toJob{}, false
	}
	m := t.queue[0]
	t.queue[0] = toJob{}
	t.queue = t.queue[1:]
	return m, true
}

// take empties the queue and returns what it held.
func (t *attachment) take() []toJob {
	t.mu.Lock()
	defer t.mu.Unlock()
	q := t.queue
	t.queue = nil
	return q
}

// attachHandler serves JobSocket.Attach on one instance's socket.
type attachHandler struct{ s *jobSocket }

var _ managerv1connect.JobSocketHandler = attachHandler{}

// Attach is one stream of the instance's job: hello, hello_ack (then
// whatever the instance is owed: a pending abort, a target's initial
// state), then the handshake both ways until the stream ends, the job
// attaches again (the newer stream wins) or the socket closes.
func (h attachHandler) Attach(ctx context.Context, stream *connect.BidiStream[managerv1.JobSocketFromJob, managerv1.JobSocketToJob]) error {
	s := h.s
	if !s.m.enter() {
		return connect.NewError(connect.CodeUnavailable, errJobSocketsClosed)
	}
	defer s.m.wg.Done()

	first, err := stream.Receive()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return nil
		}
		return err
	}
	hello := first.GetHello()
	if hello == nil {
		s.log.Warn("refused a job socket stream that did not begin with hello")
		return connect.NewError(connect.CodeInvalidArgument, errors.New("the first message on a job socket stream must be hello"))
	}
	att := s.attach(ctx, hello)
	if att == nil {
		return connect.NewError(connect.CodeUnavailable, errSocketClosed)
	}
	defer s.detach(att)

	recvErr := make(chan error, 1)
	s.m.wg.Add(1) // the handler's own count keeps closeAll's Wait from returning first
	go func() {
		defer s.m.wg.Done()
		recvErr <- s.receive(att, stream)
	}()
	for {
		for {
			m, ok := att.pop()
			if !ok {
				break
			}
			s.order.Lock()
			err := stream.Send(m.msg)
			if m.sent != nil {
				m.sent(err)
			}
			s.order.Unlock()
			if err != nil {
				s.log.Info("job socket stream ended: send failed", "stream", att.id, "err", err)
				att.cancel(errAttachEnded)
				return nil
			}
		}
		select {
		case <-att.ctx.Done():
			switch cause := context.Cause(att.ctx); {
			case errors.Is(cause, errAttachReplaced):
				return connect.NewError(connect.CodeAborted, cause)
			case errors.Is(cause, errSocketClosed):
				return connect.NewError(connect.CodeUnavailable, cause)
			default:
				return nil // the job went away
			}
		case err := <-recvErr:
			if err != nil && !errors.Is(err, io.EOF) {
				s.log.Info("job socket stream ended", "stream", att.id, "err", err)
			} else {
				s.log.Info("job socket stream closed by the job", "stream", att.id)
			}
			return nil
		case <-att.wake:
		}
	}
}

// enter counts a stream handler in; false once the sockets are closing.
func (m *Sockets) enter() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return false
	}
	m.wg.Add(1)
	return true
}

// receive hands the job's messages to the socket until the stream ends.
func (s *jobSocket) receive(att *attachment, stream *connect.BidiStream[managerv1.JobSocketFromJob, managerv1.JobSocketToJob]) error {
	for {
		msg, err := stream.Receive()
		if err != nil {
			return err
		}
		if att.ctx.Err() != nil {
			return nil
		}
		s.order.Lock()
		s.fromJob(att, msg)
		s.order.Unlock()
	}
}

// attach makes a new stream the job's current one (ending the previous,
// whose unsent handshake messages move to it) and queues its greeting:
// hello_ack, a pending abort, and a target's initial state unless the
// worker already has its ready. Nil once the socket is closed.
func (s *jobSocket) attach(ctx context.Context, hello *managerv1.JobSocketHello) *attachment {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	actx, cancel := context.WithCancelCause(ctx)
	s.nextAtt++
	att := &attachment{id: s.nextAtt, client: hello.GetClient(), ctx: actx, cancel: cancel, wake: make(chan struct{}, 1)}
	var stale []toJob
	if old := s.att; old != nil {
		stale = old.take()
		old.cancel(errAttachReplaced)
	}
	ack := &managerv1.JobSocketHelloAck{
		Protocol:    jsapi.Protocol,
		JobId:       s.key.JobID,
		Role:        s.key.Role,
		RuntimeRole: s.info.RuntimeRole,
		NodeId:      s.m.cfg.NodeID(),
	}
	ack.MigrationId = s.info.MigrationID
	if s.mig.side == sideTarget {
		ack.MigrationId, ack.Handover = s.mig.id, true
	}
	att.push(&managerv1.JobSocketToJob{Msg: &managerv1.JobSocketToJob_HelloAck{HelloAck: ack}}, nil)
	if ab := s.pendingAbort; ab != nil {
		s.pendingAbort = nil
		att.push(abortToJob(ab), s.abortSent(ab, nil))
	}
	if s.owesInitialState() {
		att.push(&managerv1.JobSocketToJob{Msg: &managerv1.JobSocketToJob_InitialState{InitialState: &managerv1.JobSocketInitialState{
			MigrationId: s.mig.id, Payload: s.info.InitialState,
		}}}, s.initialStateSent(s.mig.id))
	}
	s.sendHeld(att)
	var dropped []func(error)
	for _, t := range stale {
		switch t.msg.GetMsg().(type) {
		case *managerv1.JobSocketToJob_HelloAck, *managerv1.JobSocketToJob_InitialState:
			if t.sent != nil {
				dropped = append(dropped, t.sent)
			}
		default:
			att.push(t.msg, t.sent)
		}
	}
	s.att = att
	s.mu.Unlock()
	for _, f := range dropped {
		f(errAttachReplaced)
	}
	s.log.Info("job attached to its job socket", "stream", att.id, "client", hello.GetClient(), "protocol", hello.GetProtocol(),
		"migration_id", ack.GetMigrationId(), "handover", ack.GetHandover())
	return att
}

// detach ends a stream; what it had not sent fails (a command waiting for
// it is refused, an abort waits for the next attach).
func (s *jobSocket) detach(att *attachment) {
	s.mu.Lock()
	if s.att == att {
		s.att = nil
	}
	s.mu.Unlock()
	att.cancel(errAttachEnded)
	for _, t := range att.take() {
		if t.sent != nil {
			t.sent(errAttachEnded)
		}
	}
}

func abortToJob(ab *managerv1.JobSocketAbortMigration) *managerv1.JobSocketToJob {
	return &managerv1.JobSocketToJob{Msg: &managerv1.JobSocketToJob_Abort{Abort: ab}}
}
