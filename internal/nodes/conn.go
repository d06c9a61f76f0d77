package nodes

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"connectrpc.com/connect"
	"github.com/hashicorp/go-memdb"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1/managerv1connect"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/internal/apierr"
	"github.com/norsk-go/norsk-manager/internal/store/state"
)

// conn is the Manager's connection to one worker. Its goroutine (run) is
// the only one that sends on the stream.
type conn struct {
	c      *Controller
	nodeID string
	log    *slog.Logger
	// downSince is when the stream was last lost (or when the controller
	// started watching the node).
	downSince time.Time
	// tlsClient dials the worker over mutual TLS (tls.go); made on first
	// use, closed when run returns.
	tlsClient *http.Client
}

func newConn(c *Controller, nodeID string) *conn {
	return &conn{c: c, nodeID: nodeID, log: c.log.With("node", nodeID), downSince: c.cfg.Clock.Now()}
}

// pend is a command sent and not yet reflected in a report.
type pend struct {
	kind   actionKind
	token  uint64
	sentAt time.Time
}

// errSessionEnded is a session ended on purpose (terminated, address change).
var errSessionEnded = errors.New("session ended")

func (cn *conn) run(ctx context.Context) {
	defer cn.closeTLS()
	clk := cn.c.cfg.Clock
	backoff := 250 * time.Millisecond
	for ctx.Err() == nil {
		rec := cn.c.cfg.Store.State().Snapshot().Node(nil, cn.nodeID)
		if rec == nil {
			return
		}
		started := clk.Now()
		err := cn.session(ctx, rec)
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, errSessionEnded) {
			backoff = 0
		} else if err != nil {
			cn.log.Debug("worker stream ended", "err", err)
		}
		if clk.Now().Sub(started) > time.Minute {
			backoff = 250 * time.Millisecond
		}
		// Disconnected: a terminating node is finished without its worker;
		// an online one becomes lost once the grace runs out.
		rec = cn.c.cfg.Store.State().Snapshot().Node(nil, cn.nodeID)
		if rec == nil {
			return
		}
		if rec.GetNode().GetState() == managerv1.NodeState_NODE_STATE_STOPPING {
			cn.finish(ctx, "its worker is not connected")
			continue
		}
		if err := cn.wait(ctx, backoff); err != nil {
			return
		}
		backoff = min(max(backoff*2, 250*time.Millisecond), 10*time.Second)
	}
}

// wait sleeps for d, declaring the node lost if the grace runs out first, and
// returns early when the node's record changes (a new address).
func (cn *conn) wait(ctx context.Context, d time.Duration) error {
	clk := cn.c.cfg.Clock
	r := cn.c.cfg.Store.State().Snapshot()
	ws := memdb.NewWatchSet()
	ws.Add(r.AbandonCh())
	rec := r.Node(ws, cn.nodeID)
	if rec == nil {
		return nil
	}
	lostAt := cn.downSince.Add(cn.c.cfg.LostGrace)
	online := rec.GetNode().GetState() == managerv1.NodeState_NODE_STATE_ONLINE
	if online && !clk.Now().Before(lostAt) {
		cn.declareLost(ctx)
		return nil
	}
	if online {
		if until := lostAt.Sub(clk.Now()); until < d {
			d = until
		}
	}
	t := clk.NewTimer(d)
	defer t.Stop()
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	changed := ws.WatchCh(wctx)
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C():
	case <-changed:
	}
	if online && !clk.Now().Before(lostAt) {
		cn.declareLost(ctx)
	}
	return nil
}

func (cn *conn) declareLost(ctx context.Context) {
	reason := fmt.Sprintf("no stream from its worker for %s", cn.c.cfg.LostGrace)
	if _, err := cn.c.apply(ctx, &storev1.Command{Cmd: &storev1.Command_NodeLost{NodeLost: &storev1.NodeLost{NodeId: cn.nodeID, Reason: reason}}}); err != nil {
		cn.log.Warn("cannot record node lost", "err", err)
		return
	}
	if m := cn.c.cfg.Metrics; m != nil {
		m.NodesLost.Inc()
	}
	cn.log.Warn("node lost", "reason", reason)
}

// finish records a terminating node as terminated (or removes a
// deregistered slot).
func (cn *conn) finish(ctx context.Context, reason string) {
	if _, err := cn.c.apply(ctx, &storev1.Command{Cmd: &storev1.Command_NodeTerminated{NodeTerminated: &storev1.NodeTerminated{NodeId: cn.nodeID, Reason: reason}}}); err != nil && !apierr.Is(err, apierr.NotFound) {
		cn.log.Warn("cannot finish node termination", "err", err)
		_ = cn.wait(ctx, time.Second)
		return
	}
	cn.log.Info("node terminated", "reason", reason)
}

