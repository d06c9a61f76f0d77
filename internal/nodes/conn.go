package nodes

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/hashicorp/go-memdb"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
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

// session opens the stream and runs it until it fails or ends: the
// handshake (handshake.go), then rounds of reconcile (reconcile.go) and pump
// (pump.go) until one of them ends it. It returns errNoAddress when no
// worker has registered an address, errSessionEnded when it ended on
// purpose (the node's record changed, or the node was terminated), and
// otherwise what ended the stream. Every goroutine it starts has ended when
// it returns.
func (cn *conn) session(ctx context.Context, rec *storev1.NodeRecord) (err error) {
	cfg := &cn.c.cfg
	if rec.GetNode().GetAddress() == "" {
		return errNoAddress
	}
	sctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()

	l, err := cn.handshake(ctx, sctx, &wg, rec)
	if err != nil {
		return err
	}
	defer func() { _ = l.stream.CloseRequest() }()
	s := newSessionState(l)
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
		cn.undialed()
		cn.log.Info("worker disconnected", "err", err)
	}()

	for {
		ws, err := cn.reconcile(ctx, l, s)
		if err != nil {
			return err
		}
		silent, err := cn.pump(ctx, sctx, l, s, ws)
		if err != nil {
			silentSince = silent
			return err
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
	// terminateBy is when a terminating node is finished even if its
	// worker has not stopped everything (reconcile.go); zero until the
	// node is seen terminating.
	terminateBy time.Time
}

// newSessionState is the state of a session whose handshake l is: the
// worker holds what its hello's inventory says, and was told the control
// planes the hello carried.
func newSessionState(l *link) *sessionState {
	s := &sessionState{
		wv:      map[string]held{},
		pending: map[string]pend{},
		seqKind: map[uint64]actionKind{},
		// The hello told the list.
		controlPlanes: l.controlPlanes,
	}
	for _, r := range l.hello.GetInventory() {
		s.wv[state.InstanceID(r.GetJobId(), r.GetRole())] = held{token: r.GetFencingToken(), phase: r.GetPhase(), jobHash: r.GetJobHash()}
	}
	return s
}

// maxNotices bounds the notices one batch records.
const maxNotices = 256

// takeNotices returns the notices not yet recorded and forgets them.
func (s *sessionState) takeNotices() []*managerv1.WorkerNotice {
	n := s.notices
	s.notices = nil
	return n
}

// undialed undoes dialed(true): the node is no longer connected (Live,
// metrics).
func (cn *conn) undialed() {
	cn.c.setLive(cn.nodeID, func(l *Live) { l.Connected, l.Incarnation, l.Address = false, "", "" })
	if m := cn.c.cfg.Metrics; m != nil {
		m.Connected.Dec()
	}
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
