package worker_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/internal/runtime"
	"github.com/norsk-go/norsk-manager/internal/runtime/process"
	"github.com/norsk-go/norsk-manager/internal/runtime/runtimetest"
	"github.com/norsk-go/norsk-manager/internal/worker"
	"github.com/norsk-go/norsk-manager/internal/worker/workertest"
)

// Issue 12, item 1: a second worker over a data directory another worker
// holds refuses to start, naming the holder's pid, and changes nothing;
// the first keeps its instances and its node. Once the first has stopped,
// a worker starts over the directory again.
func TestSecondWorkerOnDataDirIsRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := e.run(e.config())
	c, _ := e.dial(a, noHeartbeats)
	startRunning(t, c, job("keep", svc("main")), "primary", 3)
	pid := pidOf(t, e.dataDir, "keep", "main")

	if holder, held, err := worker.LockHolder(e.dataDir); err != nil || !held || holder != os.Getpid() {
		t.Fatalf("LockHolder = %d, %v, %v; want this process (%d) holding it", holder, held, err, os.Getpid())
	}
	cfg := e.config()
	cfg.Token = ""
	second := e.runNoWait(cfg)
	var err error
	select {
	case err = <-second.done:
		second.done <- err // for the cleanup
	case <-time.After(wait):
		t.Fatal("a second worker over the same data directory started")
	}
	var inUse *worker.DataDirInUseError
	if !errors.As(err, &inUse) || inUse.PID != os.Getpid() || inUse.Dir != e.dataDir {
		t.Fatalf("second worker's Run = %v, want a DataDirInUseError naming pid %d and %s", err, os.Getpid(), e.dataDir)
	}
	if !strings.Contains(err.Error(), "process "+strconv.Itoa(os.Getpid())) {
		t.Errorf("the refusal %q does not name the pid holding the directory", err)
	}
	if !alive(pid) || !a.Connected() {
		t.Fatalf("the first worker lost its instance (alive %v) or its stream (%v)", alive(pid), a.Connected())
	}
	if inv := a.Inventory(); len(inv) != 1 || inv[0].GetPhase() != phaseRunning {
		t.Fatalf("first worker's inventory: %v", inv)
	}

	c.Close()
	if err := a.stop(t); err != nil {
		t.Fatalf("first worker's Run: %v", err)
	}
	if _, held, err := worker.LockHolder(e.dataDir); err != nil || held {
		t.Fatalf("LockHolder after the first stopped = held %v, %v", held, err)
	}
	b := e.run(cfg)
	if got := inventoryFind(b.Inventory(), "keep", "primary"); got.GetPhase() != phaseRunning {
		t.Fatalf("the next worker did not adopt the instance: %v", b.Inventory())
	}
	if got := pidOf(t, e.dataDir, "keep", "main"); got != pid || !alive(pid) {
		t.Fatalf("pid %d (alive %v), want %d adopted", got, alive(pid), pid)
	}
}

// Issue 12, item 1: a worker whose node is held by another live process of
// the same identity (the Manager refuses it with node-held-by-live-worker)
// keeps asking without competing and without touching its instances, and
// registers as soon as the holder is gone.
func TestRegistrationRefusedWhileAnotherProcessHoldsTheNode(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := e.run(e.config())
	c, _ := e.dial(a, noHeartbeats)
	startRunning(t, c, job("held", svc("main")), "primary", 4)
	pid := pidOf(t, e.dataDir, "held", "main")
	c.Close()
	if err := a.stop(t); err != nil {
		t.Fatal(err)
	}

	e.mgr.HoldNode(e.nodeID, "someone-else")
	before := len(e.mgr.Registrations())
	cfg := e.config()
	cfg.Token = ""
	cfg.RegisterRetry = 50 * time.Millisecond
	b := e.run(cfg)
	if b.Incarnation() == a.Incarnation() || b.Incarnation() == "" {
		t.Fatalf("incarnations %q then %q: want a new one per process", a.Incarnation(), b.Incarnation())
	}
	runtimetest.Eventually(t, wait, "refused registrations", func() bool { return e.mgr.RefusedHeld() >= 3 })
	if n := len(e.mgr.Registrations()); n != before {
		t.Fatalf("%d registrations accepted while the node was held", n-before)
	}
	select {
	case err := <-b.done:
		t.Fatalf("the refused worker's Run returned: %v", err)
	default:
	}
	if !alive(pid) {
		t.Fatal("the refused worker's instance was stopped")
	}

	e.mgr.ReleaseNode(e.nodeID)
	runtimetest.Eventually(t, wait, "registered once the node is free", func() bool { return len(e.mgr.Registrations()) > before })
	last := e.mgr.Registrations()[len(e.mgr.Registrations())-1]
	if got := last.Request.GetWorkerIncarnation(); got != b.Incarnation() {
		t.Errorf("registration's incarnation = %q, want %q", got, b.Incarnation())
	}
	if !alive(pid) {
		t.Fatal("the instance was stopped")
	}
}

