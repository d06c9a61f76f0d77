package jobsocket

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1/managerv1connect"
)

// Default redial backoff (WithBackoff).
const (
	DefaultMinBackoff = 100 * time.Millisecond
	DefaultMaxBackoff = 5 * time.Second
)

// maxPathLen is the longest Unix socket path Linux accepts (sun_path is
// 108 bytes, NUL included).
const maxPathLen = 107

// ErrNotAttached: Ready or Abort was called while no stream is up (before
// the first hello_ack, or between a stream's end and the next attach).
var ErrNotAttached = errors.New("jobsocket: not attached to the worker")

// Option configures a Session (Dial's variadic arguments).
type Option func(*options)

// options is what the Options set.
type options struct {
	client                 string
	log                    *slog.Logger
	minBackoff, maxBackoff time.Duration
}

// WithClient sets the free text hello carries for the worker's log (the
// application and its version).
func WithClient(client string) Option { return func(o *options) { o.client = client } }

// WithLogger sets where the session logs (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.log = l } }

// WithBackoff bounds the jittered, doubling wait between attaches after a
// stream ends (defaults DefaultMinBackoff and DefaultMaxBackoff). The wait
// starts again from min after an attach that reached hello_ack.
func WithBackoff(min, max time.Duration) Option {
	return func(o *options) { o.minBackoff, o.maxBackoff = min, max }
}

// Session is a job's connection to its job socket. Make it with Dial, run
// it with Run (once at a time), release it with Close. Ready, Abort and
// Identity are safe for concurrent use.
type Session struct {
	path   string
	opts   options
	log    *slog.Logger
	tr     *http.Transport
	client managerv1connect.JobSocketClient

	running atomic.Bool

	mu     sync.Mutex
	probe  net.Conn // Dial's connection, handed to the first attach
	stream *connect.BidiStreamForClient[managerv1.JobSocketFromJob, managerv1.JobSocketToJob]
	id     Identity
	// sendMu serialises sends on the stream (replies and the
	// application's Ready and Abort).
	sendMu sync.Mutex
}

// Dial connects to the job socket at path (normally
// os.Getenv(EnvSocket)) once, to fail early on a wrong path, and returns a
// Session that will attach over that connection when Run starts. It sends
// nothing: Run does.
func Dial(ctx context.Context, path string, opt ...Option) (*Session, error) {
	switch {
	case path == "":
		return nil, fmt.Errorf("jobsocket: no socket path (is %s set? the worker sets it when started with --job-socket)", EnvSocket)
	case len(path) > maxPathLen:
		return nil, fmt.Errorf("jobsocket: socket path %q is %d bytes, longer than a Unix socket path may be (%d)", path, len(path), maxPathLen)
	}
	var opts options
	for _, o := range opt {
		o(&opts)
	}
	if opts.log == nil {
		opts.log = slog.Default()
	}
	if opts.minBackoff <= 0 {
		opts.minBackoff = DefaultMinBackoff
	}
	if opts.maxBackoff <= 0 {
		opts.maxBackoff = DefaultMaxBackoff
	}
	opts.maxBackoff = max(opts.maxBackoff, opts.minBackoff)
	var d net.Dialer
	probe, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, fmt.Errorf("jobsocket: %w", err)
	}
	s := &Session{path: path, opts: opts, log: opts.log.With("job_socket", path), probe: probe}
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	s.tr = &http.Transport{
		Protocols:   &p,
		DialContext: s.dial,
		HTTP2:       &http.HTTP2Config{PingTimeout: 10 * time.Second, SendPingTimeout: 15 * time.Second},
	}
	// The host is never resolved: every connection goes to path.
	s.client = managerv1connect.NewJobSocketClient(&http.Client{Transport: s.tr}, "http://job-socket", connect.WithGRPC())
	return s, nil
}

// dial is the transport's dialer: Dial's connection first, then new ones.
func (s *Session) dial(ctx context.Context, _, _ string) (net.Conn, error) {
	s.mu.Lock()
	c := s.probe
	s.probe = nil
	s.mu.Unlock()
	if c != nil {
		return c, nil
	}
	var d net.Dialer
	return d.DialContext(ctx, "unix", s.path)
}

// Close releases the session's connections. Call it after Run has returned.
func (s *Session) Close() error {
	s.mu.Lock()
	c := s.probe
	s.probe = nil
	s.mu.Unlock()
	s.tr.CloseIdleConnections()
	if c != nil {
		return c.Close()
	}
	return nil
}

