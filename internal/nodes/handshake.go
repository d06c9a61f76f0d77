package nodes

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1/managerv1connect"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
)

// controlStream is the Manager's side of one worker's Control stream.
type controlStream = connect.BidiStreamForClient[managerv1.ControllerMessage, managerv1.WorkerMessage]

// link is an open stream to a worker whose hello has been taken: what the
// handshake hands the rest of the session.
type link struct {
	// rec is the node's record the stream was opened for; the session ends
	// when the stored record's address, secret or TLS setting differ.
	rec    *storev1.NodeRecord
	stream *controlStream
	// in carries the worker's messages in order and then, as its last
	// item, the error that ended the stream. Only the session's goroutine
	// reads it.
	in chan received
	// heardAt is when the worker was last heard from: when a message
	// arrived, or when the reader last went back to waiting.
	heardAt func() time.Time
	// hello is the worker's hello; controlPlanes the norsk-mgr URLs the
	// Manager's hello told it.
	hello         *managerv1.WorkerHello
	controlPlanes []string
}

// handshake dials the worker of rec, sends the Manager's hello, starts the
// stream's reader (on wg, ending with sctx) and waits for the worker's hello:
// within 10 s, or by the time the node would be lost. It then records the
// node online, marks it connected (Live, metrics) and confirms the stopped
// instances of the hello's inventory. On an error the stream's request side
// is closed; on success the caller closes it.
func (cn *conn) handshake(ctx, sctx context.Context, wg *sync.WaitGroup, rec *storev1.NodeRecord) (_ *link, err error) {
	cfg := &cn.c.cfg
	node := rec.GetNode()
	hc, base, err := cn.dialTarget(node)
	if err != nil {
		cn.dialed(false)
		return nil, err
	}
	client := managerv1connect.NewNodeControllerClient(hc, base, connect.WithGRPC())
	stream := client.Control(sctx)
	stream.RequestHeader().Set("Authorization", "Bearer "+rec.GetNodeSecret())
	defer func() {
		if err != nil {
			_ = stream.CloseRequest()
		}
	}()
	controlPlanes, _ := cfg.ControlPlanes.Get()
	controlPlanes = slices.Clone(controlPlanes)
	hello := &managerv1.ControllerMessage{Msg: &managerv1.ControllerMessage_Hello{Hello: &managerv1.ControllerHello{
		NodeId:              cn.nodeID,
		ManagerNodeName:     cfg.ManagerName,
		HeartbeatIntervalMs: uint32(cfg.HeartbeatInterval / time.Millisecond),
		ManagerUrls:         cfg.ManagerURLs(),
		ControlPlaneUrls:    controlPlanes,
		ManagerTerm:         cfg.ManagerTerm,
		ManagerGeneration:   cfg.ManagerGeneration,
		ClusterId:           cn.c.clusterID(),
	}}}
	if err := stream.Send(hello); err != nil {
		cn.dialed(false)
		return nil, fmt.Errorf("send hello: %w", err)
	}
	l := &link{rec: rec, stream: stream, controlPlanes: controlPlanes}
	l.in, l.heardAt = cn.startReader(sctx, wg, stream)

	// The worker answers with its hello and inventory — within 10 s, or
	// by the time its node would be lost, so a dead connection re-dialled
	// cannot hold a lost node's verdict back.
	helloWait := 10 * time.Second
	if node.GetState() == managerv1.NodeState_NODE_STATE_ONLINE {
		helloWait = min(helloWait, max(cn.downSince.Add(cn.grace()).Sub(cfg.Clock.Now()), 250*time.Millisecond))
	}
	helloTimer := cfg.Clock.NewTimer(helloWait)
	var wh *managerv1.WorkerHello
	select {
	case r := <-l.in:
		if r.err != nil {
			helloTimer.Stop()
			cn.dialed(false)
			return nil, fmt.Errorf("open stream to %s: %w", node.GetAddress(), r.err)
		}
		wh = r.msg.GetHello()
		if wh == nil {
			helloTimer.Stop()
			cn.dialed(false)
			return nil, fmt.Errorf("worker's first message is not a hello: %T", r.msg.GetMsg())
		}
	case <-helloTimer.C():
		cn.dialed(false)
		return nil, fmt.Errorf("worker sent no hello within %s", helloWait)
	case <-ctx.Done():
		helloTimer.Stop()
		return nil, ctx.Err()
	}
	helloTimer.Stop()
	if wh.GetNodeId() != "" && wh.GetNodeId() != cn.nodeID {
		cn.dialed(false)
		return nil, fmt.Errorf("worker at %s says it is node %q, not %q", node.GetAddress(), wh.GetNodeId(), cn.nodeID)
	}
	if _, err := cn.c.apply(ctx, &storev1.Command{Cmd: &storev1.Command_NodeOnline{NodeOnline: &storev1.NodeOnline{NodeId: cn.nodeID, Hello: wh}}}); err != nil {
		cn.dialed(false)
		return nil, fmt.Errorf("record node online: %w", err)
	}
	l.hello = wh
	cn.c.setLive(cn.nodeID, func(l *Live) { l.Incarnation, l.Address = wh.GetWorkerIncarnation(), node.GetAddress() })
	cn.dialed(true)
	cn.streamed = true
	cn.log.Info("worker connected", "address", node.GetAddress(), "incarnation", wh.GetWorkerIncarnation(), "instances", len(wh.GetInventory()))
	if err := confirmStopped(stream, wh.GetInventory()); err != nil {
		cn.undialed() // the session never starts, so its end does not undo dialed
		return nil, fmt.Errorf("confirm the inventory's stopped instances: %w", err)
	}
	return l, nil
}

// startReader starts the stream's one reader (on wg; it ends when the
// stream does or sctx ends). One ordered channel carries the worker's
// messages and then the stream's end, so that everything received is
// handled before the end. heardAt is when the worker was last heard from:
// stamped when a message arrives and again when the reader goes back to
// waiting, so that only time spent waiting on the worker counts as its
// silence — a session slowed by the store (a slow commit, a loaded machine)
// does not make a live worker look silent.
func (cn *conn) startReader(sctx context.Context, wg *sync.WaitGroup, stream *controlStream) (in chan received, heardAt func() time.Time) {
	clk := cn.c.cfg.Clock
	in = make(chan received, 256)
	since := clk.Now()
	var heard atomic.Int64
	heardAt = func() time.Time { return since.Add(time.Duration(heard.Load())) }
	hear := func() { heard.Store(int64(clk.Now().Sub(since))) }
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			m, err := stream.Receive()
			hear()
			select {
			case in <- received{msg: m, err: err}:
			case <-sctx.Done():
				return
			}
			if err != nil {
				return
			}
			hear()
		}
	}()
	return in, heardAt
}

// confirmStopped tells the worker which STOPPED reports among reports are
// now committed (ReportsRecorded): only then does it forget their
// tombstones. Call it after the reports are recorded.
func confirmStopped(stream *controlStream, reports []*managerv1.InstanceReport) error {
	var done []*managerv1.RecordedReport
	for _, r := range reports {
		if r.GetPhase() == managerv1.InstancePhase_INSTANCE_PHASE_STOPPED {
			done = append(done, &managerv1.RecordedReport{JobId: r.GetJobId(), Role: r.GetRole(), FencingToken: r.GetFencingToken()})
		}
	}
	if len(done) == 0 {
		return nil
	}
	return stream.Send(&managerv1.ControllerMessage{Msg: &managerv1.ControllerMessage_Recorded{Recorded: &managerv1.ReportsRecorded{Reports: done}}})
}