// session opens the stream and runs it until it fails or ends.
func (cn *conn) session(ctx context.Context, rec *storev1.NodeRecord) (err error) {
	cfg := &cn.c.cfg
	node := rec.GetNode()
	if node.GetAddress() == "" {
		return errors.New("no worker address")
	}
	sctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()

	hc, base, err := cn.dialTarget(node)
	if err != nil {
		cn.dialed(false)
		return err
	}
	client := managerv1connect.NewNodeControllerClient(hc, base, connect.WithGRPC())
	stream := client.Control(sctx)
	stream.RequestHeader().Set("Authorization", "Bearer "+rec.GetNodeSecret())
	defer func() { _ = stream.CloseRequest() }()
	hello := &managerv1.ControllerMessage{Msg: &managerv1.ControllerMessage_Hello{Hello: &managerv1.ControllerHello{
		NodeId:              cn.nodeID,
		ManagerNodeName:     cfg.ManagerName,
		HeartbeatIntervalMs: uint32(cfg.HeartbeatInterval / time.Millisecond),
		ManagerUrls:         cfg.ManagerURLs(),
		ManagerTerm:         cfg.ManagerTerm,
		ManagerGeneration:   cfg.ManagerGeneration,
	}}}
	if err := stream.Send(hello); err != nil {
		cn.dialed(false)
		return fmt.Errorf("send hello: %w", err)
	}
	msgs := make(chan *managerv1.WorkerMessage, 256)
	recvErr := make(chan error, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			m, err := stream.Receive()
			if err != nil {
				recvErr <- err
				return
			}
			select {
			case msgs <- m:
			case <-sctx.Done():
				return
			}
		}
	}()

	// The worker answers with its hello and inventory.
	helloTimer := cfg.Clock.NewTimer(10 * time.Second)
	var wh *managerv1.WorkerHello
	select {
	case m := <-msgs:
		wh = m.GetHello()
		if wh == nil {
			helloTimer.Stop()
			cn.dialed(false)
			return fmt.Errorf("worker's first message is not a hello: %T", m.GetMsg())
		}
	case err := <-recvErr:
		helloTimer.Stop()
		cn.dialed(false)
		return fmt.Errorf("open stream to %s: %w", node.GetAddress(), err)
	case <-helloTimer.C():
		cn.dialed(false)
		return errors.New("worker sent no hello within 10s")
	case <-ctx.Done():
		helloTimer.Stop()
		return ctx.Err()
	}
	helloTimer.Stop()
	if wh.GetNodeId() != "" && wh.GetNodeId() != cn.nodeID {
		cn.dialed(false)
		return fmt.Errorf("worker at %s says it is node %q, not %q", node.GetAddress(), wh.GetNodeId(), cn.nodeID)
	}
	if _, err := cn.c.apply(ctx, &storev1.Command{Cmd: &storev1.Command_NodeOnline{NodeOnline: &storev1.NodeOnline{NodeId: cn.nodeID, Hello: wh}}}); err != nil {
		cn.dialed(false)
		return fmt.Errorf("record node online: %w", err)
	}
	cn.dialed(true)
	cn.log.Info("worker connected", "address", node.GetAddress(), "instances", len(wh.GetInventory()))
	defer func() {
		cn.downSince = cfg.Clock.Now()
		cn.c.setLive(cn.nodeID, func(l *Live) { l.Connected = false })
		if m := cfg.Metrics; m != nil {
			m.Connected.Dec()
		}
		cn.log.Info("worker disconnected", "err", err)
	}()

	s := &sessionState{
		wv:      map[string]held{},
		pending: map[string]pend{},
		seqKind: map[uint64]actionKind{},
	}
	for _, r := range wh.GetInventory() {
		s.wv[state.InstanceID(r.GetJobId(), r.GetRole())] = held{token: r.GetFencingToken(), phase: r.GetPhase(), jobHash: r.GetJobHash()}
	}
	lastHeard := cfg.Clock.Now()
	var terminateBy time.Time
	for {
		// Reconcile what the worker holds with what the store says.
		r := cn.c.cfg.Store.State().Snapshot()
		ws := memdb.NewWatchSet()
		ws.Add(r.AbandonCh())
		cur := r.Node(ws, cn.nodeID)
		if cur == nil || cur.GetNode().GetAddress() != node.GetAddress() || cur.GetNodeSecret() != rec.GetNodeSecret() || cur.GetNode().GetTls() != node.GetTls() {
			return errSessionEnded
		}
		// The node's discovery access, first thing after the hello and
		// whenever it changes (discovery.go).
		if err := cn.syncDiscovery(stream, s, r, ws); err != nil {
			return err
		}
		// The access replica likewise (access_replica.go).
		if err := cn.syncAccessReplica(stream, s, r, ws); err != nil {
			return err
		}
		insts := r.InstancesOnNode(ws, cn.nodeID)
		jobOf := func(id string) *managerv1.Job {
			if j := r.Job(ws, id); j != nil {
				return j.GetJob()
			}
			return nil
		}
		for _, a := range Plan(insts, jobOf, s.wv) {
			if p, ok := s.pending[a.key]; ok && p.kind == a.kind && p.token == a.token && cfg.Clock.Now().Sub(p.sentAt) < cfg.ResendAfter {
				continue
			}
			s.seq++
			a.msg.Seq = s.seq
			if err := stream.Send(a.msg); err != nil {
				return fmt.Errorf("send %s: %w", a.kind, err)
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
			if terminateBy.IsZero() {
				terminateBy = cfg.Clock.Now().Add(cfg.TerminateTimeout)
			}
			if allStopped(insts) || !cfg.Clock.Now().Before(terminateBy) {
				dereg := cur.GetDeregistering()
				reason := "terminated"
				if dereg {
					reason = "deregistered"
				}
				// Tell the worker first and give it a moment to answer: once
				// the node is recorded terminated this connection is closed.
				s.seq++
				seq := s.seq
				if err := stream.Send(&managerv1.ControllerMessage{Seq: seq, Msg: &managerv1.ControllerMessage_Terminate{Terminate: &managerv1.Terminate{Reason: reason, Deregistered: dereg}}}); err == nil {
					if m := cfg.Metrics; m != nil {
						m.CommandsSent.WithLabelValues("terminate").Inc()
					}
					cn.awaitAck(ctx, s, seq, msgs, recvErr)
				}
				cn.finish(ctx, reason)
				return errSessionEnded
			}
		}

		wctx, wcancel := context.WithCancel(sctx)
		changed := ws.WatchCh(wctx)
		tick := cfg.Clock.NewTimer(cfg.HeartbeatInterval)
		var batch []*managerv1.InstanceReport
		select {
		case <-ctx.Done():
			wcancel()
			tick.Stop()
			return ctx.Err()
		case err := <-recvErr:
			wcancel()
			tick.Stop()
			return err
		case <-changed:
		case <-tick.C():
		case m := <-msgs:
			lastHeard = cfg.Clock.Now()
			batch = s.handle(cn, m, batch)
			// Drain what else has arrived, to batch the reports.
		drain:
			for range 255 {
				select {
				case m := <-msgs:
					batch = s.handle(cn, m, batch)
				default:
					break drain
				}
			}
		}
		wcancel()
		tick.Stop()
		if len(batch) > 0 {
			if m := cfg.Metrics; m != nil {
				m.Reports.Add(float64(len(batch)))
			}
			if _, err := cn.c.apply(ctx, &storev1.Command{Cmd: &storev1.Command_InstanceReports{InstanceReports: &storev1.InstanceReports{NodeId: cn.nodeID, Reports: batch}}}); err != nil {
				return fmt.Errorf("record reports: %w", err)
			}
		}
		if silent := cfg.Clock.Now().Sub(lastHeard); silent > 3*cfg.HeartbeatInterval {
			return fmt.Errorf("no heartbeat from the worker for %s", silent.Round(time.Millisecond))
		}
	}
}