// Identity returns the identity of the newest hello_ack and whether a
// stream is up now.
func (s *Session) Identity() (Identity, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.id, s.stream != nil
}

// Ready tells the worker this migration target can start output; payload is
// the job's own (the Manager hands it to the source's OnStopOutputAt).
// ErrNotAttached when no stream is up: send it again from OnAttached or
// OnInitialState after the reconnect (the worker hands a target whose ready
// it did not get its initial state again).
func (s *Session) Ready(migrationID string, payload []byte) error {
	return s.sendApp(&managerv1.JobSocketFromJob{Msg: &managerv1.JobSocketFromJob_Ready{Ready: &managerv1.JobSocketReady{
		MigrationId: migrationID, Payload: payload,
	}}})
}

// Abort gives the migration up (a source that cannot stop, a target that
// cannot start): the Manager aborts it (before its point of no return) or,
// for a target past it, recovers the job elsewhere. ErrNotAttached when no
// stream is up.
func (s *Session) Abort(migrationID, reason string) error {
	return s.sendApp(&managerv1.JobSocketFromJob{Msg: &managerv1.JobSocketFromJob_Abort{Abort: &managerv1.JobSocketAbort{
		MigrationId: migrationID, Reason: reason,
	}}})
}

func (s *Session) sendApp(msg *managerv1.JobSocketFromJob) error {
	s.mu.Lock()
	stream := s.stream
	s.mu.Unlock()
	if stream == nil {
		return ErrNotAttached
	}
	return s.send(stream, msg)
}

// send sends one message on stream, serialised with every other send.
func (s *Session) send(stream *connect.BidiStreamForClient[managerv1.JobSocketFromJob, managerv1.JobSocketToJob], msg *managerv1.JobSocketFromJob) error {
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	if err := stream.Send(msg); err != nil {
		return fmt.Errorf("jobsocket: send: %w", err)
	}
	return nil
}

// Run attaches to the worker and serves h until ctx ends, then returns nil.
// Every stream that ends (the worker restarted or stopped serving, say) is
// followed by a new attach after a jittered backoff. Run returns an error
// only when the worker refuses the job for good (a gRPC UNIMPLEMENTED,
// INVALID_ARGUMENT, UNAUTHENTICATED or PERMISSION_DENIED status) or when
// another Run of the session is running.
func (s *Session) Run(ctx context.Context, h Handler) error {
	if !s.running.CompareAndSwap(false, true) {
		return errors.New("jobsocket: Run is already running on this session")
	}
	defer s.running.Store(false)
	backoff := s.opts.minBackoff
	for {
		attached, err := s.attach(ctx, h)
		if ctx.Err() != nil {
			return nil
		}
		if fatal(err) {
			return fmt.Errorf("jobsocket: the worker refused the job: %w", err)
		}
		if attached {
			backoff = s.opts.minBackoff
		}
		wait := backoff/2 + rand.N(backoff/2+1)
		s.log.Info("job socket stream ended; attaching again", "err", err, "in", wait.Round(time.Millisecond))
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		backoff = min(2*backoff, s.opts.maxBackoff)
	}
}

// fatal reports whether an attach's error means the worker will never take
// this job.
func fatal(err error) bool {
	switch connect.CodeOf(err) {
	case connect.CodeUnimplemented, connect.CodeInvalidArgument, connect.CodeUnauthenticated, connect.CodePermissionDenied:
		return true
	}
	return false
}

