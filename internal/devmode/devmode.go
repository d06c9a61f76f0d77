// Package devmode is `norsk-manager dev`: a complete single-machine system
// for a newcomer — one Manager member, N in-process workers and a demo job —
// started with one command and reaching a running job.
//
// Everything is the real thing: the store is raft on disk, the workers are
// the same agents `norsk-ctl worker` runs, registered with one-shot tokens
// and dialled back by the Manager, and their instances run on the Docker
// engine when one answers (the process runtime when none does).
package devmode

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	jose "github.com/go-jose/go-jose/v4"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1/managerv1connect"
	"github.com/norsk-go/norsk-manager/internal/auth"
	"github.com/norsk-go/norsk-manager/internal/automanager"
	"github.com/norsk-go/norsk-manager/internal/buildinfo"
	"github.com/norsk-go/norsk-manager/internal/devlocate"
	"github.com/norsk-go/norsk-manager/internal/manager"
	"github.com/norsk-go/norsk-manager/internal/mgr"
	"github.com/norsk-go/norsk-manager/internal/nodes"
	"github.com/norsk-go/norsk-manager/internal/providers/mock"
	"github.com/norsk-go/norsk-manager/internal/runtime/docker"
	"github.com/norsk-go/norsk-manager/internal/worker"
)

// DefaultDataDirHint is how the default data directory is described in help.
const DefaultDataDirHint = "$XDG_DATA_HOME/norsk-manager/dev, i.e. ~/.local/share/norsk-manager/dev"

// Options configure Run.
type Options struct {
	// DataDir holds the Manager's store and each worker's state (default:
	// DefaultDataDir()).
	DataDir string
	// Ephemeral uses a temporary DataDir and stops every instance on exit.
	Ephemeral bool
	// Workers is how many in-process workers to run.
	Workers int
	// Listen is the Manager API address.
	Listen string
	// Runtime is "auto", "docker" or "process".
	Runtime string
	// NoDemo skips the demo job.
	NoDemo bool
	// LostGrace is the Manager's lost grace.
	LostGrace time.Duration
	// MockHosts starts that many mock hosts and gives the Manager a mock
	// provider over them (elastic pool "burst"): placement creates a node
	// on one when nothing fits, and the reaper terminates it after
	// IdleExpiry (default 10 min) without a job.
	MockHosts  int
	IdleExpiry time.Duration
	// Clouds is "local" to start a local EC2 and a local OCI endpoint
	// (internal/cloudsim) and give the Manager aws and oci providers
	// pointed at them through their SDKs, with elastic pool CloudPool on
	// EC2 ("" = none). Their instances boot the worker as Docker containers
	// with the docker runtime, else as processes (WorkerExec
	// cloud-instance), else in this process.
	Clouds string
	// CHHosts starts that many Cloud Hypervisor host agents, their VMs run
	// by the local VMM (internal/chsim), and gives the Manager the
	// cloud-hypervisor provider over them with elastic pool CHPool.
	CHHosts int
	// WorkerExec, when set, runs each worker as a process of its own: this
	// executable with the hidden "dev-worker" command (norsk-manager sets
	// its own path), so that killing one (kill -9 <pid>) loses a node as a
	// crash would. A killed worker is started again after RebootDelay
	// (default: the lost grace and ten seconds more), as a rebooted node
	// would be. Empty: the workers run inside this process (tests).
	WorkerExec string
	// WorkerArgs are added to each worker process's command line: dev's
	// own logging flags, so --log-format json makes the workers log JSON
	// too.
	WorkerArgs  []string
	RebootDelay time.Duration
	Logger      *slog.Logger
	// Out receives the banner (what runs where, what to try next).
	Out io.Writer
	// Ready, if set, is called once everything is up, with the API URL.
	Ready func(url string)
	// ConsoleListen is the address of dev's norsk-mgr, the operator
	// console (default 127.0.0.1:6795; ":0" picks a port). NoConsole runs
	// none.
	ConsoleListen string
	NoConsole     bool
	// ConsoleReady, if set, is called with the console's URL and the dev
	// admin's password once the console is up.
	ConsoleReady func(url, password string)
	// Registry runs an image registry (Debian's docker-registry) at
	// RegistryListen (default DefaultRegistryListen) with the example
	// images pushed into it (docker runtime only).
	Registry       bool
	RegistryListen string
	// Spares is how many warm spares the AutoManager keeps in the mock
	// pool (needs MockHosts), warm for SparesWarmFor (bundle job names,
	// template tags or job ids).
	Spares        int
	SparesWarmFor []string
}

