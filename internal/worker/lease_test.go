package worker_test

import (
	"strings"
	"testing"
	"time"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/internal/clock"
	"github.com/norsk-go/norsk-manager/internal/runtime/runtimetest"
	"github.com/norsk-go/norsk-manager/internal/worker/workertest"
)

const (
	leaseTTL      = 15 * time.Second
	reasonStopped = managerv1.StoppingReason_STOPPING_REASON_NODE_STOPPED
)

func protectedJob(id string, services ...*managerv1.Service) *managerv1.Job {
	j := job(id, services...)
	j.LeaseProtected = true
	return j
}

// leaseEnv runs an agent on a fake clock with the default lease TTL and
// opens a stream to it with the heartbeat interval hbMs; it returns the
// stream's first heartbeat (the one sent right after the hello).
func leaseEnv(t *testing.T, hbMs uint32) (*env, *clock.Fake, *agent, *workertest.Controller, *managerv1.Heartbeat) {
	t.Helper()
	e := newEnv(t)
	fc := clock.NewFake(time.Now())
	cfg := e.config()
	cfg.Clock = fc
	cfg.LeaseTTL = leaseTTL
	a := e.run(cfg)
	c, _ := e.dial(a, hbMs)
	return e, fc, a, c, nextHeartbeat(t, c)
}

func nextHeartbeat(t *testing.T, c *workertest.Controller) *managerv1.Heartbeat {
	t.Helper()
	m, err := c.Await(wait, func(m *managerv1.WorkerMessage) bool { return m.GetHeartbeat() != nil })
	if err != nil {
		t.Fatalf("waiting for a heartbeat: %v", err)
	}
	if m.GetHeartbeat().GetSentMonoMs() == 0 {
		t.Fatalf("a heartbeat without its send time: %v", m)
	}
	return m.GetHeartbeat()
}

// grant answers the heartbeat sent at mono as the Manager does, and waits
// until the fencing loop has looked at the new lease.
func grant(t *testing.T, a *agent, c *workertest.Controller, mono uint64, paused bool) {
	t.Helper()
	before := a.FenceChecks()
	send(t, c, &managerv1.ControllerMessage{Msg: &managerv1.ControllerMessage_Lease{Lease: &managerv1.LeaseGrant{
		HeartbeatMonoMs: mono, TtlMs: leaseTTL.Milliseconds(), Paused: paused,
	}}})
	runtimetest.Eventually(t, wait, "the fencing loop sees the grant", func() bool { return a.FenceChecks() > before })
}

// expectFenced reads the STOPPING and STOPPED reports of a fenced instance.
func expectFenced(t *testing.T, c *workertest.Controller, jobID, why string) {
	t.Helper()
	r := expectReport(t, c, phaseStopping)
	if r.GetJobId() != jobID || r.GetReason() != reasonStopped || !strings.Contains(r.GetAdditionalReason(), why) {
		t.Fatalf("STOPPING: %v, want %s stopped (node stopped) with %q", r, jobID, why)
	}
	r = expectReport(t, c, phaseStopped)
	if r.GetJobId() != jobID || r.GetReason() != reasonStopped || !strings.Contains(r.GetAdditionalReason(), why) {
		t.Fatalf("STOPPED: %v", r)
	}
}

// expectQuiet checks that the worker sends nothing but heartbeats for a
// moment.
func expectQuiet(t *testing.T, c *workertest.Controller) {
	t.Helper()
	if m, err := c.NextNonHeartbeat(300 * time.Millisecond); err == nil {
		t.Fatalf("unexpected message: %v", m)
	}
}

// TestLeaseFencesProtectedInstancesOnly: without a grant, the lease runs
// from the agent's start; two thirds of the TTL later the lease-protected
// instance is stopped (node stopped, "lease expired"), and the other is
// left running.
func TestLeaseFencesProtectedInstancesOnly(t *testing.T) {
	t.Parallel()
	e, fc, a, c, _ := leaseEnv(t, noHeartbeats)
	startRunning(t, c, job("plain", svc("main")), "primary", 1)
	startRunning(t, c, protectedJob("guarded", svc("main")), "primary", 1)
	plain, guarded := pidOf(t, e.dataDir, "plain", "main"), pidOf(t, e.dataDir, "guarded", "main")
	settledTimers(t, fc, 2) // the heartbeat and the lease

	fc.Advance(leaseTTL*2/3 - time.Millisecond)
	expectQuiet(t, c)
	fc.Advance(time.Millisecond)
	expectFenced(t, c, "guarded", "lease expired: no Manager member has answered since the worker started 10s ago")
	waitDead(t, guarded)
	if !alive(plain) {
		t.Fatal("the instance of a job that is not lease-protected was stopped")
	}
	if r := inventoryFind(a.Inventory(), "plain", "primary"); r.GetPhase() != phaseRunning {
		t.Fatalf("plain: %v", r)
	}
}

