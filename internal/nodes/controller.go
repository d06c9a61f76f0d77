package nodes

import (
	"context"
	"crypto/tls"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/hashicorp/go-memdb"
	"google.golang.org/protobuf/types/known/timestamppb"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/internal/clock"
	"github.com/norsk-go/norsk-manager/internal/store/state"
)

// Store is what the controller needs of the replicated store.
type Store interface {
	State() *state.State
	Apply(ctx context.Context, cmd *storev1.Command) (state.Result, error)
}

// Config configures a Controller.
type Config struct {
	Store  Store
	Clock  clock.Clock
	Logger *slog.Logger
	// LostGrace is how long a worker may go unheard before its node is
	// lost (default 1.5 s): counted from its stream's end when the stream
	// is reset or closed, from the last message received when the stream
	// falls silent (decision 0048).
	LostGrace time.Duration
	// TakeoverGrace is the grace of a node this controller has not yet
	// had a stream with (a new primary's first round of dials, default
	// 30 s, never less than LostGrace): a failover must not declare the
	// fleet lost while it reconnects.
	TakeoverGrace time.Duration
	// HeartbeatInterval is what workers are told (default 500 ms); a
	// stream that carries nothing for max(LostGrace, three intervals) is
	// dropped and its node lost.
	HeartbeatInterval time.Duration
	// ResendAfter is how long an unacknowledged command waits before it is
	// sent again (default 30 s).
	ResendAfter time.Duration
	// LeaseTTL is the lease a heartbeat's LeaseGrant gives the worker's
	// lease-protected instances, counted from the heartbeat's send time on
	// the worker's clock (default 15 s).
	LeaseTTL time.Duration
	// TerminateTimeout bounds how long a terminating node's worker gets to
	// confirm its stops before the termination is finished without it
	// (default 2 min).
	TerminateTimeout time.Duration
	// HTTPClient dials workers; the default speaks cleartext HTTP/2.
	HTTPClient *http.Client
	// WorkerTLS, when set, is the mutual-TLS client configuration for the
	// stream of a node whose worker serves TLS (Node.tls): the Manager's
	// client certificate, and the check that the worker is that node. Nil:
	// such nodes cannot be dialled (see tls.go).
	WorkerTLS func(nodeID string) *tls.Config
	// ManagerName and ManagerURLs are told to workers in the hello.
	ManagerName string
	ManagerURLs func() []string
	// ManagerTerm and ManagerGeneration are this primary's raft term and
	// cluster generation, told in the hello: a worker refuses a stream from
	// an older primary than the one it follows.
	ManagerTerm       uint64
	ManagerGeneration uint64
	// OnAllConnected, if set, is called once (on its own goroutine) when
	// every node the controller wants a stream with has one: a new primary's
	// takeover has settled.
	OnAllConnected func()
	// ClusterID is the store's cluster id, told to workers in the hello
	// (they label what they create with it). Empty: read from the store at
	// each session.
	ClusterID string
	// Metrics, if set, observes connection events.
	Metrics *Metrics
	// AccessReplicaJWKS is the JWKS (JSON) of the access replica's trusted
	// keys, sent to workers with the stored replica; "" sends no replica
	// (access_replica.go).
	AccessReplicaJWKS string
	// ControlPlanes is the cluster's list of norsk-mgr URLs, told to every
	// worker in its hello and again whenever it changes
	// (control_planes.go). Nil: an empty list.
	ControlPlanes *ControlPlaneList
}

func (c *Config) defaults() {
	if c.Clock == nil {
		c.Clock = clock.Real{}
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.LostGrace <= 0 {
		c.LostGrace = 1500 * time.Millisecond
	}
	if c.TakeoverGrace <= 0 {
		c.TakeoverGrace = 30 * time.Second
	}
	c.TakeoverGrace = max(c.TakeoverGrace, c.LostGrace)
	if c.HeartbeatInterval <= 0 {
		c.HeartbeatInterval = 500 * time.Millisecond
	}
	if c.ResendAfter <= 0 {
		c.ResendAfter = 30 * time.Second
	}
	if c.LeaseTTL <= 0 {
		c.LeaseTTL = 15 * time.Second
	}
	if c.TerminateTimeout <= 0 {
		c.TerminateTimeout = 2 * time.Minute
	}
	if c.HTTPClient == nil {
		c.HTTPClient = H2CClient()
	}
	if c.ManagerURLs == nil {
		c.ManagerURLs = func() []string { return nil }
	}
}

// H2CClient is an HTTP client that speaks HTTP/2 without TLS (prior
// knowledge), as the gRPC protocol over a plain connection needs.
func H2CClient() *http.Client {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: &http.Transport{
		Protocols:       &p,
		DialContext:     (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 15 * time.Second}).DialContext,
		TLSClientConfig: &tls.Config{MinVersion: tls.VersionTLS12},
		// A worker's stream is long-lived; idle pings detect a dead peer.
		HTTP2: &http.HTTP2Config{PingTimeout: 10 * time.Second, SendPingTimeout: 15 * time.Second},
	}}
}

