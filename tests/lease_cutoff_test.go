package tests

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/internal/manager"
	"github.com/norsk-go/norsk-manager/internal/runtime/process"
	"github.com/norsk-go/norsk-manager/internal/testcluster"
	workerpkg "github.com/norsk-go/norsk-manager/internal/worker"
	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

// The settings of the lease tests: a lease of 30 heartbeats, a node lost
// after a third of it. A cut-off worker then fences at 2 s (two thirds of
// the TTL after its last granted heartbeat), its node is lost at 1 s and
// its lease runs out at 3 s.
const (
	cutoffLeaseTTL  = 3 * time.Second
	cutoffLostGrace = time.Second
)

// A worker cut off from every Manager member — both ways, its agent and
// its job's process left running — stops its lease-protected job by
// itself, and the job never runs twice:
//
//  1. the cut-off worker stops the instance while it is still cut off
//     (self-fencing: the process is gone, and the worker's own report says
//     the lease expired), and before the Manager's view of the lease runs
//     out;
//  2. the AutoManager starts the job on the other worker only once that
//     lease has expired (GetLeaseStatus against the new binding's history
//     entry), after the node was lost;
//  3. the two copies never overlap: each copy writes a heartbeat file of
//     its own (the process's own evidence), and both workers' runtimes are
//     sampled throughout;
//  4. once the cut heals, the worker reconnects, its stopped copy is
//     recorded and forgotten, and nothing runs on it again.
//
// Both ways a network fails are covered: connections refused (each side
// notices at once) and a silent cut (nothing closes; each side notices by
// its own timeouts — the worker's stream even looks up to it).
func TestLeaseCutoffWorkerFencesAndJobNeverRunsTwice(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		mode testcluster.CutMode
	}{
		{"refused", testcluster.CutRefuse},
		{"silent", testcluster.CutSilent},
	} {
		t.Run(tc.name, func(t *testing.T) { testLeaseCutoff(t, tc.mode) })
	}
}

