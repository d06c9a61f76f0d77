// Package mockhost is a machine of the mock provider: a small server
// (MockHost) that boots a worker agent for a node the Manager created, and
// becomes free again once that worker has ended. `norsk-ctl worker
// mock-host` runs one; tests and `norsk-manager dev --mock-hosts` run them
// in process.
//
// A host runs at most one worker at a time, in a fresh directory under its
// DataDir. The worker is the same agent `norsk-ctl worker` runs: it
// registers with the one-shot token Boot carries, and the Manager drives it
// like any other node. When the Manager terminates the node the worker
// stops its instances and exits; the host then deletes the node's
// directory and is free. Release does the same from the host's side (the
// instances are removed through the worker's runtime) for a node the
// Manager gave up on.
package mockhost

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1/managerv1connect"
	"github.com/norsk-go/norsk-manager/internal/runtime"
	"github.com/norsk-go/norsk-manager/internal/runtime/docker"
	"github.com/norsk-go/norsk-manager/internal/runtime/process"
	"github.com/norsk-go/norsk-manager/internal/worker"
	"github.com/norsk-go/norsk-manager/pkg/jobspec"
)

// Config configures a Host.
type Config struct {
	// Listen is the MockHost server's address (default 127.0.0.1:0).
	Listen string
	// Listener, when set, is served on instead of opening Listen (a host
	// whose supervisor holds its port across the host's restarts); Start
	// takes it over.
	Listener net.Listener
	// DataDir holds the running node's worker directory (required).
	DataDir string
	// Token is the bearer token every call must carry ("" = none).
	Token string
	// VCPUs is what the host offers (reported in Status; the worker reports
	// the machine's own hardware).
	VCPUs uint32
	// Worker is the template of the booted worker's configuration:
	// ManagerURL, Token, DataDir and TLSCAHash are set from Boot.
	Worker worker.Config
	Logger *slog.Logger
}

// Host is a running mock host.
type Host struct {
	cfg Config
	log *slog.Logger
	ln  net.Listener
	srv *http.Server

	mu      sync.Mutex
	nodeID  string
	cancel  context.CancelFunc
	done    chan struct{}
	agent   *worker.Agent
	closing bool
	wg      sync.WaitGroup
}

// Start listens and serves until Close.
func Start(cfg Config) (*Host, error) {
	if cfg.DataDir == "" {
		return nil, errors.New("mock host: DataDir is required")
	}
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:0"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		if cfg.Listener != nil {
			_ = cfg.Listener.Close()
		}
		return nil, fmt.Errorf("mock host: %w", err)
	}
	ln := cfg.Listener
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", cfg.Listen); err != nil {
			return nil, fmt.Errorf("mock host: listen on %s: %w", cfg.Listen, err)
		}
	}
	h := &Host{cfg: cfg, log: cfg.Logger.With("component", "mock-host", "addr", ln.Addr().String()), ln: ln}
	h.sweep()
	mux := http.NewServeMux()
	mux.Handle(managerv1connect.NewMockHostHandler(h, connect.WithInterceptors(h.auth())))
	h.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		_ = h.srv.Serve(ln)
	}()
	return h, nil
}

// URL is the host's base URL, as the Manager's providers.mock.hosts names it.
func (h *Host) URL() string { return "http://" + h.ln.Addr().String() }

// NodeID is the node whose worker runs ("" = free).
func (h *Host) NodeID() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.nodeID
}

// Agent is the running worker (nil = free).
func (h *Host) Agent() *worker.Agent {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.agent
}

// Close stops serving and stops the worker's agent; its instances keep
// running, as a worker's do when it stops (a new host on the same DataDir
// does not adopt them: the Manager sees the node lost, and the new host
// removes them as it starts).
func (h *Host) Close() error {
	h.mu.Lock()
	h.closing = true
	cancel, done := h.cancel, h.done
	h.mu.Unlock()
	ctx, stop := context.WithTimeout(context.Background(), 5*time.Second)
	defer stop()
	err := h.srv.Shutdown(ctx)
	if cancel != nil {
		cancel()
		<-done
	}
	h.wg.Wait()
	return err
}

