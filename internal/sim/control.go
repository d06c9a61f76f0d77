package sim

import (
	"context"
	"errors"
	"io"
	"strings"
	"time"

	"connectrpc.com/connect"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1/managerv1connect"
	"github.com/norsk-go/norsk-manager/internal/worker"
)

// defaultHeartbeat is the interval when the hello names none.
const defaultHeartbeat = time.Second

// controlHandler serves NodeController.Control for every node of a fleet,
// routing each stream by the node secret it carries.
type controlHandler struct{ f *Fleet }

var _ managerv1connect.NodeControllerHandler = controlHandler{}

// Control is one Manager connection to one node: hello, then commands down
// and reports and heartbeats up (node_controller.proto).
func (h controlHandler) Control(ctx context.Context, stream *connect.BidiStream[managerv1.ControllerMessage, managerv1.WorkerMessage]) error {
	f := h.f
	bearer, ok := strings.CutPrefix(stream.RequestHeader().Get("Authorization"), "Bearer ")
	n := f.lookup(bearer)
	if !ok || n == nil {
		return connect.NewError(connect.CodeUnauthenticated, errors.New("a Control stream needs a node secret as its bearer token"))
	}
	hello, err := worker.ReceiveHello(stream, n.nodeID())
	if err != nil {
		if errors.Is(err, io.EOF) {
			return nil
		}
		return err
	}
	interval := worker.HeartbeatInterval(hello, defaultHeartbeat)
	sess, err := n.open(ctx, worker.EpochOf(hello))
	if err != nil {
		return connect.NewError(connect.CodeFailedPrecondition, err)
	}
	defer n.close(sess)
	// A first heartbeat right after the hello, as a worker sends.
	sess.enqueue(n.heartbeat())

	recvErr := make(chan error, 1)
	f.handlers.Add(1)
	go func() {
		defer f.handlers.Done()
		for {
			msg, err := stream.Receive()
			if err != nil {
				recvErr <- err
				return
			}
			if sess.ctx.Err() != nil {
				recvErr <- nil
				return
			}
			n.onCommand(sess, msg)
		}
	}()

	hb := time.NewTimer(interval)
	defer hb.Stop()
	for {
		for _, m := range sess.take() {
			if err := stream.Send(m); err != nil {
				return nil
			}
		}
		select {
		case <-sess.ctx.Done():
			switch cause := context.Cause(sess.ctx); {
			case ctx.Err() != nil:
				return nil
			case errors.Is(cause, errReplaced):
				return connect.NewError(connect.CodeAborted, cause)
			default:
				return connect.NewError(connect.CodeUnavailable, errShutdown)
			}
		case <-recvErr:
			return nil
		case <-sess.wake:
		case <-hb.C:
			sess.enqueue(n.heartbeat())
			hb.Reset(interval)
		}
	}
}