func testLeaseCutoff(t *testing.T, mode testcluster.CutMode) {
	c := testcluster.New(t, testcluster.Options{
		Workers:       2,
		WorkerLinks:   true,
		LostGrace:     cutoffLostGrace,
		ManagerConfig: func(cfg *manager.Config) { cfg.LeaseTTL = cutoffLeaseTTL },
	})
	cl, x := c.Client(), ctx(t)
	beats := t.TempDir()
	const jobID, role = "live.channel.0", "primary"
	if _, err := cl.CreateBundle(x, leaseBundle("live", beats)); err != nil {
		t.Fatal(err)
	}
	first := running(c, jobID, role)
	if !c.Job(jobID).GetJob().GetLeaseProtected() {
		t.Fatal("the bundle's job is not lease-protected")
	}
	nodeA, nodeB := first.GetNodeId(), otherWorker(c, first.GetNodeId())
	a, b := c.Worker(nodeA), c.Worker(nodeB)
	pidA := pidOf(t, c, nodeA, jobID, role)
	if pidA == 0 {
		t.Fatalf("no process of %s on %s", jobID, nodeA)
	}
	c.Eventually("the first copy to beat", func() bool { return len(readCopies(t, c, beats)) == 1 })
	c.Eventually("the lease of "+nodeA+" to be refreshed", func() bool {
		l := leaseOf(x, cl, jobID, role)
		return l != nil && l.GetNodeId() == nodeA && !l.GetExpired()
	})

	s := startCopySampler(t, cl, jobID, role, a, b)
	cutAt := time.Now()
	a.Link().Cut(mode)
	c.WaitNodeState(nodeA, norsk.NodeStateLost)

	// 1. The cut-off worker stops its copy itself, still cut off.
	c.Eventually("the cut-off worker to stop its copy (pid "+strconv.Itoa(pidA)+")", func() bool { return processGone(pidA) })
	c.Eventually("the cut-off worker to hold its copy stopped", func() bool {
		return inventoryReport(a, jobID, role).GetPhase() == norsk.InstancePhaseStopped
	})
	if a.Link().Mode() != mode {
		t.Fatal("the link healed under the test")
	}
	if r := inventoryReport(a, jobID, role); r == nil || r.GetPhase() != norsk.InstancePhaseStopped ||
		r.GetReason() != norsk.StoppingReasonNodeStopped || !strings.Contains(r.GetAdditionalReason(), "lease expired") {
		t.Fatalf("the cut-off worker's own report of its copy = %v, want stopped(nodeStopped, lease expired)", r)
	}

	// 2. The job runs again on the other worker.
	jh := waitMoved(t, c, cl, jobID, role, nodeB)
	moved := testcluster.Instance(jh, role)
	c.Eventually("the new copy to beat", func() bool { return len(readCopies(t, c, beats)) == 2 })
	samples := s.stop()

	lease := samples.leaseAfter(cutAt, nodeA, first.GetFencingToken())
	if lease == nil {
		t.Fatalf("GetLeaseStatus never showed %s's lease after the cut", nodeA)
	}
	expiresAt := lease.GetExpiresAt().AsTime()
	// The cut-off worker never refreshed its lease through the cut: a beat
	// already in flight when the link fell may still land (stamped just
	// after cutAt), but no second one can, where a live link refreshes it
	// on every beat (the sampler asks several times a beat).
	if after := samples.refreshesAfter(cutAt, nodeA, first.GetFencingToken()); len(after) > 1 {
		t.Errorf("%s's lease was refreshed %d times after the cut at %s (%s): the cut did not hold", nodeA, len(after), stamp(cutAt), after)
	}
	lostAt := entryTime(jh, func(e *norsk.JobHistoryEntry) bool {
		st := e.GetStopping()
		return st != nil && st.GetInstance().GetFencingToken() == first.GetFencingToken() && st.GetReason() == norsk.StoppingReasonNodeStopped
	})
	startedAt := entryTime(jh, func(e *norsk.JobHistoryEntry) bool {
		p := e.GetProvisioned()
		return p != nil && p.GetInstance().GetFencingToken() == moved.GetFencingToken()
	})
	if pl := moved.GetPlacement(); pl.GetKind() != "recovery" || pl.GetFailedNodeId() != nodeA {
		t.Errorf("the new binding's placement = %v, want a recovery from %s", pl, nodeA)
	}

	copies := readCopies(t, c, beats)
	oldCopy, newCopy := copies[0], copies[1]
	if oldCopy.node != nodeA || newCopy.node != nodeB {
		t.Fatalf("copies = %v, want one on %s then one on %s", copies, nodeA, nodeB)
	}
	// Ordering, all on the host's one clock: the cut, the old copy's last
	// beat, its lease's expiry in the Manager's view, the new binding, the
	// new copy's first beat.
	for _, o := range []struct {
		what        string
		early, late time.Time
	}{
		{"the cut-off copy beat on after the cut (nothing but the lease stopped it)", cutAt, oldCopy.last},
		{"the cut-off copy stopped before the Manager's view of its lease ran out", oldCopy.last, expiresAt},
		{"the node was lost after the cut", cutAt, lostAt},
		{"the job was started elsewhere after its node was lost", lostAt, startedAt},
		{"the job was started elsewhere only once the lease had expired", expiresAt, startedAt},
		{"the new copy began after its binding", startedAt, newCopy.first},
	} {
		if o.late.Before(o.early) {
			t.Errorf("%s: %s is after %s", o.what, stamp(o.early), stamp(o.late))
		}
	}
	t.Logf("%s cut: cut %s, old copy's last beat +%s, node lost +%s, lease expired +%s, started elsewhere +%s, new copy's first beat +%s",
		mode, stamp(cutAt), oldCopy.last.Sub(cutAt).Round(time.Millisecond), lostAt.Sub(cutAt).Round(time.Millisecond),
		expiresAt.Sub(cutAt).Round(time.Millisecond), startedAt.Sub(cutAt).Round(time.Millisecond), newCopy.first.Sub(cutAt).Round(time.Millisecond))

	// 3. Never two copies at once.
	checkNoOverlap(t, copies)
	if both := samples.both; len(both) > 0 {
		t.Errorf("%d sample(s) saw the job running on both workers, the first at %s: %v", len(both), stamp(both[0].at), both[0])
	}
	if samples.n == 0 {
		t.Error("the sampler took no sample")
	}

	// 4. Healed: the worker comes back and runs nothing.
	a.Link().Heal()
	c.Eventually(nodeA+" to reconnect", func() bool {
		n := c.Node(nodeA)
		return n.GetState() == norsk.NodeStateOnline && n.GetConnected()
	})
	c.Eventually(nodeA+"'s stopped copy to be recorded (and forgotten by the worker)", func() bool {
		return inventoryReport(a, jobID, role) == nil
	})
	// Watch the reconnected worker for a while: ten Manager heartbeats and
	// several AutoManager passes. Nothing may run there, and the job stays
	// where it moved, untouched.
	for end := time.Now().Add(10 * 100 * time.Millisecond); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if pid := pidOf(t, c, nodeA, jobID, role); pid != 0 {
			t.Fatalf("%s started its copy again after the cut healed (pid %d)", nodeA, pid)
		}
	}
	if in := testcluster.Instance(c.Job(jobID), role); in.GetNodeId() != nodeB || in.GetFencingToken() != moved.GetFencingToken() || in.GetPhase() != norsk.InstancePhaseRunning {
		t.Errorf("after the heal the job's instance is %v, want it running on %s under token %d", in, nodeB, moved.GetFencingToken())
	}
	copies = readCopies(t, c, beats)
	if len(copies) != 2 {
		t.Errorf("after the heal: copies = %v, want the two", copies)
	}
	checkNoOverlap(t, copies)
}