func (h *Host) auth() connect.Interceptor {
	return connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			if h.cfg.Token != "" && req.Header().Get("Authorization") != "Bearer "+h.cfg.Token {
				return nil, connect.NewError(connect.CodeUnauthenticated, errors.New("mock host: present the host's bearer token"))
			}
			return next(ctx, req)
		}
	})
}

func (h *Host) nodeDir(nodeID string) string { return filepath.Join(h.cfg.DataDir, "node-"+nodeID) }

// sweep clears what an earlier run of the host left: a node directory
// there is a node whose worker stopped with the host (or died with it).
// The Manager sees that node lost and recovers its jobs elsewhere, since
// a host never adopts it, so its instances are removed, as a machine that
// restarts takes its processes with it: left running, they would run a
// second copy of jobs the Manager has moved. The host starts empty.
func (h *Host) sweep() {
	h.removeNodes("the host starts empty: removing the instances of the node an earlier run of it ran (the Manager sees that node lost)")
}

// RemoveLeftovers removes what the host's nodes left, as a restarted host
// does (sweep): for a host closed for good, whose workers were not there to
// stop their instances (a test that closed the host to lose its node).
// Call it after Close.
func (h *Host) RemoveLeftovers() {
	h.removeNodes("the host is closed for good: removing the instances of a node it ran")
}

// removeNodes removes the instances of every node directory under the
// host's DataDir, then the directory, saying why.
func (h *Host) removeNodes(why string) {
	ents, err := os.ReadDir(h.cfg.DataDir)
	if err != nil {
		h.log.Warn("cannot read the host's directory for an earlier run's node", "err", err)
		return
	}
	for _, e := range ents {
		nodeID, ok := strings.CutPrefix(e.Name(), "node-")
		if !ok || !e.IsDir() {
			continue
		}
		dir := filepath.Join(h.cfg.DataDir, e.Name())
		h.log.Warn(why, "node", nodeID)
		h.removeInstances(nodeID, dir)
		if err := os.RemoveAll(dir); err != nil {
			h.log.Warn("cannot remove an earlier run's node directory", "node", nodeID, "err", err)
		}
	}
}

// Boot starts a worker for the request's node.
func (h *Host) Boot(ctx context.Context, req *connect.Request[managerv1.MockHostBootRequest]) (*connect.Response[managerv1.MockHostBootResponse], error) {
	m := req.Msg
	if err := jobspec.ValidateID("nodeId", m.GetNodeId()); err != nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, err)
	}
	if m.GetToken() == "" || m.GetManagerUrl() == "" {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("mock host: boot needs the Manager's URL and a registration token"))
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case h.closing:
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("mock host: shutting down"))
	case h.nodeID == m.GetNodeId():
		return connect.NewResponse(&managerv1.MockHostBootResponse{}), nil // a retried boot
	case h.nodeID != "":
		return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("mock host: runs node %q", h.nodeID))
	}
	dir := h.nodeDir(m.GetNodeId())
	if err := os.RemoveAll(dir); err != nil {
		return nil, connect.NewError(connect.CodeInternal, err)
	}
	wc := h.cfg.Worker
	wc.ManagerURL, wc.Token, wc.DataDir, wc.TLSCAHash = m.GetManagerUrl(), m.GetToken(), dir, m.GetCaHash()
	if wc.Logger == nil {
		wc.Logger = h.cfg.Logger
	}
	wc.Logger = wc.Logger.With("node", m.GetNodeId())
	a, err := worker.New(wc)
	if err != nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, err)
	}
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	h.nodeID, h.cancel, h.done, h.agent = m.GetNodeId(), cancel, done, a
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		defer close(done)
		h.run(runCtx, a, m.GetNodeId(), dir)
	}()
	h.log.Info("booting a worker", "node", m.GetNodeId())
	return connect.NewResponse(&managerv1.MockHostBootResponse{}), nil
}

