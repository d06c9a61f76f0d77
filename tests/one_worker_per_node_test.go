package tests

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"connectrpc.com/connect"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1/managerv1connect"
	"github.com/norsk-go/norsk-manager/internal/nodes"
	"github.com/norsk-go/norsk-manager/internal/runtime"
	"github.com/norsk-go/norsk-manager/internal/runtime/process"
	"github.com/norsk-go/norsk-manager/internal/runtime/runtimetest"
	"github.com/norsk-go/norsk-manager/internal/testcluster"
	"github.com/norsk-go/norsk-manager/internal/worker"
	"github.com/norsk-go/norsk-manager/pkg/apierr"
	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

// Issue 12, item 1, in process: the dev sequence that made jobs restart
// forever. Three workers run three resilient bundles; the Manager goes away
// (dev was killed) and comes back while its workers live on; the restarted
// dev starts a second worker over every worker's data directory; one worker
// is killed and started again. Every job keeps running exactly once, under
// the binding it had, never restarted: the second workers refuse to start
// (naming the pid that holds the directory), so no two processes take a
// node from each other in turns.
func TestDevKillScenarioEveryJobRunsOnce(t *testing.T) {
	t.Parallel()
	c := testcluster.New(t, testcluster.Options{Workers: 3, LostGrace: 30 * time.Second})
	base := startBundles(t, c, "b1", "b2", "b3")

	// dev was killed: its Manager is gone, its workers live on; the new dev
	// starts the Manager again on the same store.
	c.StopManager()
	c.StartManager()

	// The new dev starts a second worker over each worker's data directory.
	for _, w := range c.Workers {
		secondWorker(t, c, w.Dir, w.Name)
	}

	// One worker is killed (its instances live on) and started again.
	w := c.Workers[0]
	if err := w.Stop(); err != nil {
		t.Fatal(err)
	}
	w.Start()
	for _, w := range c.Workers {
		c.WaitNodeState(w.Name, norsk.NodeStateOnline)
	}

	// Long enough for many re-registration rounds (every 500 ms without a
	// stream here): nothing changes.
	cl, x := c.Client(), ctx(t)
	consistently(t, 5*time.Second, "every job running once under its binding", func() bool {
		return base.unchanged(t, c, cl, x)
	})
}