// waitMoved waits until (jobID, role) runs on node, failing the test with
// what the Manager shows (the instance, its lease, the nodes) if it does
// not within testcluster.WaitTimeout.
func waitMoved(t *testing.T, c *testcluster.Cluster, cl *norsk.Manager, jobID, role, node string) *norsk.JobWithHistory {
	t.Helper()
	x := ctx(t)
	for deadline := time.Now().Add(testcluster.WaitTimeout); ; time.Sleep(20 * time.Millisecond) {
		jh, err := cl.JobById(x, jobID)
		if err == nil {
			if in := testcluster.Instance(jh, role); in.GetNodeId() == node && in.GetPhase() == norsk.InstancePhaseRunning {
				return jh
			}
		}
		if time.Now().After(deadline) {
			var nodes []string
			if ns, err := cl.ListNodes(x); err == nil {
				for _, n := range ns {
					nodes = append(nodes, fmt.Sprintf("%s %v connected=%v", n.GetNodeId(), n.GetState(), n.GetConnected()))
				}
			}
			t.Fatalf("after %s %s/%s is still not running on %s (%v)\ninstance: %v\nlease: %v\nnodes: %v",
				testcluster.WaitTimeout, jobID, role, node, err, testcluster.Instance(jh, role), leaseOf(x, cl, jobID, role), nodes)
		}
	}
}

// leaseBundle is a bundle of one lease-protected job, one replica, whose
// service writes a heartbeat file of its own into dir: its first line the
// directory it runs in (the instance's, which names its node), then its
// wall-clock time in nanoseconds every 50 ms.
func leaseBundle(id, dir string) *norsk.Bundle {
	const script = `f="$BEATS/$$"; pwd > "$f"; while :; do date +%s%N >> "$f"; sleep 0.05; done`
	return &norsk.Bundle{
		BundleId: id,
		Jobs: []*norsk.BundleJobSpec{{
			JobName:      "channel",
			Requirements: &norsk.JobRequirements{RequiredCapacity: 0.25},
			Job: &norsk.Job{
				LeaseProtected: true,
				Services: []*norsk.Service{{
					Name:    "main",
					Command: []string{"/bin/sh", "-c", script},
					Env:     map[string]string{"BEATS": dir},
				}},
			},
		}},
	}
}

// otherWorker is the worker that is not name (a two-worker cluster).
func otherWorker(c *testcluster.Cluster, name string) string {
	for _, w := range c.Workers {
		if w.Name != name {
			return w.Name
		}
	}
	return ""
}

// leaseOf is the lease of (jobID, role) in GetLeaseStatus (nil if none or
// the call failed).
func leaseOf(ctx context.Context, cl *norsk.Manager, jobID, role string) *norsk.Lease {
	ls, err := cl.GetLeaseStatus(ctx)
	if err != nil {
		return nil
	}
	for _, l := range ls.GetLeases() {
		if l.GetJobId() == jobID && l.GetRole() == role {
			return l
		}
	}
	return nil
}

// inventoryReport is what the worker itself holds of (jobID, role): its
// report, tombstones included (nil if nothing).
func inventoryReport(w *testcluster.Worker, jobID, role string) *managerv1.InstanceReport {
	a := w.Agent()
	if a == nil {
		return nil
	}
	for _, r := range a.Inventory() {
		if r.GetJobId() == jobID && r.GetRole() == role {
			return r
		}
	}
	return nil
}

// processGone reports whether pid has exited and been reaped.
func processGone(pid int) bool {
	return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}

// entryTime is the time of the newest history entry that match holds of
// (zero if none).
func entryTime(jh *norsk.JobWithHistory, match func(*norsk.JobHistoryEntry) bool) time.Time {
	for _, e := range jh.GetHistory() {
		if match(e) {
			return e.GetTimestamp().AsTime()
		}
	}
	return time.Time{}
}

func stamp(t time.Time) string { return t.Format("15:04:05.000") }

// jobCopy is one copy of the job as its heartbeat file tells: the node it
// ran on and its first and last beats.
type jobCopy struct {
	file        string
	node        string
	first, last time.Time
	beats       int
}

func (c jobCopy) String() string {
	return fmt.Sprintf("%s on %s: %s … %s (%d beats)", c.file, c.node, stamp(c.first), stamp(c.last), c.beats)
}