// DefaultDataDir is $XDG_DATA_HOME/norsk-manager/dev (or the
// ~/.local/share equivalent).
func DefaultDataDir() (string, error) {
	base := os.Getenv("XDG_DATA_HOME")
	if base == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("no home directory for the default --data-dir: %w", err)
		}
		base = filepath.Join(home, ".local", "share")
	}
	return filepath.Join(base, "norsk-manager", "dev"), nil
}

// Run starts the system and blocks until ctx ends, then shuts it down.
// Instances keep running across a restart of dev (they are adopted) unless
// the run is ephemeral.
func Run(ctx context.Context, o Options) error {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	// dev's own lines; the Manager, workers and console add their own
	// component to o.Logger.
	dlog := o.Logger.With("component", "dev")
	if o.Out == nil {
		o.Out = io.Discard
	}
	switch o.Clouds {
	case "", CloudsLocal:
	default:
		return fmt.Errorf("--clouds %q: want %q (the local EC2 and OCI endpoints)", o.Clouds, CloudsLocal)
	}
	if o.Clouds != "" && o.MockHosts > 0 {
		return fmt.Errorf("--clouds %s and --mock-hosts both create nodes in pool %s: use one", o.Clouds, MockPool)
	}
	if o.Clouds != "" && o.CHHosts > 0 {
		return fmt.Errorf("--clouds %s and --ch-hosts each write the overrides file: use one", o.Clouds)
	}
	if o.CHHosts < 0 || o.CHHosts > 16 {
		return fmt.Errorf("--ch-hosts %d: want 0 to 16", o.CHHosts)
	}
	if o.Workers < 0 || (o.Workers == 0 && o.Clouds == "" && o.MockHosts == 0 && o.CHHosts == 0) {
		o.Workers = 1 // a system with no node and no way to make one runs nothing
	}
	dir := o.DataDir
	switch {
	case o.Ephemeral:
		tmp, err := os.MkdirTemp("", "norsk-dev-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		dir = tmp
	case dir == "":
		d, err := DefaultDataDir()
		if err != nil {
			return err
		}
		dir = d
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	rt, why := chooseRuntime(ctx, o.Runtime)
	if rt == "" {
		return errors.New(why)
	}
	dlog.Info("dev: runtime chosen", "runtime", rt, "why", why)

	token, err := devToken(dir)
	if err != nil {
		return err
	}
	hctx, stopHosts := context.WithCancel(context.Background())
	hosts, err := startMockHosts(hctx, dir, o.MockHosts, rt, o, dlog)
	defer func() {
		stopHosts()
		hosts.close()
	}()
	if err != nil {
		return err
	}
	var signingKey *jose.JSONWebKey
	accessKeys := ""
	if !o.NoConsole {
		if signingKey, err = consoleKeys(dir); err != nil {
			return fmt.Errorf("console keys: %w", err)
		}
		accessKeys = filepath.Join(dir, AccessReplicaKeysFile)
	}
	var mockCfg *mock.Config
	if hosts.len() > 0 {
		mockCfg = &mock.Config{Pools: []string{MockPool}, VCPUs: uint32(goruntime.NumCPU()), Hosts: hosts.urls()}
	}
	mcfg := manager.Config{
		BootstrapToken:    token,
		NodeName:          "dev",
		DataDir:           filepath.Join(dir, "manager"),
		Listen:            o.Listen,
		LostGrace:         o.LostGrace,
		Logger:            o.Logger,
		MockProvider:      mockCfg,
		DefaultIdleExpiry: o.IdleExpiry,
		Spares:            devSpares(o),
		// norsk-mgr's role-store replica is signed with dev's key.
		AccessReplicaKeysFile: accessKeys,
		// Dev is one machine: its API and worker streams stay plaintext
		// (the banner says so; off loopback the Manager warns loudly).
		TLS: manager.TLSOff,
	}
	var clouds *localClouds
	if o.Clouds == CloudsLocal {
		if clouds, err = startClouds(ctx, dir, rt, o.WorkerExec, o.Logger, &mcfg); err != nil {
			return fmt.Errorf("dev --clouds local: %w", err)
		}
		// Stopped after the Manager: a cloud's instances outlive its API.
		defer clouds.close()
	}
	var chHosts *localHosts
	if o.CHHosts > 0 {
		if chHosts, err = startCHHosts(dir, o.CHHosts, rt, o.WorkerExec, o.Logger, &mcfg); err != nil {
			return fmt.Errorf("dev --ch-hosts: %w", err)
		}
		defer chHosts.close()
	}
	srv, err := manager.New(ctx, mcfg)
	if err != nil {
		return err
	}
	defer srv.Close()
	// norsk-ctl finds this dev's token by the port it serves (any
	// --listen, any --data-dir) while it runs.
	unrecord, err := devlocate.Record(srv.URL(), filepath.Join(dir, TokenFile))
	if err != nil {
		dlog.Warn("dev: norsk-ctl will not find the admin token by itself (give it --token-file)", "err", err)
	}
	defer unrecord()
	api := managerv1connect.NewManagerClient(nodes.H2CClient(), srv.URL(), connect.WithGRPC(), auth.WithBearer(token))

	wctx, stopWorkers := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	defer func() {
		stopWorkers()
		wg.Wait()
	}()
	names := make([]string, o.Workers)
	procs := make([]*workerProc, o.Workers)
	for i := range o.Workers {
		names[i] = fmt.Sprintf("dev-worker-%d", i+1)
		wdir := filepath.Join(dir, "workers", names[i])
		token, err := workerToken(ctx, api, wdir, names[i])
		if err != nil {
			return err
		}
		if o.WorkerExec != "" {
			procs[i] = &workerProc{exec: o.WorkerExec, args: o.WorkerArgs, name: names[i], dir: wdir, url: srv.URL(), runtime: rt, token: token,
				reboot: o.RebootDelay, log: dlog}
			if procs[i].reboot <= 0 {
				procs[i].reboot = max(o.LostGrace, manager.DefaultLostGrace) + 10*time.Second
			}
			if err := procs[i].begin(); err != nil {
				return err
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				// Restarts end when dev begins to stop (ctx); the worker
				// itself runs until wctx ends, after the ephemeral run's
				// instances are stopped.
				procs[i].supervise(wctx, ctx)
			}()
			continue
		}
		a, err := worker.New(WorkerConfig(srv.URL(), wdir, token, rt, o.Logger))
		if err != nil {
			return err
		}
		// A worker an earlier dev left running over the directory is kept
		// until it exits; only then does this one start (never a second
		// worker over a live one).
		pid, held, err := worker.LockHolder(wdir)
		if err != nil {
			return err
		}
		if held {
			dlog.Warn("dev: a worker from an earlier run still runs over this worker's data directory; keeping it, not starting a second",
				"worker", names[i], "pid", pid, "dir", wdir)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if held && !keepAdopted(wctx, wdir, pid, names[i], dlog) {
				return
			}
			if err := a.Run(wctx); err != nil && !errors.Is(err, context.Canceled) {
				dlog.Error("dev: worker stopped", "worker", names[i], "err", err)
			}
		}()
	}
	nodeIDs, err := waitOnline(ctx, api, names)
	if err != nil {
		return err
	}
	demo := ""
	if err := ensureExamples(ctx, rt, dlog); err != nil {
		dlog.Warn("dev: the example programs are not available", "why", err)
		demo = "(no demo job: " + err.Error() + ")"
	} else if len(nodeIDs) == 0 {
		demo = "(no demo job: no worker; elastic nodes run what you create)"
	} else if !o.NoDemo {
		demo, err = ensureDemo(ctx, api, rt, nodeIDs[0])
		if err != nil {
			dlog.Warn("dev: no demo job", "why", err)
			demo = "(no demo job: " + err.Error() + ")"
		}
	}
	var registry *devRegistry
	if o.Registry {
		if rt != "docker" {
			return fmt.Errorf("dev --registry needs the docker runtime (this run uses %s)", rt)
		}
		if registry, err = startRegistry(ctx, dir, o.RegistryListen, o.Logger); err != nil {
			return fmt.Errorf("dev --registry: %w", err)
		}
		defer registry.close()
	}
	banner(o.Out, srv.URL(), dir, rt, names, nodeIDs, demo, o.Ephemeral, filepath.Join(dir, TokenFile))
	if registry != nil {
		first := ""
		if len(nodeIDs) > 0 {
			first = nodeIDs[0]
		}
		registry.banner(o.Out, first)
	}
	if !o.NoConsole {
		listen := o.ConsoleListen
		if listen == "" {
			listen = mgr.DefaultListen
		}
		console, pw, err := startConsole(ctx, dir, srv.URL(), token, listen, signingKey, o.Logger)
		if err != nil {
			return fmt.Errorf("the console (norsk-mgr): %w", err)
		}
		defer console.Close()
		fmt.Fprintf(o.Out, `
The operator console (norsk-mgr) is at %s
  sign in as %s with password %s (kept in %s)
`, console.URL(), ConsoleAdmin, pw, filepath.Join(dir, AdminPasswordFile))
		if o.ConsoleReady != nil {
			o.ConsoleReady(console.URL(), pw)
		}
	}
	if o.WorkerExec != "" && len(procs) > 1 {
		var pids []string
		for _, p := range procs {
			pids = append(pids, fmt.Sprintf("%s pid %d", p.name, p.pid()))
		}
		fmt.Fprintf(o.Out, `
Each worker is a process of its own (%s). Lose a node as a crash
would — kill -9 <pid> — and watch its jobs move (norsk-ctl events); the
worker is started again %s later, as a rebooted node would be, and stops
the copies that were moved away.
`, strings.Join(pids, ", "), procs[0].reboot)
	}
	if hosts.len() > 0 {
		fmt.Fprintf(o.Out, `
%d mock hosts stand by for elastic nodes (pool %s): a bundle that fits no
worker makes the Manager create one, and the reaper terminates it once idle:
  go run ./cmd/norsk-ctl node create-mock
%s`, hosts.len(), MockPool, hosts.banner())
		if o.Spares > 0 {
			fmt.Fprintf(o.Out, `The AutoManager keeps %d warm spare(s) there (tagged spare=true, warm for %s):
kill the node of a job and watch it come back on a spare, and the spare replaced:
  go run ./cmd/norsk-ctl node list
`, o.Spares, strings.Join(o.SparesWarmFor, ", "))
		}
	}
	if clouds != nil {
		clouds.banner(o.Out, rt)
	}
	if chHosts != nil {
		chHosts.banner(o.Out, rt)
	}
	if o.Ready != nil {
		o.Ready(srv.URL())
	}
	<-ctx.Done()
	if o.Ephemeral {
		stopAll(context.Background(), api, dlog)
		if chHosts != nil {
			// Their VMMs outlive dev otherwise; the data goes with them.
			chHosts.deleteVMs(context.Background())
		}
	}
	if o.Ephemeral {
		fmt.Fprintln(o.Out, "\nshutting down; every instance was stopped and the temporary data removed")
	} else {
		fmt.Fprintln(o.Out, "\nshutting down; instances keep running and are adopted by the next `norsk-manager dev`")
	}
	return nil
}

// MockPool is the pool tier dev's mock provider creates nodes in.
const MockPool = "burst"

// chooseRuntime picks the worker runtime; "" with a reason when none fits.
func chooseRuntime(ctx context.Context, want string) (string, string) {
	switch want {
	case "process":
		return "process", "asked for"
	case "docker", "auto", "":
		pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		r, err := docker.New(pctx, docker.Config{NodeID: "dev-probe", Logger: slog.New(slog.DiscardHandler)})
		if err == nil {
			_ = r.Close()
			return "docker", "a Docker engine answers"
		}
		if want == "docker" {
			return "", fmt.Sprintf("--runtime docker: %v", err)
		}
		return "process", fmt.Sprintf("no Docker engine answers (%v)", err)
	}
	return "", fmt.Sprintf("--runtime %q: want auto, docker or process", want)
}

// workerToken makes (or finds) the worker's slot and returns the one-shot
// token its first registration needs ("" when dir holds its identity).
func workerToken(ctx context.Context, api managerv1connect.ManagerClient, dir, name string) (string, error) {
	if worker.HasIdentity(dir) {
		return "", nil
	}
	slots, err := api.ListClusterNodes(ctx, connect.NewRequest(&managerv1.ListClusterNodesRequest{}))
	if err != nil {
		return "", err
	}
	for _, s := range slots.Msg.GetSlots() {
		if s.GetNodeName() != name {
			continue
		}
		if !s.GetTokenUsed() {
			return s.GetToken(), nil
		}
		// The worker's state was lost: retire the old slot.
		if _, err := api.DeregisterClusterNode(ctx, connect.NewRequest(&managerv1.DeregisterClusterNodeRequest{NodeId: s.GetNodeId()})); err != nil {
			return "", fmt.Errorf("retire slot %s: %w", name, err)
		}
		if err := waitGone(ctx, api, s.GetNodeId()); err != nil {
			return "", err
		}
	}
	resp, err := api.RegisterClusterNode(ctx, connect.NewRequest(&managerv1.RegisterClusterNodeRequest{NodeName: name, Pool: "dev"}))
	if err != nil {
		return "", fmt.Errorf("register slot %s: %w", name, err)
	}
	return resp.Msg.GetToken(), nil
}

// WorkerConfig is a dev worker's configuration (in this process, or in its
// own run by the hidden dev-worker command): the job socket on, so its
// jobs can be handed over.
func WorkerConfig(url, dir, token, rt string, log *slog.Logger) worker.Config {
	return worker.Config{
		ManagerURL: url,
		Token:      token,
		DataDir:    dir,
		Listen:     "127.0.0.1:0",
		Runtime:    rt,
		// Job ports stay on this machine, as the banner says.
		PublishHost: "127.0.0.1",
		Version:     buildinfo.Version,
		Logger:      log,
		JobSocket:   true,
		Capabilities: []*managerv1.Capability{
			{Name: "dev", Count: 1},
		},
	}
}

func waitGone(ctx context.Context, api managerv1connect.ManagerClient, nodeID string) error {
	return poll(ctx, 30*time.Second, "slot "+nodeID+" to be removed", func() (bool, error) {
		slots, err := api.ListClusterNodes(ctx, connect.NewRequest(&managerv1.ListClusterNodesRequest{}))
		if err != nil {
			return false, err
		}
		for _, s := range slots.Msg.GetSlots() {
			if s.GetNodeId() == nodeID {
				return false, nil
			}
		}
		return true, nil
	})
}

// waitOnline waits until the node of every worker named is online and
// returns their node ids, in the order of names.
func waitOnline(ctx context.Context, api managerv1connect.ManagerClient, names []string) ([]string, error) {
	ids := make([]string, len(names))
	err := poll(ctx, 60*time.Second, "the workers to come online", func() (bool, error) {
		resp, err := api.ListNodes(ctx, connect.NewRequest(&managerv1.ListNodesRequest{}))
		if err != nil {
			return false, err
		}
		online := map[string]string{}
		for _, n := range resp.Msg.GetNodes() {
			if n.GetState() == managerv1.NodeState_NODE_STATE_ONLINE {
				online[n.GetNodeName()] = n.GetNodeId()
			}
		}
		for i, n := range names {
			if ids[i] = online[n]; ids[i] == "" {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return nil, err
	}
	return ids, nil
}

func poll(ctx context.Context, timeout time.Duration, what string, done func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	for {
		ok, err := done()
		if err != nil {
			return fmt.Errorf("waiting for %s: %w", what, err)
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %s waiting for %s", timeout, what)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// stopAll stops every instance (ephemeral runs leave nothing behind).
func stopAll(ctx context.Context, api managerv1connect.ManagerClient, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	resp, err := api.JobSearch(ctx, connect.NewRequest(&managerv1.JobSearchRequest{}))
	if err != nil {
		log.Warn("dev: cannot list jobs to stop them", "err", err)
		return
	}
	for _, j := range resp.Msg.GetJobs() {
		if _, err := api.DeleteJob(ctx, connect.NewRequest(&managerv1.DeleteJobRequest{JobId: j.GetJob().GetJobId()})); err != nil {
			log.Warn("dev: cannot delete job", "job", j.GetJob().GetJobId(), "err", err)
		}
	}
	_ = poll(ctx, 50*time.Second, "every instance to stop", func() (bool, error) {
		n, err := api.ListNodes(ctx, connect.NewRequest(&managerv1.ListNodesRequest{}))
		if err != nil {
			return false, err
		}
		for _, node := range n.Msg.GetNodes() {
			// A node that is not online cannot stop anything: not waited for.
			if node.GetState() == managerv1.NodeState_NODE_STATE_ONLINE && len(node.GetInstances()) > 0 {
				return false, nil
			}
		}
		return true, nil
	})
}

// TokenFile is where dev keeps its admin API token, in its data directory
// (mode 0600); norsk-ctl reads it when no other token is given
// (internal/devlocate).
const TokenFile = devlocate.TokenFileName

// devToken returns dev's admin token, making one on the first run.
func devToken(dir string) (string, error) {
	path := filepath.Join(dir, TokenFile)
	if b, err := os.ReadFile(path); err == nil {
		if tok := strings.TrimSpace(string(b)); tok != "" {
			return tok, nil
		}
	}
	tok := auth.NewToken()
	if err := os.WriteFile(path, []byte(tok+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("write the dev admin token: %w", err)
	}
	return tok, nil
}

// goTool reports whether the go command is available (the demo's programs
// are built from this module's source).
func goTool() bool {
	_, err := exec.LookPath("go")
	return err == nil
}

// devSpares is the Manager's spares for o: Spares warm spares in the mock
// pool.
func devSpares(o Options) map[string]automanager.SpareSpec {
	if o.Spares <= 0 || o.MockHosts == 0 {
		return nil
	}
	return map[string]automanager.SpareSpec{MockPool: {Count: o.Spares, WarmFor: o.SparesWarmFor}}
}