// awaitAck waits (at most 10 s) for the worker to acknowledge command seq,
// recording the reports that arrive meanwhile.
func (cn *conn) awaitAck(ctx context.Context, s *sessionState, seq uint64, msgs <-chan *managerv1.WorkerMessage, recvErr <-chan error) {
	t := cn.c.cfg.Clock.NewTimer(10 * time.Second)
	defer t.Stop()
	for {
		select {
		case m := <-msgs:
			if r := m.GetReport(); r != nil {
				_, _ = cn.c.apply(ctx, &storev1.Command{Cmd: &storev1.Command_InstanceReports{InstanceReports: &storev1.InstanceReports{NodeId: cn.nodeID, Reports: []*managerv1.InstanceReport{r}}}})
			}
			if a := m.GetAck(); a != nil && a.GetSeq() == seq {
				return
			}
		case <-recvErr:
			return
		case <-t.C():
			cn.log.Warn("worker did not acknowledge the terminate in 10s")
			return
		case <-ctx.Done():
			return
		}
	}
}

// sessionState is what one stream knows.
type sessionState struct {
	wv      map[string]held
	pending map[string]pend
	seq     uint64
	seqKind map[uint64]actionKind
	disco   discoveryState
	access  *storev1.AccessReplicaState // the replica last sent
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
		cn.c.setLive(cn.nodeID, func(l *Live) {
			l.Load = x.Heartbeat.GetLoad()
			l.LastSeen = cn.c.cfg.Clock.Now()
		})
	case *managerv1.WorkerMessage_Ack:
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

func (cn *conn) dialed(ok bool) {
	m := cn.c.cfg.Metrics
	if !ok {
		if m != nil {
			m.Dials.WithLabelValues("error").Inc()
		}
		return
	}
	if m != nil {
		m.Dials.WithLabelValues("ok").Inc()
		m.Connected.Inc()
	}
	now := cn.c.cfg.Clock.Now()
	cn.c.setLive(cn.nodeID, func(l *Live) { l.Connected = true; l.LastSeen = now })
}

func allStopped(insts []*managerv1.Instance) bool {
	for _, in := range insts {
		if in.GetPhase() != managerv1.InstancePhase_INSTANCE_PHASE_STOPPED {
			return false
		}
	}
	return true
}