// TestLeaseGrantExtendsTheLease: a grant answering a heartbeat makes the
// lease run two thirds of the TTL from that heartbeat's send time.
func TestLeaseGrantExtendsTheLease(t *testing.T) {
	t.Parallel()
	e, fc, a, c, _ := leaseEnv(t, 9000)
	startRunning(t, c, protectedJob("guarded", svc("main")), "primary", 1)
	pid := pidOf(t, e.dataDir, "guarded", "main")
	settledTimers(t, fc, 2)

	fc.Advance(9 * time.Second) // a heartbeat at 9 s
	hb := nextHeartbeat(t, c)
	if hb.GetSentMonoMs() != 9001 {
		t.Fatalf("heartbeat sent at %d ms, want 9001 (9 s after the start, plus one)", hb.GetSentMonoMs())
	}
	grant(t, a, c, hb.GetSentMonoMs(), false)
	fc.Advance(5 * time.Second) // 14 s: past the first lease, within the second
	expectQuiet(t, c)
	if !alive(pid) {
		t.Fatal("stopped although the grant extended the lease")
	}
	fc.Advance(5 * time.Second) // 19 s: 9 s + 10 s
	expectFenced(t, c, "guarded", "lease expired: no Manager member answered for 10s")
	waitDead(t, pid)
}

// TestLeasePausedKeepsInstances: while the last grant says leases are
// paused nothing is stopped, however long no grant comes; a grant that
// resumes them makes the lease run from its heartbeat again.
func TestLeasePausedKeepsInstances(t *testing.T) {
	t.Parallel()
	e, fc, a, c, hb := leaseEnv(t, 30_000)
	startRunning(t, c, protectedJob("guarded", svc("main")), "primary", 1)
	pid := pidOf(t, e.dataDir, "guarded", "main")
	grant(t, a, c, hb.GetSentMonoMs(), true)
	settledTimers(t, fc, 1) // the heartbeat only: paused, the lease waits on nothing

	fc.Advance(time.Minute)
	hb = nextHeartbeat(t, c)
	expectQuiet(t, c)
	if !alive(pid) {
		t.Fatal("stopped while leases were paused")
	}
	grant(t, a, c, hb.GetSentMonoMs(), false)
	expectQuiet(t, c) // the lease runs from the heartbeat at 60 s
	fc.Advance(leaseTTL * 2 / 3)
	expectFenced(t, c, "guarded", "lease expired: no Manager member answered for 10s")
	waitDead(t, pid)
}

// TestLeaseFencedInstanceIsNotRestarted: a fenced instance stays stopped;
// its services' restart policy does not bring it back, even when a
// restart was due when the lease ran out.
func TestLeaseFencedInstanceIsNotRestarted(t *testing.T) {
	t.Parallel()
	_, fc, a, c, _ := leaseEnv(t, noHeartbeats)
	s := withRestart(svc("main", "-exit", "3", "-run", "20ms"), managerv1.RestartMode_RESTART_MODE_ALWAYS, 0, 0)
	startRunning(t, c, protectedJob("guarded", s), "primary", 1)
	awaitTimer(t, fc, 2) // the heartbeat, the lease and the first restart's backoff

	fc.Advance(leaseTTL * 2 / 3)
	m, err := c.Await(wait, func(m *managerv1.WorkerMessage) bool { return m.GetReport().GetPhase() == phaseStopped })
	if err != nil {
		t.Fatal(err)
	}
	if r := m.GetReport(); r.GetReason() != reasonStopped || !strings.Contains(r.GetAdditionalReason(), "lease expired") {
		t.Fatalf("STOPPED: %v", r)
	}
	for range 3 {
		fc.Advance(time.Minute) // past any backoff
		expectQuiet(t, c)
	}
	runtimetest.Eventually(t, wait, "the tombstone is dropped", func() bool { return len(a.Inventory()) == 0 })
	if _, err := c.Send(startMsg(protectedJob("probe", svc("main")), "primary", 1)); err != nil {
		t.Fatal(err)
	}
	// The only RUNNING report now is the probe's.
	r := expectReport(t, c, phaseRunning)
	if r.GetJobId() != "probe" {
		t.Fatalf("a fenced instance came back: %v", r)
	}
}

// TestLeaseFencesAdoptedInstances: a worker restarted while no Manager
// member answers still stops the lease-protected instances it adopted,
// two thirds of the TTL after its start.
func TestLeaseFencesAdoptedInstances(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := e.run(e.config())
	c, _ := e.dial(a, noHeartbeats)
	startRunning(t, c, protectedJob("guarded", svc("main")), "primary", 1)
	pid := pidOf(t, e.dataDir, "guarded", "main")
	c.Close()
	if err := a.stop(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if !alive(pid) {
		t.Fatal("the instance did not survive the worker's stop")
	}

	fc := clock.NewFake(time.Now())
	cfg := e.config()
	cfg.Token = ""
	cfg.Clock = fc
	cfg.LeaseTTL = leaseTTL
	b := e.run(cfg)
	fc.Advance(leaseTTL * 2 / 3)
	waitDead(t, pid)
	var r *managerv1.InstanceReport
	runtimetest.Eventually(t, wait, "the adopted instance is fenced", func() bool {
		r = inventoryFind(b.Inventory(), "guarded", "primary")
		return r.GetPhase() == phaseStopped
	})
	if r.GetReason() != reasonStopped || !strings.Contains(r.GetAdditionalReason(), "since the worker started") {
		t.Fatalf("tombstone: %v", r)
	}
}
