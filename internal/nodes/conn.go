package nodes

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"github.com/hashicorp/go-memdb"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1/managerv1connect"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/internal/store/state"
	"github.com/norsk-go/norsk-manager/pkg/apierr"
)

// conn is the Manager's connection to one worker. Its goroutine (run) is
// the only one that sends on the stream.
type conn struct {
	c      *Controller
	nodeID string
	log    *slog.Logger
	// downSince is when the node was last known up: when its stream ended
	// (a reset or close reaches the Manager at once), or when its worker
	// was last heard from (a stream that fell silent), or when the
	// controller started watching the node. The node is lost at downSince
	// plus its grace (decision 0048).
	downSince time.Time
	// tlsClient dials the worker over mutual TLS (tls.go); made on first
	// use, closed when run returns.
	tlsClient *http.Client
	// out carries commands API handlers ask this connection to send
	// (SendMigration); the session sends them in order.
	out chan outbound
	// streamed: a session with the worker was opened under this
	// controller (until then the takeover grace applies).
	streamed bool
}

// grace is how long the node's stream may be gone before it is lost.
func (cn *conn) grace() time.Duration {
	if !cn.streamed {
		return cn.c.cfg.TakeoverGrace
	}
	return cn.c.cfg.LostGrace
}

// silenceLimit is how long an open stream may carry nothing from its worker
// before the session ends and the node, down since it was last heard from,
// is lost: the lost grace, but never less than three heartbeats, so that a
// grace set shorter than the heartbeat cannot lose a live worker between
// two of them.
func (cn *conn) silenceLimit() time.Duration {
	return max(cn.c.cfg.LostGrace, 3*cn.c.cfg.HeartbeatInterval)
}

func newConn(c *Controller, nodeID string) *conn {
	return &conn{c: c, nodeID: nodeID, log: c.log.With("node", nodeID), downSince: c.cfg.Clock.Now(), out: make(chan outbound, 64)}
}

// pend is a command sent and not yet reflected in a report.
type pend struct {
	kind   actionKind
	token  uint64
	sentAt time.Time
}

// errSessionEnded is a session ended on purpose (terminated, address change).
var errSessionEnded = errors.New("session ended")

// errNoAddress is a session not opened: no worker has registered an address
// for the node.
var errNoAddress = errors.New("no worker address")

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
		} else if err != nil && !errors.Is(err, errNoAddress) {
			cn.log.Debug("worker stream ended", "err", err)
		}
		if clk.Now().Sub(started) > time.Minute {
			backoff = 250 * time.Millisecond
		}
		// Disconnected (or never connected): a terminating node is finished
		// without its worker, as there is nothing it could be told to stop;
		// an online one becomes lost once the grace runs out.
		rec = cn.c.cfg.Store.State().Snapshot().Node(nil, cn.nodeID)
		if rec == nil {
			return
		}
		if rec.GetNode().GetState() == managerv1.NodeState_NODE_STATE_STOPPING {
			reason := "its worker is not connected"
			if rec.GetNode().GetAddress() == "" {
				reason = "no worker has registered for it"
			}
			cn.finish(ctx, reason)
			continue
		}
		if err := cn.wait(ctx, backoff); err != nil {
			return
		}
		backoff = min(max(backoff*2, 250*time.Millisecond), 10*time.Second)
	}
}

// wait sleeps for d, declaring the node lost if the grace runs out first, and
// returns early when the node's record changes (a new address). If the node
// is due to be lost but recording that fails, it still sleeps d (the
// caller's backoff) before returning, so that a failing store is not retried
// in a hot loop.
func (cn *conn) wait(ctx context.Context, d time.Duration) error {
	clk := cn.c.cfg.Clock
	r := cn.c.cfg.Store.State().Snapshot()
	ws := memdb.NewWatchSet()
	ws.Add(r.AbandonCh())
	rec := r.Node(ws, cn.nodeID)
	if rec == nil {
		return nil
	}
	lostAt := cn.downSince.Add(cn.grace())
	online := rec.GetNode().GetState() == managerv1.NodeState_NODE_STATE_ONLINE
	if online && !clk.Now().Before(lostAt) {
		if cn.declareLost(ctx) == nil {
			return nil
		}
		online = false // not retried until the next call, after d
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
		_ = cn.declareLost(ctx) // logged; retried on the next call
	}
	return nil
}

