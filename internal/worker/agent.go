package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/internal/clock"
	"github.com/norsk-go/norsk-manager/internal/runtime"
	"github.com/norsk-go/norsk-manager/internal/runtime/docker"
	"github.com/norsk-go/norsk-manager/internal/runtime/process"
	"github.com/norsk-go/norsk-manager/internal/worker/ack"
	"github.com/norsk-go/norsk-manager/internal/worker/datadir"
	"github.com/norsk-go/norsk-manager/internal/worker/hostinfo"
	"github.com/norsk-go/norsk-manager/internal/worker/images"
	"github.com/norsk-go/norsk-manager/internal/worker/instance"
	"github.com/norsk-go/norsk-manager/internal/worker/jobsocket"
	jsapi "github.com/norsk-go/norsk-manager/pkg/jobsocket"
)

// dockerProbeTimeout bounds the check whether a Docker engine answers.
const dockerProbeTimeout = 3 * time.Second

// serverShutdownTimeout bounds the graceful end of the NodeController
// server's connections when Run returns.
const serverShutdownTimeout = 2 * time.Second

// terminateFlushTimeout bounds the wait for a Terminate's acknowledgement to
// be sent before Run returns.
const terminateFlushTimeout = 10 * time.Second

// Agent is the worker agent of one node. Make it with New and run it with
// Run, once.
type Agent struct {
	cfg     Config
	clock   clock.Clock
	baseLog *slog.Logger
	reg     *registrar
	cpu     hostinfo.CPU
	ready   chan struct{}
	started atomic.Bool

	// Set by Run before the goroutines that read them start.
	advertise   string
	runtimeName string
	records     *instance.Records
	sup         *instance.Supervisor
	runCtx      context.Context
	cancelRun   context.CancelCauseFunc

	mu            sync.Mutex // guards log, addr, advertiseCopy, id
	log           *slog.Logger
	addr          string
	advertiseCopy string
	id            *Identity

	heartbeatDefault atomic.Int64 // time.Duration
	terminating      atomic.Bool

	// incarnation tells this worker process apart from another with the
	// same node identity (WorkerHello.worker_incarnation): made at New.
	incarnation string
	// rt is the runtime, set by Run before the supervisor starts; the
	// cluster id is given to it once known (cluster.go).
	rt runtime.Runtime

	// The lease of lease-protected instances and its fencing loop
	// (lease.go); fenceChecks counts the loop's looks (tests).
	lease       leaseState
	fenceWake   chan struct{}
	fenceChecks atomic.Uint64

	// images is the runtime's image inventory (internal/worker/images); set by Run
	// before the server starts.
	images *images.Inventory

	// js serves the job sockets (internal/worker/jobsocket); nil unless
	// Config.JobSocket. Set by Run before the instances' actors start.
	js *jobsocket.Sockets

	disco  datadir.Discovery  // the discovery access (discovery.go)
	planes controlPlanes      // the cluster's norsk-mgr URLs (control_planes.go)
	access accessReplicaStore // the access replica (access_replica.go)
	tlsw   workerTLS          // mutual TLS with the Manager (tls.go)

	linkMu      sync.Mutex
	link        linkState
	linkChanged chan struct{}

	// pubMu guards the published instance reports, the current Control
	// stream and the streams' bookkeeping.
	pubMu       sync.Mutex
	snaps       map[runtime.Key]*snapshot
	cur         *session
	nextSession uint64
	// migPending are handshake reports kept for the next stream
	// (migration_report.go); noticesPending likewise notices (cluster.go).
	migPending     []*managerv1.WorkerMessage
	noticesPending []*managerv1.WorkerMessage
	// epoch is the newest Manager primary that opened a stream.
	epoch         Epoch
	streamsClosed bool
	streams       sync.WaitGroup // Control handlers and their receivers

	wg sync.WaitGroup // every other goroutine the agent owns
}

