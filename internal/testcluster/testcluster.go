// Package testcluster starts a whole Norsk Manager system inside one test
// process: a Manager member (the same manager.New the binary uses, its store
// on disk in t.TempDir()) and M workers (the same worker agents `norsk-ctl
// worker` runs, with the process runtime by default), plus an SDK client.
// Members and workers can be stopped, restarted and killed the way an
// operator would, so a test can walk a job through Manager restarts, worker
// restarts and node loss.
//
// Everything stops when the test ends. Instances are removed then too,
// unless a test leaves them on purpose (KeepInstances).
package testcluster

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/norsk-go/norsk-manager/internal/auth"
	"github.com/norsk-go/norsk-manager/internal/cloudsim"
	"github.com/norsk-go/norsk-manager/internal/hostagent"

	"github.com/norsk-go/norsk-manager/internal/clock"
	"github.com/norsk-go/norsk-manager/internal/manager"
	"github.com/norsk-go/norsk-manager/internal/providers/mock/mockhost"
	"github.com/norsk-go/norsk-manager/internal/runtime/runtimetest"
	"github.com/norsk-go/norsk-manager/internal/testcluster/faultnet"
	"github.com/norsk-go/norsk-manager/internal/worker"
	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

// Options configure a cluster.
type Options struct {
	// Workers is how many workers to start (named worker-1 … worker-N, see
	// WorkerPrefix).
	Workers int
	// Runtime is the workers' runtime: "process" (default) or "docker".
	Runtime string
	// LostGrace and HeartbeatInterval configure the Manager (defaults 2 s
	// and 100 ms: quick enough for tests, slow enough for -race).
	LostGrace         time.Duration
	HeartbeatInterval time.Duration
	// Clock is the Manager's clock (default real).
	Clock clock.Clock
	// Logger receives every component's logs (default: discarded unless
	// NORSK_TEST_LOG=1).
	Logger *slog.Logger
	// KeepInstances leaves instances running when the test ends.
	KeepInstances bool
	// WorkerPrefix names the workers <prefix>-1 … <prefix>-N (default
	// "worker"). Clusters that share one Docker engine may use the same
	// names: a worker touches only containers labelled with its own
	// cluster's id (decision 0027); distinct prefixes keep a test's cleanup
	// by node name to its own containers.
	WorkerPrefix string
	// AccessReplicaKeysFile is the Manager's trusted JWKS for access
	// replicas (manager.Config.AccessReplicaKeysFile).
	AccessReplicaKeysFile string
	// Members is how many full Manager members to run (default 1: a
	// standalone member); Witnesses adds witness members. With more than
	// one member they form a cluster over Net, a network the test can cut.
	Members   int
	Witnesses int
	// TLS is the Manager's TLS mode (manager.Config.TLS; "on" serves TLS
	// on loopback too). With TLS the SDK client and the workers pin the
	// Manager's CA by its fingerprint, and the workers' streams are mutual
	// TLS.
	TLS string
	// WorkerLinks routes each worker's traffic with the Manager members
	// through a Link (Worker.Link) a test can cut and heal (workernet.go).
	WorkerLinks bool
	// ManagerConfig, if set, adjusts every member's configuration before
	// each start (before Member.Extra). Setting LostGrace or
	// HeartbeatInterval to zero there gives manager.Config's own defaults
	// instead of the cluster's quick ones.
	ManagerConfig func(*manager.Config)
	// MockHosts starts that many mock hosts (the mock provider's machines,
	// process runtime) and gives the Manager a mock provider over them,
	// creating nodes in MockPool (default "burst") with MockVCPUs (default
	// 2). See mockhosts.go.
	MockHosts int
	MockPool  string
	MockVCPUs uint32
	// JobSocket starts the workers with their job sockets (--job-socket):
	// each advertises the jobSocket capability a handover needs.
	JobSocket bool
	// Clouds starts an EC2 and an OCI endpoint (internal/cloudsim) and
	// gives the Manager aws and oci providers pointed at them through their
	// SDKs, with pools AWSPool and OCIPool. See clouds.go.
	Clouds bool
	// CloudRunner boots the clouds' instances (nil: an in-process worker
	// on the process runtime; a *cloudsim.Docker boots each in a container).
	CloudRunner cloudsim.Runner
	// CHHosts starts that many Cloud Hypervisor host agents, each running
	// its VMs' VMMs as local VMMs (internal/chsim) in this process, and
	// gives the Manager the cloud-hypervisor provider with pool CHPool.
	// See chhosts.go.
	CHHosts int
	// CHRunner boots the host agents' VMs' guests (nil: an in-process
	// worker on the process runtime).
	CHRunner cloudsim.Runner
	// CHVMM, when set, launches the host agents' VMMs in place of local
	// VMMs in this process (e.g. hostagent.Exec of `norsk-ctl ch-vmm
	// --backend qemu`: real microVMs); CHKernel, CHInitramfs and CHCmdline
	// are then what each VM boots. The cluster's end deletes every VM.
	CHVMM                            hostagent.Launcher
	CHKernel, CHInitramfs, CHCmdline string
}