// declareLost records the node lost (its stream gone for longer than the
// grace). A failure is logged and returned; the caller retries later.
func (cn *conn) declareLost(ctx context.Context) error {
	reason := fmt.Sprintf("no stream from its worker for %s", cn.grace())
	if _, err := cn.c.apply(ctx, &storev1.Command{Cmd: &storev1.Command_NodeLost{NodeLost: &storev1.NodeLost{NodeId: cn.nodeID, Reason: reason}}}); err != nil {
		err = fmt.Errorf("record node %s lost: %w", cn.nodeID, err)
		cn.log.Warn("cannot record node lost", "err", err)
		return err
	}
	if m := cn.c.cfg.Metrics; m != nil {
		m.NodesLost.Inc()
	}
	cn.log.Warn("node lost", "reason", reason)
	return nil
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
		return errNoAddress
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
		return fmt.Errorf("send hello: %w", err)
	}
	// One ordered channel carries the worker's messages and then the
	// stream's end, so that everything received is handled before the end.
	in := make(chan received, 256)
	// heard is when the worker was last heard from (after since): stamped
	// when a message arrives and again when the reader goes back to
	// waiting, so that only time spent waiting on the worker counts as its
	// silence — a session slowed by the store (a slow commit, a loaded
	// machine) does not make a live worker look silent.
	since := cfg.Clock.Now()
	var heard atomic.Int64
	heardAt := func() time.Time { return since.Add(time.Duration(heard.Load())) }
	hear := func() { heard.Store(int64(cfg.Clock.Now().Sub(since))) }
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
	case r := <-in:
		if r.err != nil {
			helloTimer.Stop()
			cn.dialed(false)
			return fmt.Errorf("open stream to %s: %w", node.GetAddress(), r.err)
		}
		wh = r.msg.GetHello()
		if wh == nil {
			helloTimer.Stop()
			cn.dialed(false)
			return fmt.Errorf("worker's first message is not a hello: %T", r.msg.GetMsg())
		}
	case <-helloTimer.C():
		cn.dialed(false)
		return fmt.Errorf("worker sent no hello within %s", helloWait)
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
	cn.c.setLive(cn.nodeID, func(l *Live) { l.Incarnation, l.Address = wh.GetWorkerIncarnation(), node.GetAddress() })
	cn.dialed(true)
	cn.streamed = true
	cn.log.Info("worker connected", "address", node.GetAddress(), "incarnation", wh.GetWorkerIncarnation(), "instances", len(wh.GetInventory()))
	if err := confirmStopped(stream, wh.GetInventory()); err != nil {
		return fmt.Errorf("confirm the inventory's stopped instances: %w", err)
	}
	s := &sessionState{
		wv:      map[string]held{},
		pending: map[string]pend{},
		seqKind: map[uint64]actionKind{},
		// The hello told the list.
		controlPlanes: controlPlanes,
	}
	// silentSince is set when the session ends because the worker fell
	// silent: the node has been down since it was last heard from. Lost at
	// silentSince + LostGrace: at once, unless the silence limit is three
	// heartbeats longer than the grace.
	var silentSince time.Time
	defer func() {
		s.failWaiters(cn.nodeID, err)
		cn.failQueued()
		cn.downSince = cfg.Clock.Now()
		if !silentSince.IsZero() {
			cn.downSince = silentSince
		}
		cn.c.setLive(cn.nodeID, func(l *Live) { l.Connected, l.Incarnation, l.Address = false, "", "" })
		if m := cfg.Metrics; m != nil {
			m.Connected.Dec()
		}
		cn.log.Info("worker disconnected", "err", err)
	}()

	for _, r := range wh.GetInventory() {
		s.wv[state.InstanceID(r.GetJobId(), r.GetRole())] = held{token: r.GetFencingToken(), phase: r.GetPhase(), jobHash: r.GetJobHash()}
	}
	var terminateBy time.Time
	for {
		// Reconcile what the worker holds with what the store says.
		r := cn.c.cfg.Store.State().Snapshot()
		ws := memdb.NewWatchSet()
		ws.Add(r.AbandonCh())
		cur := r.Node(ws, cn.nodeID)
		if cur == nil || cur.GetNode().GetAddress() != node.GetAddress() || cur.GetNodeSecret() != rec.GetNodeSecret() || cur.GetNode().GetTls() != node.GetTls() {
			// Reports already received are still the truth of what ran.
			batch, _, _ := s.drain(cn, in, nil, cap(in))
			if err := cn.recordReports(ctx, batch, s.takeNotices()); err != nil {
				cn.log.Warn("cannot record the reports received before the session ended", "err", err)
			}
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
		// And the cluster's norsk-mgr URLs (control_planes.go).
		if err := cn.syncControlPlanes(stream, s, ws); err != nil {
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
					cn.awaitAck(ctx, seq, in)
				}
				cn.finish(ctx, reason)
				return errSessionEnded
			}
		}

		wctx, wcancel := context.WithCancel(sctx)
		changed := ws.WatchCh(wctx)
		// Wake at the next heartbeat, or when the worker's silence would
		// reach the lost grace, whichever is sooner.
		wake := cfg.HeartbeatInterval
		if until := heardAt().Add(cn.silenceLimit()).Sub(cfg.Clock.Now()); until < wake {
			wake = max(until, time.Millisecond)
		}
		tick := cfg.Clock.NewTimer(wake)
		var batch []*managerv1.InstanceReport
		var ended error // the stream's end, once reached
		select {
		case <-ctx.Done():
			wcancel()
			tick.Stop()
			return ctx.Err()
		case <-changed:
		case <-tick.C():
		case o := <-cn.out:
			if err := s.sendOutbound(cn, stream.Send, o); err != nil {
				wcancel()
				tick.Stop()
				return err
			}
		case r := <-in:
			// Take it and what else has arrived, to batch the reports.
			var took bool
			if batch, took, ended = s.take(cn, r, batch); took {
				batch, _, ended = s.drain(cn, in, batch, cap(in)-1)
			}
		}
		wcancel()
		tick.Stop()
		// The reports are recorded before the stream's end is handled: a
		// worker forgets a stopped instance once it has reported it.
		if err := cn.recordReports(ctx, batch, s.takeNotices()); err != nil {
			return err
		}
		migs := s.migrations
		s.migrations = nil
		if err := cn.recordMigrationReports(ctx, migs); err != nil {
			return err
		}
		if err := cn.recordImages(ctx, s); err != nil {
			return err
		}
		if ended != nil {
			return ended
		}
		if err := confirmStopped(stream, batch); err != nil {
			return fmt.Errorf("confirm recorded reports: %w", err)
		}
		if err := cn.grantLease(stream, s); err != nil {
			return fmt.Errorf("send lease grant: %w", err)
		}
		// A worker silent for the lost grace is down since it was last
		// heard from: the session ends and the node is lost at once (a host
		// that vanished sends no reset; decision 0048).
		last := heardAt()
		if silent := cfg.Clock.Now().Sub(last); silent >= cn.silenceLimit() {
			silentSince = last
			return fmt.Errorf("nothing from the worker for %s", silent.Round(time.Millisecond))
		}
	}
}