// New checks cfg and returns an Agent. It does nothing else: Run does the
// work.
func New(cfg Config) (*Agent, error) {
	given := len(cfg.Capabilities)
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	log := cfg.Logger.With("component", "worker")
	if !cfg.JobSocket && len(cfg.Capabilities) < given {
		log.Warn("not advertising the " + jsapi.Capability + " capability: it is this worker's only with --job-socket")
	}
	apiTLS, err := managerTLSConfig(cfg)
	if err != nil {
		return nil, err
	}
	a := &Agent{
		cfg:         cfg,
		clock:       cfg.Clock,
		baseLog:     log,
		log:         log,
		reg:         newRegistrar(cfg.managerURLs, cfg.HTTPClient, apiTLS),
		ready:       make(chan struct{}),
		linkChanged: make(chan struct{}, 1),
		fenceWake:   make(chan struct{}, 1),
		snaps:       map[runtime.Key]*snapshot{},
		records:     instance.NewRecords(filepath.Join(cfg.DataDir, instance.RecordsDir), log),
		incarnation: newIncarnation(),
	}
	a.heartbeatDefault.Store(int64(DefaultHeartbeat))
	a.link.downSince = cfg.Clock.Now()
	return a, nil
}

// Ready is closed once the agent is registered (now or in an earlier run),
// has taken over the instances an earlier worker left, and serves the
// NodeController.
func (a *Agent) Ready() <-chan struct{} { return a.ready }

// Addr is the NodeController listen address (host:port); valid once Ready
// is closed.
func (a *Agent) Addr() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.addr
}

// AdvertiseAddr is the address the worker registers for the Manager to dial;
// valid once Ready is closed.
func (a *Agent) AdvertiseAddr() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.advertiseCopy
}

// NodeID is the node's id; empty until the worker knows it.
func (a *Agent) NodeID() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.id == nil {
		return ""
	}
	return a.id.NodeID
}

// Inventory returns a report of every instance the worker holds, tombstones
// included, ordered by job and role: what the next hello would carry.
func (a *Agent) Inventory() []*managerv1.InstanceReport {
	a.pubMu.Lock()
	defer a.pubMu.Unlock()
	out := make([]*managerv1.InstanceReport, 0, len(a.snaps))
	for _, s := range a.sortedSnaps() {
		out = append(out, proto.Clone(s.report).(*managerv1.InstanceReport))
	}
	return out
}

// Connected reports whether a Control stream from the Manager is up.
func (a *Agent) Connected() bool { return a.linkSnapshot().up }

func (a *Agent) logger() *slog.Logger {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.log
}

func (a *Agent) identity() *Identity {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.id
}

// rememberManagers keeps the Manager members a hello named in the identity,
// so that after a restart the worker can register with any of them.
func (a *Agent) rememberManagers(urls []string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.id == nil || slices.Equal(a.id.ManagerURLs, urls) {
		return
	}
	id := *a.id
	id.ManagerURLs = urls
	if err := datadir.SaveIdentity(a.cfg.DataDir, &id); err != nil {
		a.log.Warn("could not remember the Manager's members", "err", err)
		return
	}
	a.id = &id
}

// goOwned runs fn in a goroutine Run waits for.
func (a *Agent) goOwned(fn func()) {
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		fn()
	}()
}