// Cluster is a running in-process system.
type Cluster struct {
	t    testing.TB
	opts Options
	Dir  string
	// Net is the network between the members (nil for a single member):
	// cut and heal links with it.
	Net *faultnet.Network

	// token is the cluster's admin API token (its Manager's bootstrap
	// token); Client() uses it.
	token string
	// secret is the members' cluster secret, the cluster's own: members of
	// two test clusters never accept each other's calls (a test's member
	// can be given a port another test's member just let go of).
	secret string

	// Members are the Manager members: m1 … mN, then the witnesses
	// w1 … wK. A single-member cluster (the default) is standalone.
	Members []*Member
	Workers []*Worker
	// Hosts are the mock hosts (Options.MockHosts).
	Hosts []*mockhost.Host
	// Clouds are the cloud endpoints (Options.Clouds; nil without).
	Clouds *Clouds
	// CH are the host agents (Options.CHHosts; nil without).
	CH *CHHosts

	// closeOnce makes Close and the test's cleanup shut down once.
	closeOnce sync.Once
}

// Worker is one in-process worker.
type Worker struct {
	c     *Cluster
	Name  string
	Dir   string
	token string

	mu     sync.Mutex
	agent  *worker.Agent
	cancel context.CancelFunc
	run    *agentRun
	// link is the worker's cuttable path to the Manager (nil unless
	// Options.WorkerLinks).
	link *Link
	// runtime, when set, is this worker's runtime instead of the
	// cluster's (AddWorker).
	runtime string
}

// New starts a cluster and waits until every worker is online and its
// stream is up.
func New(t testing.TB, opts Options) *Cluster {
	t.Helper()
	if opts.Runtime == "" {
		opts.Runtime = "process"
	}
	if opts.LostGrace == 0 {
		opts.LostGrace = 2 * time.Second
	}
	if opts.HeartbeatInterval == 0 {
		opts.HeartbeatInterval = 100 * time.Millisecond
	}
	if opts.Members <= 0 {
		opts.Members = 1
	}
	if opts.Logger == nil {
		if os.Getenv("NORSK_TEST_LOG") == "1" {
			opts.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
		} else {
			opts.Logger = slog.New(slog.DiscardHandler)
		}
	}
	c := &Cluster{t: t, opts: opts, Dir: t.TempDir(), token: auth.NewToken(), secret: auth.RandomToken("testcluster-", 16)}
	t.Cleanup(c.Close)
	c.startMockHosts()
	c.startClouds()
	c.startCHHosts()
	c.newMembers()
	for _, m := range c.Members {
		m.startServer()
	}
	for _, m := range c.Members {
		m.connect()
	}
	if c.Clustered() {
		c.Primary()
	}
	ctx := Context(t)
	for i := range opts.Workers {
		prefix := opts.WorkerPrefix
		if prefix == "" {
			prefix = "worker"
		}
		name := fmt.Sprintf("%s-%d", prefix, i+1)
		slot, err := c.Client().RegisterClusterNode(ctx, name, "")
		if err != nil {
			t.Fatalf("register %s: %v", name, err)
		}
		w := &Worker{c: c, Name: name, Dir: filepath.Join(c.Dir, "workers", name), token: slot.GetToken()}
		c.Workers = append(c.Workers, w)
		w.Start()
	}
	for _, w := range c.Workers {
		c.WaitNodeConnected(w.Name)
	}
	return c
}