// run runs the node's worker until it ends, then frees the host: a worker
// the Manager terminated or deregistered has stopped its instances, and
// its directory is deleted. A worker stopped because the host closes
// keeps its directory.
func (h *Host) run(ctx context.Context, a *worker.Agent, nodeID, dir string) {
	err := a.Run(ctx)
	ended := errors.Is(err, worker.ErrTerminated) || errors.Is(err, worker.ErrDeregistered) || errors.Is(err, worker.ErrTokenRefused)
	h.mu.Lock()
	closing := h.closing
	h.mu.Unlock()
	switch {
	case ended:
		h.log.Info("the node's worker ended; the host is free", "node", nodeID, "why", err)
		_ = os.RemoveAll(dir)
	case closing:
		return
	default:
		// Released (or failed): remove what the worker ran.
		h.removeInstances(nodeID, dir)
		_ = os.RemoveAll(dir)
		h.log.Info("released the node; the host is free", "node", nodeID, "err", err)
	}
	h.mu.Lock()
	if h.nodeID == nodeID {
		h.nodeID, h.cancel, h.agent = "", nil, nil
	}
	h.mu.Unlock()
}

// removeInstances removes every instance the node's worker ran, through
// the runtime it ran them with.
func (h *Host) removeInstances(nodeID, dir string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var rt runtime.Runtime
	var err error
	// The worker's cluster: its runtime touches only what carries it.
	var cluster string
	if id, idErr := worker.LoadIdentity(dir); idErr == nil && id != nil {
		cluster = id.ClusterID
	}
	if h.cfg.Worker.RuntimeImpl != nil {
		rt = h.cfg.Worker.RuntimeImpl
	} else if _, statErr := os.Stat(filepath.Join(dir, "process")); statErr == nil {
		rt, err = process.New(process.Config{NodeID: nodeID, ClusterID: cluster, Dir: filepath.Join(dir, "process"), Logger: h.log, CommandDir: h.cfg.Worker.CommandDir})
		if err == nil {
			defer rt.Close()
		}
	} else {
		rt, err = docker.New(ctx, docker.Config{NodeID: nodeID, ClusterID: cluster, Logger: h.log})
		if err == nil {
			defer rt.Close()
		}
	}
	if err != nil {
		h.log.Warn("release: cannot open the node's runtime; its instances may still run", "node", nodeID, "err", err)
		return
	}
	list, err := rt.List(ctx)
	if err != nil {
		h.log.Warn("release: cannot list the node's instances", "node", nodeID, "err", err)
		return
	}
	seen := map[runtime.Key]bool{}
	for _, s := range list {
		if seen[s.Key] {
			continue
		}
		seen[s.Key] = true
		if err := rt.Remove(ctx, s.Key); err != nil {
			h.log.Warn("release: remove instance", "node", nodeID, "instance", s.Key.String(), "err", err)
		}
	}
}

// Status says whether the host is free.
func (h *Host) Status(ctx context.Context, req *connect.Request[managerv1.MockHostStatusRequest]) (*connect.Response[managerv1.MockHostStatus], error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return connect.NewResponse(&managerv1.MockHostStatus{Busy: h.nodeID != "", NodeId: h.nodeID, Vcpus: h.cfg.VCPUs}), nil
}

// Release ends the running worker (its instances removed) and frees the
// host; it returns once the host is free.
func (h *Host) Release(ctx context.Context, req *connect.Request[managerv1.MockHostReleaseRequest]) (*connect.Response[managerv1.MockHostReleaseResponse], error) {
	h.mu.Lock()
	nodeID, cancel, done := h.nodeID, h.cancel, h.done
	h.mu.Unlock()
	if nodeID == "" || (req.Msg.GetNodeId() != "" && req.Msg.GetNodeId() != nodeID) {
		return connect.NewResponse(&managerv1.MockHostReleaseResponse{}), nil
	}
	cancel()
	select {
	case <-done:
	case <-ctx.Done():
		return nil, connect.NewError(connect.CodeDeadlineExceeded, errors.New("mock host: the worker is still stopping"))
	}
	return connect.NewResponse(&managerv1.MockHostReleaseResponse{}), nil
}