// readCopies reads every heartbeat file in dir, oldest copy first; a file
// with no beat yet is left out.
func readCopies(t *testing.T, c *testcluster.Cluster, dir string) []jobCopy {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []jobCopy
	for _, e := range entries {
		f, err := os.Open(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		cp := jobCopy{file: e.Name()}
		sc := bufio.NewScanner(f)
		for line := 0; sc.Scan(); line++ {
			if line == 0 {
				for _, w := range c.Workers {
					if strings.HasPrefix(sc.Text(), w.Dir+string(filepath.Separator)) {
						cp.node = w.Name
					}
				}
				continue
			}
			ns, err := strconv.ParseInt(sc.Text(), 10, 64)
			if err != nil {
				continue // a line being written
			}
			at := time.Unix(0, ns)
			if cp.beats == 0 {
				cp.first = at
			}
			cp.last = at
			cp.beats++
		}
		_ = f.Close()
		if cp.beats > 0 {
			out = append(out, cp)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].first.Before(out[j].first) })
	return out
}

// checkNoOverlap fails the test if two copies' lives overlap.
func checkNoOverlap(t *testing.T, copies []jobCopy) {
	t.Helper()
	for i := 1; i < len(copies); i++ {
		if !copies[i-1].last.Before(copies[i].first) {
			t.Errorf("two copies ran at once: %v and %v", copies[i-1], copies[i])
		}
	}
}

// copySampler watches, every 20 ms until stopped, which of two workers'
// runtimes runs the job and what GetLeaseStatus says of its lease.
type copySampler struct {
	cancel context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex
	res    samples
}

type samples struct {
	n      int
	both   []bothSample
	leases []leaseSample
	errs   []error
}

// bothSample is a sample that found the job running on both workers.
type bothSample struct {
	at         time.Time
	pidA, pidB int
}

type leaseSample struct {
	asked time.Time // when the call was made
	lease *norsk.Lease
}

// leaseAfter is the newest lease of node under token that GetLeaseStatus
// showed in a call made after t (nil if none).
func (s samples) leaseAfter(t time.Time, node string, token uint64) *norsk.Lease {
	var out *norsk.Lease
	for _, l := range s.leases {
		if l.asked.After(t) && l.lease.GetNodeId() == node && l.lease.GetFencingToken() == token {
			out = l.lease
		}
	}
	return out
}

// refreshesAfter lists the distinct refresh times of node's lease (of
// token) stamped after t.
func (s samples) refreshesAfter(t time.Time, node string, token uint64) []string {
	seen := map[time.Time]bool{}
	var out []string
	for _, l := range s.leases {
		at := l.lease.GetRefreshedAt().AsTime()
		if l.lease.GetNodeId() == node && l.lease.GetFencingToken() == token && at.After(t) && !seen[at] {
			seen[at] = true
			out = append(out, stamp(at))
		}
	}
	return out
}

func startCopySampler(t *testing.T, cl *norsk.Manager, jobID, role string, a, b *testcluster.Worker) *copySampler {
	t.Helper()
	rt := func(w *testcluster.Worker) *process.Runtime {
		r, err := process.New(process.Config{NodeID: w.Name, ClusterID: workerpkg.ClusterIDOf(w.Dir), Dir: filepath.Join(w.Dir, "process"), Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatalf("process runtime of %s: %v", w.Name, err)
		}
		return r
	}
	rtA, rtB := rt(a), rt(b)
	ctx, cancel := context.WithCancel(context.Background())
	s := &copySampler{cancel: cancel, done: make(chan struct{})}
	pid := func(r *process.Runtime) (int, error) {
		services, err := r.List(ctx)
		if err != nil {
			return 0, err
		}
		for _, sv := range services {
			if sv.Key.JobID == jobID && sv.Key.Role == role && sv.Running {
				return sv.PID, nil
			}
		}
		return 0, nil
	}
	go func() {
		defer close(s.done)
		for i := 0; ctx.Err() == nil; i++ {
			at := time.Now()
			pa, errA := pid(rtA)
			pb, errB := pid(rtB)
			var lease *norsk.Lease
			if i%2 == 0 {
				lease = leaseOf(ctx, cl, jobID, role)
			}
			s.mu.Lock()
			if err := errors.Join(errA, errB); err != nil && ctx.Err() == nil {
				s.res.errs = append(s.res.errs, err)
			}
			s.res.n++
			if pa != 0 && pb != 0 && !processGone(pa) {
				s.res.both = append(s.res.both, bothSample{at: at, pidA: pa, pidB: pb})
			}
			if lease != nil {
				s.res.leases = append(s.res.leases, leaseSample{asked: at, lease: lease})
			}
			s.mu.Unlock()
			select {
			case <-ctx.Done():
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(func() { s.stop() })
	return s
}

// stop ends the sampling and returns what it saw.
func (s *copySampler) stop() samples {
	s.cancel()
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.res
}