// Context is a context bounded by the test's deadline (or 2 minutes).
func Context(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// Manager returns the first member's server (nil while it is stopped).
func (c *Cluster) Manager() *manager.Server { return c.Members[0].Server() }

// Client returns an SDK client connected to the first member; in a
// cluster, to the primary (else any running full member).
func (c *Cluster) Client() *norsk.Manager {
	if c.Clustered() {
		return c.anyClient()
	}
	return c.Members[0].Client()
}

// ClusterID is the cluster id the first member's store holds (its workers
// label what they create with it); "" while the member is stopped.
func (c *Cluster) ClusterID() string {
	srv := c.Manager()
	if srv == nil || srv.Store() == nil {
		return ""
	}
	return srv.Store().State().Snapshot().ClusterID()
}

// Token is the cluster's admin API token.
func (c *Cluster) Token() string { return c.token }

// URL is the first member's API URL.
func (c *Cluster) URL() string { return c.Members[0].URL() }

// StartManager starts the first member on its data directory (the same
// address as before, so workers find it again).
func (c *Cluster) StartManager() { c.t.Helper(); c.Members[0].Start() }

// StopManager closes the first member (cleanly). Workers keep running.
func (c *Cluster) StopManager() { c.Members[0].Stop() }

// RestartManager stops and starts the first member.
func (c *Cluster) RestartManager() {
	c.t.Helper()
	c.StopManager()
	c.StartManager()
}

// Worker returns the worker named name.
func (c *Cluster) Worker(name string) *Worker {
	for _, w := range c.Workers {
		if w.Name == name {
			return w
		}
	}
	c.t.Fatalf("no worker %q", name)
	return nil
}

// workerManagerURLs are the Manager URLs a worker is given: every full
// member's, the first member's first.
func (c *Cluster) workerManagerURLs() string {
	urls := []string{c.URL()}
	for _, m := range c.Members[1:] {
		if !m.Witness {
			urls = append(urls, m.URL())
		}
	}
	return strings.Join(urls, ",")
}

// Start starts the worker's agent (again) on its data directory.
func (w *Worker) Start() {
	w.c.t.Helper()
	a, err := w.newAgent(worker.Config{
		ManagerURL:      w.c.workerManagerURLs(),
		TLSCAHash:       w.c.Manager().CAFingerprint(),
		Token:           w.token,
		DataDir:         w.Dir,
		Runtime:         cmp.Or(w.runtime, w.c.opts.Runtime),
		JobSocket:       w.c.opts.JobSocket,
		Logger:          w.c.opts.Logger.With("process", w.Name),
		ReregisterAfter: 500 * time.Millisecond,
		RegisterRetry:   500 * time.Millisecond,
	})
	if err != nil {
		w.c.t.Fatalf("start %s: %v", w.Name, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	run := &agentRun{done: make(chan struct{})}
	go func() {
		run.err = a.Run(ctx)
		close(run.done)
	}()
	select {
	case <-a.Ready():
	case <-run.done:
		cancel()
		w.c.t.Fatalf("%s stopped at start: %v", w.Name, run.err)
	case <-time.After(30 * time.Second):
		cancel()
		w.c.t.Fatalf("%s not ready after 30s", w.Name)
	}
	w.mu.Lock()
	w.agent, w.cancel, w.run = a, cancel, run
	w.mu.Unlock()
}

// agentRun is one run of a worker's agent: done is closed when Run has
// returned, and err is then what it returned. Any number of goroutines may
// wait on done.
type agentRun struct {
	done chan struct{}
	err  error
}

// Stop stops the worker's agent; its instances keep running.
func (w *Worker) Stop() error {
	w.mu.Lock()
	cancel, run := w.cancel, w.run
	w.agent, w.cancel, w.run = nil, nil, nil
	w.mu.Unlock()
	if cancel == nil {
		return nil
	}
	cancel()
	select {
	case <-run.done:
		if errors.Is(run.err, context.Canceled) {
			return nil
		}
		return run.err
	case <-time.After(30 * time.Second):
		return fmt.Errorf("%s did not stop within 30s", w.Name)
	}
}

// Restart stops and starts the worker.
func (w *Worker) Restart() {
	w.c.t.Helper()
	if err := w.Stop(); err != nil {
		w.c.t.Fatalf("stop %s: %v", w.Name, err)
	}
	w.Start()
}

// Agent returns the running agent (nil when stopped).
func (w *Worker) Agent() *worker.Agent {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.agent
}

// Exited waits up to timeout for the running agent to end by itself and
// returns what its Run returned; ok is false if it is still running (or
// was stopped). Waiting does not consume the result: Stop still sees it.
func (w *Worker) Exited(timeout time.Duration) (err error, ok bool) {
	w.mu.Lock()
	run := w.run
	w.mu.Unlock()
	if run == nil {
		return nil, false
	}
	select {
	case <-run.done:
		return run.err, true
	case <-time.After(timeout):
		return nil, false
	}
}

func (c *Cluster) shutdown() {
	c.healLinks()
	if !c.opts.KeepInstances && c.anyClient() != nil {
		c.removeInstances()
	}
	for _, w := range c.Workers {
		_ = w.Stop()
	}
	c.stopMockHosts()
	for _, m := range c.Members {
		m.Stop()
	}
	c.stopClouds()
	c.stopCHHosts()
	c.closeLinks()
	if !c.opts.KeepInstances && c.opts.Runtime == "process" {
		killLeftovers(c.Dir)
		for _, h := range c.Hosts {
			h.RemoveLeftovers() // a host closed to lose its node left its instances
		}
	}
}

// removeInstances deletes every job so workers stop their instances.
func (c *Cluster) removeInstances() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl := c.anyClient()
	jobs, err := cl.JobSearch(ctx, norsk.JobSearchSettings{})
	if err != nil {
		return
	}
	for _, j := range jobs {
		_ = cl.DeleteJob(ctx, j.GetJob().GetJobId())
	}
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		nodes, err := cl.ListNodes(ctx)
		if err != nil {
			return
		}
		busy := false
		for _, n := range nodes {
			if len(n.GetInstances()) > 0 && n.GetConnected() {
				busy = true
			}
		}
		if !busy {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestProg builds the runtime test program once per test binary and returns
// its path: a process-runtime command that can run, exit with a code,
// ignore SIGTERM and listen on a port (see runtimetest.Behaviour).
func TestProg(t testing.TB) string {
	t.Helper()
	testProgOnce.Do(func() {
		dir, err := os.MkdirTemp("", "norsk-testprog-")
		if err != nil {
			testProgErr = err
			return
		}
		testProgPath, testProgErr = runtimetest.BuildTestProg(context.Background(), dir)
	})
	if testProgErr != nil {
		t.Fatalf("build test program: %v", testProgErr)
	}
	return testProgPath
}

var (
	testProgOnce sync.Once
	testProgPath string
	testProgErr  error
)