// Run runs the worker until ctx ends (it returns nil; instances keep
// running) or the Manager terminates or deregisters the node (it returns
// ErrTerminated or ErrDeregistered once every instance has stopped). Other
// errors are returned when the worker cannot start: another worker holds
// DataDir (*DataDirInUseError, naming its pid), a refused registration
// token (ErrTokenRefused), an unusable DataDir, listen address or runtime.
// Every goroutine the agent started has ended when Run returns.
func (a *Agent) Run(ctx context.Context) error {
	if !a.started.CompareAndSwap(false, true) {
		return errors.New("worker: Run may be called once per Agent")
	}
	runCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	a.runCtx, a.cancelRun = runCtx, cancel
	// One worker per data directory: a second one over it would adopt the
	// same instances and take the node from this one in turns.
	lock, err := datadir.TakeLock(a.cfg.DataDir)
	if err != nil {
		return err
	}
	defer lock.Release() // last: after every goroutine has ended
	a.beginLease()
	defer a.reg.close()

	if err := os.MkdirAll(a.records.Dir(), 0o700); err != nil {
		return fmt.Errorf("worker: data directory: %w", err)
	}
	ln, err := net.Listen("tcp", a.cfg.Listen)
	if err != nil {
		return fmt.Errorf("worker: listen on %s: %w", a.cfg.Listen, err)
	}
	defer ln.Close() // a no-op once the server has closed it
	a.advertise = advertiseAddress(a.cfg.Advertise, ln.Addr().String(), a.cfg.ManagerURL)
	a.mu.Lock()
	a.addr = ln.Addr().String()
	a.advertiseCopy = a.advertise
	a.mu.Unlock()

	id, err := LoadIdentity(a.cfg.DataDir)
	if err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	if err := a.initTLS(); err != nil {
		return err
	}
	recs, unreadable, err := a.records.LoadAll()
	if err != nil {
		return fmt.Errorf("worker: instance records: %w", err)
	}
	if a.runtimeName, err = a.resolveRuntimeName(runCtx, recs); err != nil {
		return err
	}

	registered := false
	if id == nil {
		if a.cfg.Token == "" {
			return fmt.Errorf("worker: %s holds no identity and no registration token was given", a.cfg.DataDir)
		}
		a.logger().Info("registering with the Manager", "manager", a.cfg.ManagerURL, "address", a.advertise)
		resp, err := a.registerUntil(runCtx, a.registerRequest(a.cfg.Token, ""))
		var refused *errRefused
		switch {
		case errors.As(err, &refused):
			return fmt.Errorf("%w: %v", ErrTokenRefused, refused.err)
		case err != nil:
			return nil // ctx ended
		}
		if resp.GetNodeId() == "" || resp.GetNodeSecret() == "" {
			return errors.New("worker: the Manager's registration answer has no node id or secret")
		}
		id = &Identity{NodeID: resp.GetNodeId(), NodeSecret: resp.GetNodeSecret(), ManagerURL: a.cfg.ManagerURL, ClusterID: resp.GetClusterId()}
		if err := datadir.SaveIdentity(a.cfg.DataDir, id); err != nil {
			return fmt.Errorf("worker: %w", err)
		}
		if ms := resp.GetHeartbeatIntervalMs(); ms > 0 {
			a.heartbeatDefault.Store(int64(time.Duration(ms) * time.Millisecond))
		}
		registered = true
	} else if id.ManagerURL != a.cfg.ManagerURL {
		id.ManagerURL = a.cfg.ManagerURL
		if err := datadir.SaveIdentity(a.cfg.DataDir, id); err != nil {
			return fmt.Errorf("worker: %w", err)
		}
	}
	a.reg.setURLs(id.ManagerURLs)
	a.mu.Lock()
	a.id = id
	a.log = a.baseLog.With("node", id.NodeID)
	a.records.SetLogger(a.log)
	a.mu.Unlock()
	log := a.logger()
	a.loadDiscovery()
	a.loadAccessReplica()

	if a.cfg.JobSocket {
		if a.js, err = a.newJobSockets(); err != nil {
			return err
		}
		defer a.js.CloseAll() // shutdown closes them first; this covers the early returns
		log.Info("serving job sockets", "dir", a.js.Base())
	}
	rt, ownRT, err := a.openRuntime(runCtx, id.NodeID)
	if err != nil {
		return err
	}
	if ownRT {
		defer rt.Close()
	}
	if err := rt.SetClusterID(id.ClusterID); err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	if id.ClusterID == "" {
		log.Warn("this worker does not know its cluster id yet (its Manager has not told it since it was upgraded): until it does, it touches only services without one")
	}
	a.rt = rt
	a.images = a.newImages(rt)
	if err := a.images.Refresh(runCtx); err != nil {
		log.Warn("cannot list the runtime's images; the hello reports none until it can", "err", err)
	}
	a.sup = instance.New(runCtx, instance.Config{
		Host:        agentHost{a},
		Runtime:     rt,
		RuntimeName: a.runtimeName,
		Clock:       a.clock,
		Log:         a.logger(),
		Records:     a.records,
		NodeID:      a.NodeID(),
		JobSockets:  a.js,
	})
	defer a.wg.Wait()
	if err := a.sup.Adopt(runCtx, recs, unreadable); err != nil {
		cancel(nil)
		return fmt.Errorf("worker: adopt instances: %w", err)
	}
	a.goOwned(func() { a.runFence(runCtx) })
	a.goOwned(func() { a.images.Run(runCtx) })

	srv := a.newServer()
	a.goOwned(func() {
		if err := srv.Serve(a.tlsListener(ln)); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("NodeController server failed", "err", err)
			cancel(fmt.Errorf("worker: NodeController server: %w", err))
		}
	})
	a.goOwned(func() { a.runLink(runCtx, !registered) })
	a.goOwned(func() { a.renewTLS(runCtx) })
	log.Info("worker running", "listen", a.Addr(), "advertise", a.advertise, "runtime", rt.Name(),
		"cluster_id", id.ClusterID, "incarnation", a.incarnation, "pid", os.Getpid())
	close(a.ready)

	<-runCtx.Done()
	a.shutdown(srv)
	cause := context.Cause(runCtx)
	switch {
	case errors.Is(cause, ErrTerminated), errors.Is(cause, ErrDeregistered):
		log.Info("worker stopped", "reason", cause)
		return cause
	case ctx.Err() == nil && cause != nil && !errors.Is(cause, context.Canceled):
		return cause // the server failed
	}
	log.Info("worker stopped; instances keep running")
	return nil
}

