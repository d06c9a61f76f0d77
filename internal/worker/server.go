package worker

import (
	"context"
	"crypto/subtle"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"time"

	"connectrpc.com/connect"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1/managerv1connect"
)

// minHeartbeat is the shortest heartbeat interval the worker honours.
const minHeartbeat = 10 * time.Millisecond

// MaxReadFrameSize is the HTTP/2 frame size a worker's server advertises:
// HTTP/2's smallest. The Manager's client keeps a write buffer per stream
// that grows to the frame size its peer advertises, for the life of the
// Control stream; at Go's default (1 MiB) that was most of a primary's
// memory per node (about 500 KiB of it), at 16 KiB about 80 KiB in all
// (decision 0056). The Control stream's messages are small; a large one
// (a migration payload) is sent in more frames.
const MaxReadFrameSize = 16 << 10

// newServer returns the NodeController server: the Control stream over
// HTTP/2 (cleartext or not) and HTTP/1.1, and GET /healthz.
func (a *Agent) newServer() *http.Server {
	mux := http.NewServeMux()
	path, h := managerv1connect.NewNodeControllerHandler(controlHandler{a})
	mux.Handle(path, h)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = io.WriteString(w, "ok\n")
	})
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetHTTP2(true) // over TLS with the Manager's certificate (tls.go)
	p.SetUnencryptedHTTP2(true)
	return &http.Server{
		Handler:           mux,
		Protocols:         &p,
		HTTP2:             &http.HTTP2Config{MaxReadFrameSize: MaxReadFrameSize},
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(a.logger().Handler(), slog.LevelWarn),
	}
}

// controlHandler serves NodeController.Control for an Agent.
type controlHandler struct{ a *Agent }

var _ managerv1connect.NodeControllerHandler = controlHandler{}

// Control is one Manager connection. See the protocol in
// node_controller.proto: hello, then commands down and reports up.
func (h controlHandler) Control(ctx context.Context, stream *connect.BidiStream[managerv1.ControllerMessage, managerv1.WorkerMessage]) error {
	a := h.a
	if !a.authorized(stream.RequestHeader()) {
		a.logger().Warn("refused a Control stream without the node secret", "peer", stream.Peer().Addr)
		return connect.NewError(connect.CodeUnauthenticated, errors.New("a Control stream needs the node secret as its bearer token"))
	}
	if !a.beginStream() {
		return connect.NewError(connect.CodeUnavailable, errors.New("the worker is shutting down"))
	}
	defer a.streams.Done()

	hello, err := ReceiveHello(stream, a.NodeID())
	if err != nil {
		if errors.Is(err, io.EOF) {
			return nil
		}
		return err
	}
	if err := a.learnCluster(hello.GetClusterId()); err != nil {
		a.logger().Error("refused a Control stream", "manager", hello.GetManagerNodeName(), "err", err)
		return connect.NewError(connect.CodeFailedPrecondition, err)
	}
	if len(hello.GetManagerUrls()) > 0 {
		a.rememberManagers(a.reg.setURLs(hello.GetManagerUrls()))
	}
	interval := HeartbeatInterval(hello, time.Duration(a.heartbeatDefault.Load()))

	sess, err := a.openSession(ctx, EpochOf(hello))
	if err != nil {
		a.logger().Warn("refused a Control stream from an older Manager primary", "manager", hello.GetManagerNodeName(),
			"term", hello.GetManagerTerm(), "generation", hello.GetManagerGeneration())
		return connect.NewError(connect.CodeFailedPrecondition, err)
	}
	if sess == nil {
		return connect.NewError(connect.CodeUnavailable, errors.New("the worker is shutting down"))
	}
	defer a.closeSession(sess)
	// The hello carries the whole list of norsk-mgr URLs (control_planes.go).
	a.setControlPlanes(hello.GetControlPlaneUrls())
	a.logger().Info("Control stream up", "manager", hello.GetManagerNodeName(), "peer", stream.Peer().Addr, "stream", sess.id)
	// A first heartbeat right after the hello: its LeaseGrant renews the
	// lease (lease.go) without waiting an interval.
	sess.enqueue(a.heartbeat())

	recvErr := make(chan error, 1)
	a.streams.Add(1)
	go func() {
		defer a.streams.Done()
		recvErr <- a.receive(sess, stream)
	}()

	hb := a.clock.NewTimer(interval)
	defer func() { hb.Stop() }()
	for {
		for {
			m, ok := sess.pop()
			if !ok {
				break
			}
			if err := stream.Send(m.msg); err != nil {
				a.logger().Info("Control stream ended: send failed", "stream", sess.id, "err", err)
				return nil
			}
			if m.sent != nil {
				m.sent()
			}
		}
		select {
		case <-sess.ctx.Done():
			switch cause := context.Cause(sess.ctx); {
			case ctx.Err() != nil:
				return nil // the Manager went away
			case errors.Is(cause, errReplaced):
				a.logger().Info("Control stream replaced by a newer one", "stream", sess.id)
				return connect.NewError(connect.CodeAborted, cause)
			case a.terminating.Load():
				return nil // the node is leaving: a clean end after the last ack
			default:
				return connect.NewError(connect.CodeUnavailable, errShutdown)
			}
		case err := <-recvErr:
			if err == nil || errors.Is(err, io.EOF) {
				a.logger().Info("Control stream closed by the Manager", "stream", sess.id)
				return nil
			}
			a.logger().Info("Control stream ended", "stream", sess.id, "err", err)
			return nil
		case <-sess.wake:
		case <-hb.C():
			sess.enqueue(a.heartbeat())
			hb = a.clock.NewTimer(interval)
		}
	}
}