// Issue 12, item 2: a worker learns its cluster id at registration, keeps
// it, and refuses a Control stream from a Manager of another cluster.
func TestHelloFromAnotherClusterIsRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := e.run(e.config())
	if got := a.ClusterID(); got != e.mgr.ClusterID {
		t.Fatalf("ClusterID = %q, want the Manager's %q", got, e.mgr.ClusterID)
	}
	if got := worker.ClusterIDOf(e.dataDir); got != e.mgr.ClusterID {
		t.Fatalf("identity's cluster id = %q, want %q", got, e.mgr.ClusterID)
	}
	other := workertest.Dial(t.Context(), a.Addr(), e.secret())
	t.Cleanup(other.Close)
	other.ClusterID = "0ther0000000000000000000000000000"
	if _, err := other.Hello(e.nodeID, noHeartbeats, wait); connect.CodeOf(err) != connect.CodeFailedPrecondition {
		t.Fatalf("hello from another cluster: %v, want FAILED_PRECONDITION", err)
	}
	same := workertest.Dial(t.Context(), a.Addr(), e.secret())
	t.Cleanup(same.Close)
	same.ClusterID = e.mgr.ClusterID
	if _, err := same.Hello(e.nodeID, noHeartbeats, wait); err != nil {
		t.Fatalf("hello from its own cluster: %v", err)
	}
}