// shutdown ends the streams, the server and every goroutine of the agent.
// Streams are ended cleanly (what was sent reaches the Manager), within
// serverShutdownTimeout; then every connection is closed.
func (a *Agent) shutdown(srv *http.Server) {
	a.pubMu.Lock()
	a.streamsClosed = true
	if a.cur != nil {
		a.cur.cancel(errShutdown)
	}
	a.pubMu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), serverShutdownTimeout)
	_ = srv.Shutdown(ctx)
	cancel()
	_ = srv.Close() // ends every connection: blocked receivers return
	a.streams.Wait()
	a.sup.Close()
	if a.js != nil {
		a.js.CloseAll()
	}
	a.wg.Wait()
}

// shutdownNode stops every instance (reason NODE_TERMINATED), forgets the
// records (and the identity when deregistered), acknowledges a Terminate
// command when one came on sess, and ends Run with ErrTerminated or
// ErrDeregistered.
func (a *Agent) shutdownNode(sess *session, seq uint64, reason string, deregistered bool) {
	if !a.terminating.CompareAndSwap(false, true) {
		if sess != nil {
			sess.enqueue(ack.Message(seq, nil))
		}
		return
	}
	exitErr := ErrTerminated
	if deregistered {
		exitErr = ErrDeregistered
	}
	a.goOwned(func() {
		ctx := a.runCtx
		log := a.logger()
		log.Info("stopping every instance: the node is leaving", "reason", reason, "deregistered", deregistered)
		a.sup.StopAll(ctx, managerv1.StoppingReason_STOPPING_REASON_NODE_TERMINATED, reason)
		if ctx.Err() != nil {
			return
		}
		if err := a.records.DeleteAll(); err != nil {
			log.Error("cannot delete instance records", "err", err)
		}
		if deregistered {
			if err := datadir.DeleteIdentity(a.cfg.DataDir); err != nil {
				log.Error("cannot delete the identity", "err", err)
			}
			a.forgetDiscovery()
			a.forgetAccessReplica()
		}
		if sess != nil {
			sent := make(chan struct{})
			sess.enqueueThen(ack.Message(seq, nil), func() { close(sent) })
			t := a.clock.NewTimer(terminateFlushTimeout)
			select {
			case <-sent:
			case <-sess.ctx.Done():
			case <-ctx.Done():
			case <-t.C():
			}
			t.Stop()
		}
		a.cancelRun(exitErr)
	})
}

