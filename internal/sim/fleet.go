package sim

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1/managerv1connect"
	"github.com/norsk-go/norsk-manager/internal/worker"
)

// Config configures a Fleet.
type Config struct {
	// ManagerURLs are the Manager members' API URLs (http://host:port);
	// registrations go to the first and move on to the next after a
	// failure.
	ManagerURLs []string
	// Listen is where the fleet's one NodeController listener listens
	// (default 127.0.0.1:0). With PerNodeAddress it must be a wildcard
	// address (default 0.0.0.0:0).
	Listen string
	// PerNodeAddress gives every node an address of its own on the
	// loopback network (127.1.x.y at the listener's port; Linux routes all
	// of 127.0.0.0/8 to the loopback interface), so that the Manager holds
	// one TCP connection per node, as it does with real workers. The
	// listener then listens on every interface and closes at once any
	// connection that does not come from a loopback address. Without it
	// every node advertises the listener's own address and the Manager
	// multiplexes the nodes' streams over a few HTTP/2 connections.
	PerNodeAddress bool
	// StartDelay is how long a simulated instance takes to start: its
	// RUNNING report and the start's acknowledgement come that long after
	// the command (0: at once).
	StartDelay time.Duration
	// VCPUs and MemoryBytes are every node's hardware (defaults 16 and
	// 64 GiB).
	VCPUs       uint32
	MemoryBytes uint64
	// MaxReadFrameSize, when set, is the HTTP/2 max frame size the
	// listener advertises (0: a worker server's, worker.MaxReadFrameSize;
	// -1: Go's default, 1 MiB, as workers advertised before). The Manager's
	// HTTP/2 client keeps a request-body buffer per stream of up to
	// min(this, 512 KiB) for the stream's life, so it sets most of the
	// primary's memory per node.
	MaxReadFrameSize int
	// Logger receives the fleet's own log lines (default: discarded).
	Logger *slog.Logger
}