// Issue 12, item 2: services of the worker's node that carry no cluster id
// (made before cluster ids, by this node or by another Manager's node of
// the same name) and that no record names are left running, untouched, and
// the Manager is told so.
func TestUnlabelledOrphanIsKeptAndNoted(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	legacy, err := process.New(process.Config{NodeID: e.nodeID, Dir: filepath.Join(e.dataDir, "process"), Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	key := runtime.Key{JobID: "old", Role: "primary"}
	if err := legacy.Prepare(ctx, runtime.InstanceSpec{Key: key, NodeID: e.nodeID, Token: 9, Job: job("old", svc("main"))}); err != nil {
		t.Fatal(err)
	}
	if _, err := legacy.StartService(ctx, key, "main"); err != nil {
		t.Fatal(err)
	}
	pid := pidOf(t, e.dataDir, "old", "main")
	t.Cleanup(func() { _ = legacy.Remove(context.Background(), key) })

	a := e.run(e.config())
	c, _ := e.dial(a, noHeartbeats)
	n, err := c.AwaitNotice(wait, "kept-unlabelled", "old")
	if err != nil {
		t.Fatal(err)
	}
	if n.GetFencingToken() != 9 || !strings.Contains(n.GetMessage(), "main") {
		t.Errorf("notice = %v, want token 9 naming service main", n)
	}
	if !alive(pid) {
		t.Fatal("the unlabelled orphan was stopped")
	}
	if inv := a.Inventory(); len(inv) != 0 {
		t.Fatalf("inventory: %v", inv)
	}
}

// Issue 12, item 2 (upgrade): a worker whose instances were made before
// cluster ids adopts them as they run (nothing restarted), says so once in
// a notice for the job's history, and learns its cluster id from the
// Manager; what it creates afterwards is labelled with it.
func TestUnlabelledServicesAreAdoptedAndNoted(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cluster := e.mgr.ClusterID
	e.mgr.ClusterID = "" // a Manager from before cluster ids
	a := e.run(e.config())
	c, _ := e.dial(a, noHeartbeats)
	startRunning(t, c, job("up", svc("main")), "primary", 2)
	pid := pidOf(t, e.dataDir, "up", "main")
	c.Close()
	if err := a.stop(t); err != nil {
		t.Fatal(err)
	}
	if got := worker.ClusterIDOf(e.dataDir); got != "" {
		t.Fatalf("cluster id %q from a Manager that has none", got)
	}

	e.mgr.ClusterID = cluster // the Manager upgraded
	cfg := e.config()
	cfg.Token = ""
	b := e.run(cfg)
	c = workertest.Dial(t.Context(), b.Addr(), e.secret())
	t.Cleanup(c.Close)
	c.ClusterID = cluster
	hello, err := c.Hello(e.nodeID, noHeartbeats, wait)
	if err != nil {
		t.Fatal(err)
	}
	if got := inventoryFind(hello.GetInventory(), "up", "primary"); got.GetPhase() != phaseRunning {
		t.Fatalf("inventory: %v", hello.GetInventory())
	}
	n, err := c.AwaitNotice(wait, "adopted-unlabelled", "up")
	if err != nil {
		t.Fatal(err)
	}
	if n.GetFencingToken() != 2 || !strings.Contains(n.GetMessage(), "main") {
		t.Errorf("notice = %v", n)
	}
	if got := pidOf(t, e.dataDir, "up", "main"); got != pid || !alive(pid) {
		t.Fatalf("pid %d (alive %v), want %d adopted", got, alive(pid), pid)
	}
	if got := worker.ClusterIDOf(e.dataDir); got != cluster {
		t.Fatalf("identity's cluster id = %q, want %q", got, cluster)
	}

	// A new instance carries the cluster id.
	seq := send(t, c, startMsg(job("new", svc("main")), "primary", 3))
	if _, err := c.Await(wait, func(m *managerv1.WorkerMessage) bool { return m.GetAck().GetSeq() == seq }); err != nil {
		t.Fatal(err)
	}
	rt, err := process.New(process.Config{NodeID: e.nodeID, ClusterID: cluster, Dir: filepath.Join(e.dataDir, "process"), Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	sts, err := rt.List(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{}
	for _, st := range sts {
		labels[st.Key.JobID] = st.ClusterID
	}
	if labels["up"] != "" || labels["new"] != cluster {
		t.Errorf("cluster labels %v: want up unlabelled (made before) and new labelled %s", labels, cluster)
	}

	// Once noted, not again: a restart adopts without a notice.
	c.Close()
	if err := b.stop(t); err != nil {
		t.Fatal(err)
	}
	d := e.run(cfg)
	c2, _ := e.dial(d, noHeartbeats)
	// The instance's actor answers a command only once it has adopted the
	// instance, and any notice of that adoption goes before the answer.
	seq = send(t, c2, startMsg(job("up", svc("main")), "primary", 2))
	if _, err := c2.Await(wait, func(m *managerv1.WorkerMessage) bool { return m.GetAck().GetSeq() == seq }); err != nil {
		t.Fatal(err)
	}
	if ns := c2.Notices(); len(ns) != 0 {
		t.Errorf("notices after the next restart: %v", ns)
	}
	if got := pidOf(t, e.dataDir, "up", "main"); got != pid || !alive(pid) {
		t.Fatalf("pid %d (alive %v), want %d still adopted", got, alive(pid), pid)
	}
}

// Issue 12, item 2: services a record names that are gone when the worker
// takes the instance over (removed behind its back) are created again, and
// the job's history is told — a silent "running, adopted" hid an outage.
func TestMissingServicesAreRecreatedAndNoted(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := e.run(e.config())
	c, _ := e.dial(a, noHeartbeats)
	startRunning(t, c, job("gone", svc("main")), "primary", 6)
	pid := pidOf(t, e.dataDir, "gone", "main")
	c.Close()
	if err := a.stop(t); err != nil {
		t.Fatal(err)
	}
	rt, err := process.New(process.Config{NodeID: e.nodeID, ClusterID: e.mgr.ClusterID, Dir: filepath.Join(e.dataDir, "process"), Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.Remove(t.Context(), runtime.Key{JobID: "gone", Role: "primary"}); err != nil {
		t.Fatal(err)
	}
	waitDead(t, pid)

	cfg := e.config()
	cfg.Token = ""
	b := e.run(cfg)
	c, _ = e.dial(b, noHeartbeats)
	n, err := c.AwaitNotice(wait, "recreated-missing", "gone")
	if err != nil {
		t.Fatal(err)
	}
	if n.GetFencingToken() != 6 || !strings.Contains(n.GetMessage(), "main") {
		t.Errorf("notice = %v", n)
	}
	runtimetest.Eventually(t, wait, "the service runs again", func() bool {
		p := sharedPID(t, rt, "gone")
		return p != 0 && p != pid && alive(p)
	})
}

// Issue 12, item 2: two workers of two clusters (two Managers) with a node
// of the same name over one process runtime directory — the process
// runtime's equivalent of one Docker engine — never touch each other's
// instances: a worker that starts with no records does not take the other
// cluster's services for orphans, and each adopts its own.
func TestClustersSharingARuntimeNeverTouchEachOther(t *testing.T) {
	t.Parallel()
	shared := t.TempDir()
	e1, e2 := newEnv(t), newEnv(t)
	e2.nodeID = e1.nodeID // the same node name in both clusters
	e2.token = e2.mgr.AddToken(e2.nodeID)
	rtOf := func(e *env) *process.Runtime {
		rt, err := process.New(process.Config{NodeID: e.nodeID, Dir: shared, Logger: testLogger()})
		if err != nil {
			t.Fatal(err)
		}
		return rt
	}
	config := func(e *env, rt *process.Runtime) worker.Config {
		cfg := e.config()
		cfg.Runtime = ""
		cfg.RuntimeImpl = rt
		return cfg
	}
	rt1 := rtOf(e1)
	a1 := e1.run(config(e1, rt1))
	c1, _ := e1.dial(a1, noHeartbeats)
	startRunning(t, c1, job("one", svc("main")), "primary", 5)
	c1.Close()
	if err := a1.stop(t); err != nil { // the first Manager's worker stops; its instance runs on
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt1.Remove(context.Background(), runtime.Key{JobID: "one", Role: "primary"}) })

	rt2 := rtOf(e2)
	a2 := e2.run(config(e2, rt2))
	c2, _ := e2.dial(a2, noHeartbeats)
	startRunning(t, c2, job("two", svc("main")), "primary", 5)
	t.Cleanup(func() { _ = rt2.Remove(context.Background(), runtime.Key{JobID: "two", Role: "primary"}) })
	if ns := c2.Notices(); len(ns) != 0 {
		t.Errorf("the second cluster's worker noted %v", ns)
	}
	one := sharedPID(t, rt1, "one")
	if one == 0 || !alive(one) {
		t.Fatalf("the second cluster's worker stopped the first's instance (pid %d)", one)
	}

	// The first cluster's worker comes back and adopts its own, running.
	cfg := config(e1, rtOf(e1))
	cfg.Token = ""
	b1 := e1.run(cfg)
	if got := inventoryFind(b1.Inventory(), "one", "primary"); got.GetPhase() != phaseRunning {
		t.Fatalf("first worker's inventory: %v", b1.Inventory())
	}
	if inv := b1.Inventory(); len(inv) != 1 {
		t.Fatalf("first worker holds %v, want only its own", inv)
	}
	if got := sharedPID(t, rt1, "one"); got != one || !alive(one) {
		t.Fatalf("first instance pid %d (alive %v), want %d running on", got, alive(one), one)
	}
	if two := sharedPID(t, rt2, "two"); two == 0 || !alive(two) {
		t.Fatalf("the second cluster's instance is gone (pid %d)", two)
	}
}

// sharedPID is the running pid of job's service main as rt lists it (0 if
// none).
func sharedPID(t *testing.T, rt *process.Runtime, jobID string) int {
	t.Helper()
	sts, err := rt.List(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range sts {
		if st.Key.JobID == jobID && st.Running {
			return st.PID
		}
	}
	return 0
}