// Issue 12, item 1: the Manager accepts one live session per node
// identity. A second worker process with a copy of a node's identity (its
// own data directory) is refused while the first one's stream lives: it
// is never dialled, so the node and its instances stay with the first.
// Once the first is gone, the second takes the node over.
func TestSecondProcessOfANodeIsRefused(t *testing.T) {
	t.Parallel()
	c := testcluster.New(t, testcluster.Options{Workers: 2, LostGrace: 30 * time.Second})
	cl, x := c.Client(), ctx(t)
	if _, err := cl.CreateJob(x, progJob(t, "held", runtimetest.Behaviour{}, nil)); err != nil {
		t.Fatal(err)
	}
	first := c.Worker("worker-1")
	token, err := cl.StartJob(x, "held", "primary", first.Name, norsk.StartJobOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c.WaitPhase("held", "primary", norsk.InstancePhaseRunning)
	history := len(c.Job("held").GetHistory())
	addr := first.Agent().AdvertiseAddr()

	// A copy of the node's identity in a directory of its own.
	cloneDir := t.TempDir()
	b, err := os.ReadFile(filepath.Join(first.Dir, "identity.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cloneDir, "identity.json"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	clone, stopClone := runWorker(t, c, cloneDir, "clone")
	defer stopClone()
	t.Cleanup(func() { removeProcessInstances(first.Name, cloneDir) })

	consistently(t, 3*time.Second, "the node staying with its first worker", func() bool {
		n := nodeNamed(t, cl, x, first.Name)
		jh := c.Job("held")
		in := testcluster.Instance(jh, "primary")
		return n.GetAddress() == addr && n.GetState() == norsk.NodeStateOnline && !clone.Connected() &&
			in.GetPhase() == norsk.InstancePhaseRunning && in.GetFencingToken() == token && len(jh.GetHistory()) == history
	})

	// The first worker is gone: the second takes the node over.
	if err := first.Stop(); err != nil {
		t.Fatal(err)
	}
	c.Eventually("the second process holding the node", func() bool {
		n := nodeNamed(t, cl, x, first.Name)
		return n.GetAddress() == clone.AdvertiseAddr() && n.GetState() == norsk.NodeStateOnline && clone.Connected()
	})
}

// The same through a follower: only the primary knows which streams are
// live, so a follower passes the registration on and relays the refusal,
// with the header the worker acts on.
func TestSecondProcessOfANodeIsRefusedThroughAFollower(t *testing.T) {
	t.Parallel()
	c := testcluster.New(t, testcluster.Options{Members: 3, Workers: 1, LostGrace: 30 * time.Second})
	cl, x := c.Client(), ctx(t)
	first := c.Worker("worker-1")
	c.WaitNodeState(first.Name, norsk.NodeStateOnline)
	addr := first.Agent().AdvertiseAddr()
	primary := c.Primary()
	follower := others(c, primary)[0]

	cloneDir := t.TempDir()
	b, err := os.ReadFile(filepath.Join(first.Dir, "identity.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cloneDir, "identity.json"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	clone, stopClone := runWorkerWith(t, workerConfigAt(c, follower.URL(), cloneDir, "clone"))
	defer stopClone()
	consistently(t, 3*time.Second, "the node staying with its first worker", func() bool {
		n := nodeNamed(t, cl, x, first.Name)
		return n.GetAddress() == addr && n.GetState() == norsk.NodeStateOnline && !clone.Connected()
	})

	// The follower's answer is the primary's refusal, header included.
	id, err := worker.LoadIdentity(cloneDir)
	if err != nil || id == nil {
		t.Fatalf("identity: %v", err)
	}
	raw := managerv1connect.NewManagerClient(nodes.H2CClient(), follower.URL(), connect.WithGRPC())
	req := connect.NewRequest(&managerv1.ClusterMemberRegisterRequest{NodeSecret: id.NodeSecret, Address: "127.0.0.1:1", WorkerIncarnation: "another"})
	req.Header().Set("Authorization", "Bearer "+id.NodeSecret)
	_, err = raw.ClusterMemberRegister(x, req)
	var ce *connect.Error
	if !errors.As(err, &ce) || ce.Code() != connect.CodeAlreadyExists || ce.Meta().Get(apierr.RefusalHeader) != apierr.RefusalNodeHeldByLiveWorker {
		t.Fatalf("registration of another process through a follower: %v (meta %v), want ALREADY_EXISTS with %s: %s",
			err, metaOf(ce), apierr.RefusalHeader, apierr.RefusalNodeHeldByLiveWorker)
	}
	if n := nodeNamed(t, cl, x, first.Name); n.GetAddress() != addr {
		t.Fatalf("the refused registration changed the node's address to %s", n.GetAddress())
	}
}

func metaOf(ce *connect.Error) any {
	if ce == nil {
		return nil
	}
	return ce.Meta()
}

// bundleBase is what each instance of the started bundles ran as: its node,
// binding and process.
type bundleBase struct {
	insts   map[string]baseInstance // job/role
	history map[string]int          // job → history length
}

type baseInstance struct {
	jobID, role, node string
	token             uint64
	pid               int
}

// startBundles creates resilient bundles (a primary and a backup on
// different nodes each) and returns what runs once they all run.
func startBundles(t *testing.T, c *testcluster.Cluster, ids ...string) *bundleBase {
	t.Helper()
	cl, x := c.Client(), ctx(t)
	base := &bundleBase{insts: map[string]baseInstance{}, history: map[string]int{}}
	for _, id := range ids {
		if _, err := cl.CreateBundle(x, resilientBundle(t, id, runtimetest.Behaviour{})); err != nil {
			t.Fatalf("create bundle %s: %v", id, err)
		}
	}
	for _, id := range ids {
		for _, r := range []struct{ job, role string }{{id + ".channel.0", "primary"}, {id + ".channel.1", "backup"}} {
			in := running(c, r.job, r.role)
			pid := pidOf(t, c, in.GetNodeId(), r.job, r.role)
			if pid == 0 {
				t.Fatalf("%s/%s runs no process on %s", r.job, r.role, in.GetNodeId())
			}
			base.insts[r.job+"/"+r.role] = baseInstance{jobID: r.job, role: r.role, node: in.GetNodeId(), token: in.GetFencingToken(), pid: pid}
		}
	}
	// Histories once every instance runs (a job's entries settle then).
	for _, bi := range base.insts {
		base.history[bi.jobID] = len(c.Job(bi.jobID).GetHistory())
	}
	return base
}

// unchanged reports whether every instance still runs as it did, once,
// with nothing added to its job's history, and logs what changed.
func (b *bundleBase) unchanged(t *testing.T, c *testcluster.Cluster, cl *norsk.Manager, x context.Context) bool {
	t.Helper()
	running := runningCopies(t, c)
	for key, bi := range b.insts {
		jh, err := cl.JobById(x, bi.jobID)
		if err != nil {
			t.Logf("job %s: %v", bi.jobID, err)
			return false
		}
		in := testcluster.Instance(jh, bi.role)
		switch {
		case in == nil || in.GetPhase() != norsk.InstancePhaseRunning || in.GetNodeId() != bi.node || in.GetFencingToken() != bi.token:
			t.Logf("%s is %v, was running on %s under token %d", key, in, bi.node, bi.token)
			return false
		case in.GetRestarts() != 0:
			t.Logf("%s restarted %d times", key, in.GetRestarts())
			return false
		case len(jh.GetHistory()) != b.history[bi.jobID]:
			t.Logf("%s's history grew: %v", bi.jobID, historyKinds(jh))
			return false
		case len(running[key]) != 1 || running[key][0] != bi.pid:
			t.Logf("%s runs as %v, was pid %d (once)", key, running[key], bi.pid)
			return false
		}
	}
	return true
}

// runningCopies lists, per job/role, the running processes of every worker
// of the cluster, as their runtimes record them.
func runningCopies(t *testing.T, c *testcluster.Cluster) map[string][]int {
	t.Helper()
	out := map[string][]int{}
	for _, w := range c.Workers {
		rt, err := process.New(process.Config{NodeID: w.Name, ClusterID: worker.ClusterIDOf(w.Dir), Dir: filepath.Join(w.Dir, "process"), Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatalf("process runtime of %s: %v", w.Name, err)
		}
		sts, err := rt.List(context.Background())
		if err != nil {
			t.Fatalf("list %s: %v", w.Name, err)
		}
		for _, st := range sts {
			if st.Running {
				k := st.Key.JobID + "/" + st.Key.Role
				out[k] = append(out[k], st.PID)
			}
		}
	}
	return out
}

// secondWorker starts a second worker over dir (as a restarted dev did over
// a live worker's directory): it must refuse to start, naming this
// process's pid, which holds the directory. If it starts anyway, it runs
// until the test ends, so that the test sees what it does.
func secondWorker(t *testing.T, c *testcluster.Cluster, dir, name string) {
	t.Helper()
	a, err := worker.New(workerConfig(c, dir, name+"-second"))
	if err != nil {
		t.Fatal(err)
	}
	wctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(wctx) }()
	select {
	case err := <-done:
		stop()
		var inUse *worker.DataDirInUseError
		if !errors.As(err, &inUse) || inUse.PID != os.Getpid() {
			t.Errorf("a second worker over %s: %v, want a refusal naming pid %d", name, err, os.Getpid())
		}
	case <-a.Ready():
		t.Errorf("a second worker started over %s's data directory", name)
		t.Cleanup(func() { stop(); <-done })
	case <-time.After(30 * time.Second):
		stop()
		<-done
		t.Errorf("a second worker over %s neither started nor refused", name)
	}
}

// runWorker runs a worker over dir against the cluster until stop.
func runWorker(t *testing.T, c *testcluster.Cluster, dir, name string) (*worker.Agent, func()) {
	t.Helper()
	return runWorkerWith(t, workerConfig(c, dir, name))
}

// runWorkerWith runs a worker of cfg until stop.
func runWorkerWith(t *testing.T, cfg worker.Config) (*worker.Agent, func()) {
	t.Helper()
	name := filepath.Base(cfg.DataDir)
	a, err := worker.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(wctx) }()
	select {
	case <-a.Ready():
	case err := <-done:
		cancel()
		t.Fatalf("worker %s stopped at start: %v", name, err)
	case <-time.After(30 * time.Second):
		cancel()
		t.Fatalf("worker %s not ready", name)
	}
	stopped := false
	return a, func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		<-done
	}
}

// workerConfig is a process-runtime worker of the cluster over dir, as
// testcluster starts its own.
func workerConfig(c *testcluster.Cluster, dir, name string) worker.Config {
	return workerConfigAt(c, c.URL(), dir, name)
}

// workerConfigAt is workerConfig registering with the member at url.
func workerConfigAt(c *testcluster.Cluster, url, dir, name string) worker.Config {
	log := slog.New(slog.DiscardHandler)
	if os.Getenv("NORSK_TEST_LOG") == "1" {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})).With("process", name)
	}
	return worker.Config{
		ManagerURL:      url,
		TLSCAHash:       c.Manager().CAFingerprint(),
		DataDir:         dir,
		Runtime:         "process",
		Logger:          log,
		ReregisterAfter: 500 * time.Millisecond,
		RegisterRetry:   500 * time.Millisecond,
	}
}

// removeProcessInstances removes what a process-runtime worker over dir
// left running.
func removeProcessInstances(node, dir string) {
	rt, err := process.New(process.Config{NodeID: node, ClusterID: worker.ClusterIDOf(dir), Dir: filepath.Join(dir, "process"), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sts, _ := rt.List(ctx)
	seen := map[runtime.Key]bool{}
	for _, st := range sts {
		if !seen[st.Key] {
			seen[st.Key] = true
			_ = rt.Remove(ctx, st.Key)
		}
	}
}

// nodeNamed returns the node named name as ListNodes shows it.
func nodeNamed(t *testing.T, cl *norsk.Manager, x context.Context, name string) *norsk.Node {
	t.Helper()
	nodes, err := cl.ListNodes(x)
	if err != nil {
		t.Fatalf("ListNodes: %v", err)
	}
	for _, n := range nodes {
		if n.GetNodeName() == name {
			return n
		}
	}
	t.Fatalf("no node %s in %v", name, nodes)
	return nil
}