func (c *Config) defaults() {
	if c.Listen == "" {
		c.Listen = "127.0.0.1:0"
		if c.PerNodeAddress {
			c.Listen = "0.0.0.0:0"
		}
	}
	if c.VCPUs == 0 {
		c.VCPUs = 16
	}
	if c.MemoryBytes == 0 {
		c.MemoryBytes = 64 << 30
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// Fleet is a set of simulated nodes behind one NodeController listener.
type Fleet struct {
	cfg  Config
	log  *slog.Logger
	ln   net.Listener
	port int
	srv  *http.Server
	reg  *registrar

	serveDone chan struct{}
	// handlers counts the goroutines the fleet's streams start, so that
	// Close returns once they have ended.
	handlers sync.WaitGroup

	mu       sync.RWMutex
	bySecret map[string]*node
	nodes    []*node

	starts startBook

	heartbeats atomic.Int64
	reports    atomic.Int64
	hellos     atomic.Int64
	running    atomic.Int64
	connected  atomic.Int64
}

// New opens the fleet's listener and starts serving; Close stops it.
func New(cfg Config) (*Fleet, error) {
	cfg.defaults()
	if len(cfg.ManagerURLs) == 0 {
		return nil, errors.New("sim: no Manager URL")
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("sim: listen on %s: %w", cfg.Listen, err)
	}
	if cfg.PerNodeAddress {
		ln = loopbackOnly{ln}
	}
	f := &Fleet{
		cfg:       cfg,
		log:       cfg.Logger.With("component", "sim"),
		ln:        ln,
		port:      ln.Addr().(*net.TCPAddr).Port,
		reg:       newRegistrar(cfg.ManagerURLs),
		serveDone: make(chan struct{}),
		bySecret:  map[string]*node{},
		starts:    startBook{byInstance: map[string]*startRecord{}},
	}
	mux := http.NewServeMux()
	path, h := managerv1connect.NewNodeControllerHandler(controlHandler{f})
	mux.Handle(path, h)
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	f.srv = &http.Server{
		Handler:           mux,
		Protocols:         &p,
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(f.log.Handler(), slog.LevelWarn),
	}
	switch {
	case cfg.MaxReadFrameSize > 0:
		f.srv.HTTP2 = &http.HTTP2Config{MaxReadFrameSize: cfg.MaxReadFrameSize}
	case cfg.MaxReadFrameSize == 0:
		f.srv.HTTP2 = &http.HTTP2Config{MaxReadFrameSize: worker.MaxReadFrameSize}
	}
	go func() {
		defer close(f.serveDone)
		if err := f.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			f.log.Error("NodeController listener failed", "err", err)
		}
	}()
	return f, nil
}

// Addr is the listener's address.
func (f *Fleet) Addr() string { return f.ln.Addr().String() }

// Close stops serving: every stream ends (the Manager sees its nodes go
// away) and Close returns once the fleet's goroutines have.
func (f *Fleet) Close() error {
	err := f.srv.Close()
	<-f.serveDone
	f.mu.RLock()
	for _, n := range f.nodes {
		n.closeAll()
	}
	f.mu.RUnlock()
	f.handlers.Wait()
	f.reg.close()
	if err != nil {
		return fmt.Errorf("sim: close listener: %w", err)
	}
	return nil
}

// nodeAddress is the address node number i (0-based) advertises.
func (f *Fleet) nodeAddress(i int) string {
	if !f.cfg.PerNodeAddress {
		host, _, _ := net.SplitHostPort(f.cfg.Listen)
		if host == "" || host == "0.0.0.0" || host == "::" {
			host = "127.0.0.1"
		}
		return net.JoinHostPort(host, strconv.Itoa(f.port))
	}
	return fmt.Sprintf("127.%d.%d.%d:%d", 1+i>>16, (i>>8)&0xff, i&0xff, f.port)
}

// Register registers a new node with the slot token a RegisterClusterNode
// gave, retrying failures other than a refusal of the token until ctx ends,
// and returns its node id. The node serves its stream from then on.
func (f *Fleet) Register(ctx context.Context, slotToken string) (string, error) {
	f.mu.Lock()
	i := len(f.nodes)
	n := newNode(f, f.nodeAddress(i))
	f.nodes = append(f.nodes, n)
	f.mu.Unlock()
	resp, err := f.reg.registerUntil(ctx, &managerv1.ClusterMemberRegisterRequest{
		Token:             slotToken,
		Address:           n.address,
		Hardware:          f.hardware(),
		Runtime:           "process",
		WorkerVersion:     "norsk-sim",
		WorkerIncarnation: n.incarnation,
	})
	if err != nil {
		return "", err
	}
	n.setIdentity(resp.GetNodeId(), resp.GetNodeSecret())
	f.mu.Lock()
	f.bySecret[resp.GetNodeSecret()] = n
	f.mu.Unlock()
	return resp.GetNodeId(), nil
}

func (f *Fleet) hardware() *managerv1.Hardware {
	return &managerv1.Hardware{
		Vcpus:        f.cfg.VCPUs,
		MemoryBytes:  f.cfg.MemoryBytes,
		Architecture: managerv1.Architecture_ARCHITECTURE_X86_64,
		Hostname:     "norsk-sim",
	}
}

// lookup is the node a stream's bearer token names (nil: none).
func (f *Fleet) lookup(bearer string) *node {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.bySecret[bearer]
}

// Nodes is how many nodes have registered.
func (f *Fleet) Nodes() int {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return len(f.bySecret)
}

// Unconnected describes up to limit registered nodes that have no Control
// stream now: their ids, with the last hello each refused, if any.
func (f *Fleet) Unconnected(limit int) []string {
	f.mu.RLock()
	nodes := slices.Clone(f.nodes)
	f.mu.RUnlock()
	var out []string
	for _, n := range nodes {
		n.mu.Lock()
		id, cur, refused := n.id, n.cur, n.refused
		n.mu.Unlock()
		if id == "" || cur != nil {
			continue
		}
		if len(out) == limit {
			break
		}
		if refused != "" {
			id += " (" + refused + ")"
		}
		out = append(out, id)
	}
	return out
}

// Stats is what the fleet has counted so far.
type Stats struct {
	// Connected is how many nodes have a Control stream up now.
	Connected int64
	// Hellos is how many Control streams were opened (hellos answered).
	Hellos int64
	// Heartbeats and Reports are the heartbeats and instance reports
	// sent on every stream.
	Heartbeats, Reports int64
	// Running is how many instances are RUNNING on the fleet now.
	Running int64
}

// Stats returns the fleet's counters.
func (f *Fleet) Stats() Stats {
	return Stats{
		Connected:  f.connected.Load(),
		Hellos:     f.hellos.Load(),
		Heartbeats: f.heartbeats.Load(),
		Reports:    f.reports.Load(),
		Running:    f.running.Load(),
	}
}

// loopbackOnly accepts only connections from a loopback address: with
// PerNodeAddress the listener listens on every interface, and nothing but
// this machine's Manager may use it.
type loopbackOnly struct{ net.Listener }

func (l loopbackOnly) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if a, ok := c.RemoteAddr().(*net.TCPAddr); ok && a.IP.IsLoopback() {
			return c, nil
		}
		_ = c.Close()
	}
}