// Live is what the controller knows of a node right now.
type Live struct {
	Connected bool
	Load      *managerv1.NodeLoad
	LastSeen  time.Time
	// LeaseRefreshed is when the worker last refreshed its leases (a
	// heartbeat carrying its send time); zero = not under this controller.
	LeaseRefreshed time.Time
	// Incarnation and Address are the worker process the live stream is
	// with (WorkerHello.worker_incarnation, the address dialled); set while
	// Connected.
	Incarnation string
	Address     string
}

// Controller keeps one connection per worker.
type Controller struct {
	cfg Config
	log *slog.Logger

	// started is when the controller began: a lease not refreshed under it
	// runs from here (a new primary restarts every grace).
	started time.Time

	mu    sync.Mutex
	conns map[string]*conn
	live  map[string]Live
	// settled: OnAllConnected has been called.
	settled bool
}

// New returns a controller; Run starts it.
func New(cfg Config) *Controller {
	cfg.defaults()
	return &Controller{
		cfg:     cfg,
		log:     cfg.Logger.With("component", "nodes"),
		conns:   map[string]*conn{},
		live:    map[string]Live{},
		started: cfg.Clock.Now(),
	}
}

// LeaseRefreshes returns, for a node, when its leases were last refreshed
// under this controller, or when the controller started if never.
func (c *Controller) LeaseRefreshes() func(nodeID string) time.Time {
	c.mu.Lock()
	at := make(map[string]time.Time, len(c.live))
	for id, l := range c.live {
		at[id] = l.LeaseRefreshed
	}
	c.mu.Unlock()
	return func(nodeID string) time.Time {
		if t := at[nodeID]; t.After(c.started) {
			return t
		}
		return c.started
	}
}

// Holder returns the worker process that holds the node's live stream,
// if one does: a registration of another incarnation of the node is
// refused while it lives (one worker process per node identity).
func (c *Controller) Holder(nodeID string) (incarnation, address string, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	l, ok := c.live[nodeID]
	if !ok || !l.Connected {
		return "", "", false
	}
	return l.Incarnation, l.Address, true
}

// Live returns what the controller knows of a node now.
func (c *Controller) Live(nodeID string) Live {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.live[nodeID]
}

// setLive updates what the controller knows of a node. Only a node newly
// connected can settle the fleet, so only then is every connection checked
// (a heartbeat's update costs O(1), not O(nodes), however many nodes never
// connect).
func (c *Controller) setLive(nodeID string, f func(*Live)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	l := c.live[nodeID]
	was := l.Connected
	f(&l)
	c.live[nodeID] = l
	if l.Connected && !was {
		c.checkSettledLocked()
	}
}

// checkSettledLocked calls OnAllConnected the first time every wanted node
// has a stream. c.mu is held.
func (c *Controller) checkSettledLocked() {
	if c.settled || c.cfg.OnAllConnected == nil {
		return
	}
	for id := range c.conns {
		if !c.live[id].Connected {
			return
		}
	}
	c.settled = true
	go c.cfg.OnAllConnected()
}

// Run keeps a connection for every node that wantConn selects, until ctx
// ends. It returns once every connection goroutine has stopped.
func (c *Controller) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	cancels := map[string]context.CancelFunc{}
	defer func() {
		for _, cancel := range cancels {
			cancel()
		}
	}()
	for {
		r := c.cfg.Store.State().Snapshot()
		ws := memdb.NewWatchSet()
		ws.Add(r.AbandonCh())
		want := map[string]bool{}
		for _, rec := range r.Nodes(ws) {
			if wantConn(rec) {
				want[rec.GetNode().GetNodeId()] = true
			}
		}
		for id := range want {
			if _, ok := cancels[id]; ok {
				continue
			}
			cctx, cancel := context.WithCancel(ctx)
			cancels[id] = cancel
			cn := newConn(c, id)
			c.mu.Lock()
			c.conns[id] = cn
			c.mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				cn.run(cctx)
			}()
		}
		for id, cancel := range cancels {
			if !want[id] {
				cancel()
				delete(cancels, id)
				c.mu.Lock()
				delete(c.conns, id)
				delete(c.live, id)
				c.mu.Unlock()
			}
		}
		c.mu.Lock()
		c.checkSettledLocked()
		c.mu.Unlock()
		if err := ws.WatchCtx(ctx); err != nil {
			return nil
		}
	}
}

// wantConn reports whether the controller should hold a connection to a
// node: one that is not terminated and either has a worker address (to
// dial) or is stopping. A stopping node whose worker never registered has
// no stream to open; its connection goroutine finishes the termination (or
// deregistration) without one, as it does for any node whose worker is not
// connected.
func wantConn(rec *storev1.NodeRecord) bool {
	n := rec.GetNode()
	if n.GetState() == managerv1.NodeState_NODE_STATE_TERMINATED {
		return false
	}
	return n.GetAddress() != "" || n.GetState() == managerv1.NodeState_NODE_STATE_STOPPING
}

// apply proposes a command stamped with the controller's clock.
func (c *Controller) apply(ctx context.Context, cmd *storev1.Command) (state.Result, error) {
	cmd.Time = timestamppb.New(c.cfg.Clock.Now())
	return c.cfg.Store.Apply(ctx, cmd)
}

// clusterID is the cluster id the hello tells workers.
func (c *Controller) clusterID() string {
	if c.cfg.ClusterID != "" {
		return c.cfg.ClusterID
	}
	return c.cfg.Store.State().Snapshot().ClusterID()
}