// heartbeat is a heartbeat stamped with its send time on the lease's clock.
func (a *Agent) heartbeat() *managerv1.WorkerMessage {
	sent := a.leaseMono() // before anything else: an early stamp only shortens the lease
	return &managerv1.WorkerMessage{Msg: &managerv1.WorkerMessage_Heartbeat{Heartbeat: &managerv1.Heartbeat{
		Load:       a.load(),
		SentMonoMs: sent,
	}}}
}

// receive reads commands from the stream until it ends.
func (a *Agent) receive(sess *session, stream *connect.BidiStream[managerv1.ControllerMessage, managerv1.WorkerMessage]) error {
	for {
		msg, err := stream.Receive()
		if err != nil {
			return err
		}
		if sess.ctx.Err() != nil {
			return nil // replaced: its commands are not ours to act on
		}
		a.onCommand(sess, msg)
	}
}

// authorized checks the bearer node secret, in constant time.
func (a *Agent) authorized(h http.Header) bool {
	id := a.identity()
	if id == nil {
		return false
	}
	got := h.Get("Authorization")
	want := "Bearer " + id.NodeSecret
	return subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}

// beginStream counts a Control handler in; false once the agent shuts down.
func (a *Agent) beginStream() bool {
	a.pubMu.Lock()
	defer a.pubMu.Unlock()
	if a.streamsClosed {
		return false
	}
	a.streams.Add(1)
	return true
}

// ReceiveHello reads a Control stream's first message, which must be the
// Manager's hello, for node nodeID (a hello naming no node is for
// whichever node answers). io.EOF: the Manager closed the stream first.
// Shared by the worker and the simulator's nodes (internal/sim).
func ReceiveHello(stream *connect.BidiStream[managerv1.ControllerMessage, managerv1.WorkerMessage], nodeID string) (*managerv1.ControllerHello, error) {
	first, err := stream.Receive()
	if err != nil {
		return nil, err
	}
	hello := first.GetHello()
	if hello == nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("the first message on a Control stream must be hello"))
	}
	if n := hello.GetNodeId(); n != "" && n != nodeID {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("hello names node "+n+", this is node "+nodeID))
	}
	return hello, nil
}

// HeartbeatInterval is how often a node heartbeats on a stream whose hello
// is hello: the interval the Manager asks for, else def, and never under
// minHeartbeat. Shared by the worker and the simulator's nodes.
func HeartbeatInterval(hello *managerv1.ControllerHello, def time.Duration) time.Duration {
	interval := def
	if ms := hello.GetHeartbeatIntervalMs(); ms > 0 {
		interval = time.Duration(ms) * time.Millisecond
	}
	return max(interval, minHeartbeat)
}