// resolveRuntimeName decides which runtime the worker uses.
func (a *Agent) resolveRuntimeName(ctx context.Context, recs map[runtime.Key]*instance.Record) (string, error) {
	if a.cfg.RuntimeImpl != nil {
		return a.cfg.RuntimeImpl.Name(), nil
	}
	if a.cfg.Runtime != "" {
		return a.cfg.Runtime, nil
	}
	// An existing worker keeps the runtime its instances were made with.
	for _, rec := range recs {
		if rec.Runtime == "docker" || rec.Runtime == "process" {
			return rec.Runtime, nil
		}
	}
	pctx, cancel := context.WithTimeout(ctx, dockerProbeTimeout)
	defer cancel()
	rt, err := docker.New(pctx, docker.Config{NodeID: "probe", Logger: a.baseLog})
	if err != nil {
		a.baseLog.Info("no Docker engine answers; using the process runtime", "err", err)
		return "process", nil
	}
	_ = rt.Close()
	return "docker", nil
}

// openRuntime builds the runtime for nodeID; own is false for an injected one.
func (a *Agent) openRuntime(ctx context.Context, nodeID string) (rt runtime.Runtime, own bool, err error) {
	if a.cfg.RuntimeImpl != nil {
		return a.cfg.RuntimeImpl, false, nil
	}
	host, _, err := net.SplitHostPort(a.advertise)
	if err != nil {
		host = ""
	}
	switch a.runtimeName {
	case "docker":
		d, err := docker.New(ctx, docker.Config{NodeID: nodeID, Logger: a.baseLog, AdvertiseHost: host, PublishHost: a.cfg.PublishHost})
		if err != nil {
			return nil, false, fmt.Errorf("worker: %w", err)
		}
		return d, true, nil
	default:
		p, err := process.New(process.Config{
			NodeID:        nodeID,
			Dir:           filepath.Join(a.cfg.DataDir, "process"),
			Logger:        a.baseLog,
			AdvertiseHost: host,
			CommandDir:    a.cfg.CommandDir,
		})
		if err != nil {
			return nil, false, fmt.Errorf("worker: %w", err)
		}
		return p, true, nil
	}
}

// advertiseAddress is the address the Manager dials: the configured one, or
// the listen address with an unspecified IP replaced by the address this
// host reaches the Manager from (or its hostname).
func advertiseAddress(configured, listen, managerURL string) string {
	if configured != "" {
		return configured
	}
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return listen
	}
	if ip := net.ParseIP(host); ip != nil && !ip.IsUnspecified() {
		return listen
	}
	if u, err := url.Parse(managerURL); err == nil && u.Hostname() != "" {
		mport := u.Port()
		if mport == "" {
			mport = "443"
			if u.Scheme == "http" {
				mport = "80"
			}
		}
		d := net.Dialer{Timeout: 2 * time.Second}
		if c, err := d.Dial("udp", net.JoinHostPort(u.Hostname(), mport)); err == nil {
			local, _ := c.LocalAddr().(*net.UDPAddr)
			_ = c.Close()
			if local != nil && !local.IP.IsUnspecified() {
				return net.JoinHostPort(local.IP.String(), port)
			}
		}
	}
	if h, err := os.Hostname(); err == nil && h != "" {
		return net.JoinHostPort(h, port)
	}
	return net.JoinHostPort("127.0.0.1", port)
}

// sortedSnaps returns the published snapshots ordered by key; pubMu held.
func (a *Agent) sortedSnaps() []*snapshot {
	out := make([]*snapshot, 0, len(a.snaps))
	for _, s := range a.snaps {
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool {
		ki, kj := out[i].key, out[j].key
		if ki.JobID != kj.JobID {
			return ki.JobID < kj.JobID
		}
		return ki.Role < kj.Role
	})
	return out
}

// liveInstances counts the instances that have not stopped.
func (a *Agent) liveInstances() uint32 {
	a.pubMu.Lock()
	defer a.pubMu.Unlock()
	n := uint32(0)
	for _, s := range a.snaps {
		if s.report.GetPhase() != managerv1.InstancePhase_INSTANCE_PHASE_STOPPED {
			n++
		}
	}
	return n
}