// confirmStopped tells the worker which STOPPED reports among reports are
// now committed (ReportsRecorded): only then does it forget their
// tombstones. Call it after the reports are recorded.
func confirmStopped(stream *connect.BidiStreamForClient[managerv1.ControllerMessage, managerv1.WorkerMessage], reports []*managerv1.InstanceReport) error {
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

// grantLease answers the newest heartbeat taken since the last grant (if
// it carried its send time) with a LeaseGrant: the worker's leases run
// from that send time for LeaseTTL, or without end while leases are
// paused. Only the session's goroutine calls it: it sends on the stream.
// It is sent after the batch's reports are recorded, so a primary that
// cannot commit (and is about to lose its role) grants nothing.
func (cn *conn) grantLease(stream *connect.BidiStreamForClient[managerv1.ControllerMessage, managerv1.WorkerMessage], s *sessionState) error {
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

// holdForLease reports whether a is the start of a lease-protected
// instance, held until the worker's first heartbeat on the stream.
func holdForLease(a action, jobOf func(id string) *managerv1.Job) bool {
	if a.kind != actStart && a.kind != actStartPrepared {
		return false
	}
	jobID, _ := splitKey(a.key)
	return jobOf(jobID).GetLeaseProtected()
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

// awaitAck waits (at most 10 s) for the worker to acknowledge command seq,
// recording the reports that arrive meanwhile (until the stream ends).
func (cn *conn) awaitAck(ctx context.Context, seq uint64, in <-chan received) {
	t := cn.c.cfg.Clock.NewTimer(10 * time.Second)
	defer t.Stop()
	for {
		select {
		case r := <-in:
			if r.err != nil {
				return
			}
			if rep := r.msg.GetReport(); rep != nil {
				if err := cn.recordReports(ctx, []*managerv1.InstanceReport{rep}, nil); err != nil {
					cn.log.Warn("cannot record a report received while terminating", "err", err)
				}
			}
			if a := r.msg.GetAck(); a != nil && a.GetSeq() == seq {
				return
			}
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
	// controlPlanes is the list of norsk-mgr URLs last told the worker.
	controlPlanes []string
	// grantDue is the send time (Heartbeat.sent_mono_ms) of the newest
	// heartbeat not yet answered with a LeaseGrant; 0: none.
	grantDue uint64
	// heartbeatSeen: the worker has sent a heartbeat on this stream.
	heartbeatSeen bool
	// waiters are the migration commands sent and not yet acknowledged, by
	// seq; migrations are the handshake reports received and not yet
	// recorded.
	waiters    map[uint64]chan error
	migrations []*managerv1.MigrationReport
	// notices are the worker's notices received and not yet recorded
	// (at most maxNotices; the rest are logged only).
	notices []*managerv1.WorkerNotice
	// images is the newest image inventory received and not yet
	// recorded; prefetched the prefetch outcomes (images.go).
	images     *managerv1.HeldImages
	prefetched []*managerv1.ImagesPrefetched
}

// maxNotices bounds the notices one batch records.
const maxNotices = 256

// takeNotices returns the notices not yet recorded and forgets them.
func (s *sessionState) takeNotices() []*managerv1.WorkerNotice {
	n := s.notices
	s.notices = nil
	return n
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