// attach runs one Attach stream: hello, hello_ack, then the worker's
// messages until the stream ends. attached says whether hello_ack came.
func (s *Session) attach(ctx context.Context, h Handler) (attached bool, err error) {
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream := s.client.Attach(actx)
	// The HTTP/2 transport does not see a cancelled context while the
	// request body is open and idle: closing our side is what ends a
	// blocked Receive when ctx ends (and the stream when attach returns).
	closeRequest := sync.OnceFunc(func() {
		s.sendMu.Lock()
		defer s.sendMu.Unlock()
		_ = stream.CloseRequest()
	})
	stop := context.AfterFunc(actx, closeRequest)
	defer func() {
		stop()
		closeRequest() // runs it, or waits for the AfterFunc's run to end
		_ = stream.CloseResponse()
	}()
	hello := &managerv1.JobSocketFromJob{Msg: &managerv1.JobSocketFromJob_Hello{Hello: &managerv1.JobSocketHello{
		Protocol: Protocol, Client: s.opts.client,
	}}}
	if err := s.send(stream, hello); err != nil {
		if errors.Is(err, io.EOF) {
			_, err = stream.Receive() // the stream's own error
		}
		return false, fmt.Errorf("send hello: %w", err)
	}
	first, err := stream.Receive()
	if err != nil {
		return false, fmt.Errorf("receive hello_ack: %w", err)
	}
	ack := first.GetHelloAck()
	if ack == nil {
		return false, fmt.Errorf("the worker's first message is %T, not hello_ack", first.GetMsg())
	}
	id := Identity{
		Protocol: ack.GetProtocol(), JobID: ack.GetJobId(), Role: ack.GetRole(),
		RuntimeRole: ack.GetRuntimeRole(), NodeID: ack.GetNodeId(), MigrationID: ack.GetMigrationId(),
		Handover: ack.GetHandover(),
	}
	s.mu.Lock()
	s.stream, s.id = stream, id
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.stream = nil
		s.mu.Unlock()
	}()
	s.log.Info("attached to the job socket", "job", id.JobID, "role", id.Role, "runtime_role", id.RuntimeRole,
		"node", id.NodeID, "migration_id", id.MigrationID, "handover", id.Handover)
	h.OnAttached(actx, id)
	for {
		msg, err := stream.Receive()
		if err != nil {
			return true, err
		}
		s.dispatch(actx, stream, h, msg)
	}
}

// dispatch hands one message to h and sends its reply.
func (s *Session) dispatch(ctx context.Context, stream *connect.BidiStreamForClient[managerv1.JobSocketFromJob, managerv1.JobSocketToJob], h Handler, msg *managerv1.JobSocketToJob) {
	var reply *managerv1.JobSocketFromJob
	switch m := msg.GetMsg().(type) {
	case *managerv1.JobSocketToJob_InitialState:
		h.OnInitialState(ctx, m.InitialState.GetMigrationId(), m.InitialState.GetPayload())
	case *managerv1.JobSocketToJob_GetState:
		id := m.GetState.GetMigrationId()
		payload, refused := h.OnGetState(ctx, id)
		reply = &managerv1.JobSocketFromJob{Msg: &managerv1.JobSocketFromJob_State{State: &managerv1.JobSocketState{
			MigrationId: id, Payload: payload, Refused: refused,
		}}}
	case *managerv1.JobSocketToJob_StopOutputAt:
		id := m.StopOutputAt.GetMigrationId()
		payload, err := h.OnStopOutputAt(ctx, id, m.StopOutputAt.GetPayload())
		if err != nil {
			reply = abortMessage(id, err)
		} else {
			reply = &managerv1.JobSocketFromJob{Msg: &managerv1.JobSocketFromJob_StoppedOutput{StoppedOutput: &managerv1.JobSocketStoppedOutput{
				MigrationId: id, Payload: payload,
			}}}
		}
	case *managerv1.JobSocketToJob_ApplyFrom:
		id := m.ApplyFrom.GetMigrationId()
		summary, err := h.OnApplyFrom(ctx, id, m.ApplyFrom.GetPayload())
		if err != nil {
			reply = abortMessage(id, err)
		} else {
			reply = &managerv1.JobSocketFromJob{Msg: &managerv1.JobSocketFromJob_Applied{Applied: &managerv1.JobSocketApplied{
				MigrationId: id, Payload: summary,
			}}}
		}
	case *managerv1.JobSocketToJob_Abort:
		h.OnAbort(ctx, m.Abort.GetMigrationId(), m.Abort.GetReason())
	default:
		s.log.Warn("ignoring a job socket message this client does not know", "type", fmt.Sprintf("%T", m))
	}
	if reply == nil {
		return
	}
	if err := s.send(stream, reply); err != nil {
		s.log.Warn("could not reply on the job socket", "err", err)
	}
}

func abortMessage(migrationID string, err error) *managerv1.JobSocketFromJob {
	return &managerv1.JobSocketFromJob{Msg: &managerv1.JobSocketFromJob_Abort{Abort: &managerv1.JobSocketAbort{
		MigrationId: migrationID, Reason: err.Error(),
	}}}
}
