package worker_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/internal/clock"
	"github.com/norsk-go/norsk-manager/internal/runtime"
	"github.com/norsk-go/norsk-manager/internal/runtime/process"
	"github.com/norsk-go/norsk-manager/internal/runtime/runtimetest"
	"github.com/norsk-go/norsk-manager/internal/worker"
	"github.com/norsk-go/norsk-manager/internal/worker/workertest"
)

const (
	phasePrepared = managerv1.InstancePhase_INSTANCE_PHASE_PREPARED
	phaseRunning  = managerv1.InstancePhase_INSTANCE_PHASE_RUNNING
	phaseStopping = managerv1.InstancePhase_INSTANCE_PHASE_STOPPING
	phaseStopped  = managerv1.InstancePhase_INSTANCE_PHASE_STOPPED

	reasonUser       = managerv1.StoppingReason_STOPPING_REASON_USER_REQUESTED
	reasonFailed     = managerv1.StoppingReason_STOPPING_REASON_JOB_FAILED
	reasonTerminated = managerv1.StoppingReason_STOPPING_REASON_NODE_TERMINATED
)

func TestRegistersWithTokenThenWithSecret(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := e.run(e.config())
	if a.NodeID() != e.nodeID {
		t.Fatalf("node id %q, want %q", a.NodeID(), e.nodeID)
	}
	regs := e.mgr.Registrations()
	if len(regs) != 1 || !regs[0].WithToken {
		t.Fatalf("registrations: %+v", regs)
	}
	req := regs[0].Request
	if req.GetAddress() != a.Addr() {
		t.Errorf("registered address %q, want the listen address %q", req.GetAddress(), a.Addr())
	}
	hw := req.GetHardware()
	if hw.GetVcpus() == 0 || hw.GetMemoryBytes() == 0 || hw.GetHostname() == "" {
		t.Errorf("hardware: %v", hw)
	}
	if req.GetRuntime() != "process" || req.GetWorkerVersion() != "test-1" || len(req.GetCapabilities()) != 1 {
		t.Errorf("request: %v", req)
	}

	fi, err := os.Stat(filepath.Join(e.dataDir, "identity.json"))
	if err != nil {
		t.Fatalf("identity: %v", err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("identity mode %v, want 0600", fi.Mode().Perm())
	}
	id, err := worker.LoadIdentity(e.dataDir)
	if err != nil || id.NodeID != e.nodeID || id.NodeSecret != e.secret() || id.ManagerURL != e.mgr.URL {
		t.Fatalf("identity %+v, %v", id, err)
	}
	if err := a.stop(t); err != nil {
		t.Fatalf("Run: %v", err)
	}

	// A restart registers with the secret (the token is used up).
	cfg := e.config()
	cfg.Token = ""
	b := e.run(cfg)
	runtimetest.Eventually(t, wait, "registration with the secret", func() bool { return len(e.mgr.Registrations()) == 2 })
	r := e.mgr.Registrations()[1]
	if r.WithToken || r.NodeID != e.nodeID || r.Request.GetNodeSecret() != id.NodeSecret || r.Request.GetAddress() != b.Addr() {
		t.Fatalf("second registration: %+v", r)
	}
	if n, _ := e.mgr.Node(e.nodeID); n.Address != b.Addr() {
		t.Fatalf("the Manager dials %s, the worker listens on %s", n.Address, b.Addr())
	}
}

func TestUnknownTokenIsFatal(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := e.config()
	cfg.Token = "no-such-token"
	a := e.runNoWait(cfg)
	err := a.result(t)
	if !errors.Is(err, worker.ErrTokenRefused) || !strings.Contains(err.Error(), "unknown or already used") {
		t.Fatalf("Run: %v, want ErrTokenRefused", err)
	}
	if _, err := os.Stat(filepath.Join(e.dataDir, "identity.json")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("identity written after a refused token: %v", err)
	}
}

func TestNoIdentityNoToken(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := e.config()
	cfg.Token = ""
	if err := e.runNoWait(cfg).result(t); err == nil || !strings.Contains(err.Error(), "no registration token") {
		t.Fatalf("Run: %v", err)
	}
}

func TestRegistrationRetriesWhileTheManagerIsUnavailable(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.mgr.SetUnavailable(true)
	fc := clock.NewFake(time.Now())
	cfg := e.config()
	cfg.Clock = fc
	a := e.runNoWait(cfg)
	// The worker waits on the clock between attempts.
	runtimetest.Eventually(t, wait, "a retry timer", func() bool { return fc.Pending() > 0 })
	e.mgr.SetUnavailable(false)
	fc.Advance(time.Second)
	select {
	case <-a.Ready():
	case err := <-a.done:
		t.Fatalf("Run: %v", err)
	case <-time.After(wait):
		t.Fatal("not registered after the Manager came back")
	}
}

func TestDeregisteredSecretStopsEverything(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := e.run(e.config())
	c, _ := e.dial(a, noHeartbeats)
	startRunning(t, c, job("dereg", svc("main")), "primary", 3)
	pid := pidOf(t, e.dataDir, "dereg", "main")
	if err := a.stop(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if !alive(pid) {
		t.Fatal("the instance stopped with the worker")
	}

	e.mgr.Deregister(e.nodeID)
	cfg := e.config()
	cfg.Token = ""
	// The refusal is believed once repeated over ReregisterAfter.
	cfg.ReregisterAfter = time.Second
	cfg.RegisterRetry = 500 * time.Millisecond
	b := e.runNoWait(cfg)
	if err := b.result(t); !errors.Is(err, worker.ErrDeregistered) {
		t.Fatalf("Run: %v, want ErrDeregistered", err)
	}
	waitDead(t, pid)
	if _, err := os.Stat(filepath.Join(e.dataDir, "identity.json")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("identity kept after deregistration: %v", err)
	}
	if recs, _ := filepath.Glob(filepath.Join(e.dataDir, "instances", "*.json")); len(recs) != 0 {
		t.Fatalf("records kept: %v", recs)
	}
}

func TestStartReportsRunningWithPorts(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := e.run(e.config())
	c, hello := e.dial(a, noHeartbeats)
	if hello.GetNodeId() != e.nodeID || hello.GetRuntime() != "process" || hello.GetWorkerVersion() != "test-1" ||
		hello.GetHardware().GetVcpus() == 0 || len(hello.GetCapabilities()) != 1 || len(hello.GetInventory()) != 0 {
		t.Fatalf("hello: %v", hello)
	}
	j := job("web", listening(svc("main"), 8080))
	j.CurrentHash = 42
	r := startRunning(t, c, j, "primary", 7)
	if r.GetFencingToken() != 7 || r.GetJobHash() != 42 || r.GetRestarts() != 0 {
		t.Fatalf("report: %v", r)
	}
	pm := r.GetServicePortMappings()["main"].GetMappings()
	if len(pm) != 1 || pm[0].GetTarget() != 8080 || pm[0].GetPublished() == 0 {
		t.Fatalf("port mappings: %v", r.GetServicePortMappings())
	}
	var greeting string
	runtimetest.Eventually(t, wait, "the service answers at "+pm[0].GetUrl(), func() bool {
		conn, err := net.DialTimeout("tcp", pm[0].GetUrl(), time.Second)
		if err != nil {
			return false
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(time.Second))
		greeting, _ = bufio.NewReader(conn).ReadString('\n')
		return true
	})
	if greeting != "testprog\n" {
		t.Fatalf("greeting %q", greeting)
	}

	// The environment the worker gives the service.
	env := readEnvOfService(t, e, "web", "main")
	for k, v := range map[string]string{
		runtime.EnvJobID: "web", runtime.EnvRole: "primary", runtime.EnvRuntimeRole: "primary",
		runtime.EnvNodeID: e.nodeID, runtime.EnvToken: "7",
	} {
		if env[k] != v {
			t.Errorf("%s=%q, want %q", k, env[k], v)
		}
	}
	if _, ok := env[runtime.EnvMigrationID]; ok {
		t.Errorf("%s set without a migration", runtime.EnvMigrationID)
	}

	// A new stream's hello carries the running instance.
	_, hello2 := e.dial(a, noHeartbeats)
	got := inventoryFind(hello2.GetInventory(), "web", "primary")
	if got.GetPhase() != phaseRunning || got.GetFencingToken() != 7 || len(got.GetServicePortMappings()["main"].GetMappings()) != 1 {
		t.Fatalf("inventory: %v", hello2.GetInventory())
	}
}

// readEnvOfService reads the environment the process runtime recorded for a
// service.
func readEnvOfService(t *testing.T, e *env, jobID, service string) map[string]string {
	t.Helper()
	paths, _ := filepath.Glob(filepath.Join(e.dataDir, "process", "instances", "*", service+".json"))
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil || !strings.Contains(string(b), `"job_id": "`+jobID+`"`) {
			continue
		}
		var st struct {
			Env []string `json:"env"`
		}
		if err := json.Unmarshal(b, &st); err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, kv := range st.Env {
			k, v, _ := strings.Cut(kv, "=")
			out[k] = v
		}
		return out
	}
	t.Fatalf("no state file for %s/%s", jobID, service)
	return nil
}

func TestDeferStartThenStartPrepared(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := e.run(e.config())
	c, _ := e.dial(a, noHeartbeats)
	msg := startMsg(job("deferred", svc("main")), "backup", 4)
	msg.GetStart().DeferStart = true
	msg.GetStart().RuntimeRole = "primary"
	msg.GetStart().MigrationId = "mig-1"
	seq := send(t, c, msg)
	expectReport(t, c, phasePrepared)
	expectAck(t, c, seq, "")
	env := readEnvOfService(t, e, "deferred", "main")
	if env[runtime.EnvRuntimeRole] != "primary" || env[runtime.EnvRole] != "backup" || env[runtime.EnvMigrationID] != "mig-1" {
		t.Fatalf("environment: %v", env)
	}

	sp := func(token uint64) *managerv1.ControllerMessage {
		return &managerv1.ControllerMessage{Msg: &managerv1.ControllerMessage_StartPrepared{StartPrepared: &managerv1.StartPreparedInstance{
			JobId: "deferred", Role: "backup", FencingToken: token,
		}}}
	}
	seq = send(t, c, sp(3))
	expectAck(t, c, seq, "FAILED_PRECONDITION")

	// An update while prepared may add a service: start_prepared starts it.
	upd := job("deferred", svc("main"), svc("extra"))
	upd.CurrentHash = 2
	seq = send(t, c, &managerv1.ControllerMessage{Msg: &managerv1.ControllerMessage_Update{Update: &managerv1.UpdateInstance{Job: upd, Role: "backup", FencingToken: 4}}})
	if r := expectReport(t, c, phasePrepared); r.GetJobHash() != 2 {
		t.Fatalf("report after update: %v", r)
	}
	expectAck(t, c, seq, "")

	seq = send(t, c, sp(4))
	r := expectReport(t, c, phaseRunning)
	expectAck(t, c, seq, "")
	if len(r.GetServicePortMappings()) != 2 {
		t.Fatalf("running services: %v", r.GetServicePortMappings())
	}
	pid := pidOf(t, e.dataDir, "deferred", "main")
	if !alive(pid) || !alive(pidOf(t, e.dataDir, "deferred", "extra")) {
		t.Fatal("not running after start_prepared")
	}

	// Again: acknowledged, re-reported, nothing started.
	seq = send(t, c, sp(4))
	expectReport(t, c, phaseRunning)
	expectAck(t, c, seq, "")
	if got := pidOf(t, e.dataDir, "deferred", "main"); got != pid {
		t.Fatalf("pid %d became %d", pid, got)
	}

	// Unknown instance.
	seq = send(t, c, &managerv1.ControllerMessage{Msg: &managerv1.ControllerMessage_StartPrepared{StartPrepared: &managerv1.StartPreparedInstance{
		JobId: "nope", Role: "backup", FencingToken: 4,
	}}})
	expectAck(t, c, seq, "NOT_FOUND")
}

func TestStopWithGraceKillsAServiceIgnoringSIGTERM(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := e.run(e.config())
	c, _ := e.dial(a, noHeartbeats)
	startRunning(t, c, job("stubborn", svc("main", "-ignore-term")), "primary", 9)
	pid := pidOf(t, e.dataDir, "stubborn", "main")

	seq := send(t, c, stopMsg("stubborn", "primary", 9, 200, reasonUser, "operator said so"))
	r := expectReport(t, c, phaseStopping)
	if r.GetReason() != reasonUser || r.GetAdditionalReason() != "operator said so" || r.GetFencingToken() != 9 {
		t.Fatalf("STOPPING: %v", r)
	}
	r = expectReport(t, c, phaseStopped)
	if len(r.GetExitCodes()) != 0 || r.GetReason() != reasonUser {
		t.Fatalf("STOPPED: %v (a service the worker stopped did not exit by itself)", r)
	}
	expectAck(t, c, seq, "")
	if alive(pid) {
		t.Fatal("the service still runs after STOPPED")
	}
	runtimetest.Eventually(t, wait, "the tombstone is dropped", func() bool { return len(a.Inventory()) == 0 })
	if recs, _ := filepath.Glob(filepath.Join(e.dataDir, "instances", "*.json")); len(recs) != 0 {
		t.Fatalf("records kept: %v", recs)
	}

	// Stopping what is not here: acknowledged, reported STOPPED.
	seq = send(t, c, stopMsg("stubborn", "primary", 9, 0, reasonUser, ""))
	r = expectReport(t, c, phaseStopped)
	if r.GetJobId() != "stubborn" || r.GetFencingToken() != 9 {
		t.Fatalf("STOPPED of an unknown instance: %v", r)
	}
	expectAck(t, c, seq, "")
}

func TestFencing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := e.run(e.config())
	c, _ := e.dial(a, noHeartbeats)
	j := job("fenced", svc("main"))
	startRunning(t, c, j, "primary", 5)
	pid5 := pidOf(t, e.dataDir, "fenced", "main")

	// An older token is refused.
	seq := send(t, c, startMsg(j, "primary", 3))
	ack := expectAck(t, c, seq, "FAILED_PRECONDITION")
	if !strings.Contains(ack.GetError(), "superseded by token 5") {
		t.Fatalf("ack: %v", ack)
	}
	// The same token changes nothing.
	r := startRunning(t, c, j, "primary", 5)
	if r.GetFencingToken() != 5 || pidOf(t, e.dataDir, "fenced", "main") != pid5 {
		t.Fatalf("a repeated start changed the instance: %v", r)
	}
	// A stop of an older binding does nothing.
	seq = send(t, c, stopMsg("fenced", "primary", 4, 0, reasonUser, ""))
	expectAck(t, c, seq, "")
	if !alive(pid5) {
		t.Fatal("a stop of an older token stopped the instance")
	}

	// A newer token replaces the instance.
	seq = send(t, c, startMsg(j, "primary", 7))
	r = expectReport(t, c, phaseStopping)
	if r.GetFencingToken() != 5 || !strings.Contains(r.GetAdditionalReason(), "superseded by token 7") {
		t.Fatalf("STOPPING of the old binding: %v", r)
	}
	if r = expectReport(t, c, phaseStopped); r.GetFencingToken() != 5 {
		t.Fatalf("STOPPED of the old binding: %v", r)
	}
	if r = expectReport(t, c, phaseRunning); r.GetFencingToken() != 7 {
		t.Fatalf("RUNNING of the new binding: %v", r)
	}
	expectAck(t, c, seq, "")
	if alive(pid5) {
		t.Fatal("the old binding still runs")
	}
	if pid7 := pidOf(t, e.dataDir, "fenced", "main"); pid7 == pid5 || !alive(pid7) {
		t.Fatalf("new binding pid %d (old %d)", pid7, pid5)
	}
	if inv := a.Inventory(); len(inv) != 1 || inv[0].GetFencingToken() != 7 {
		t.Fatalf("inventory: %v", inv)
	}

	// Once the instance has stopped and is forgotten, an older binding is
	// still refused.
	seq = send(t, c, stopMsg("fenced", "primary", 7, 0, reasonUser, ""))
	expectReport(t, c, phaseStopping)
	expectReport(t, c, phaseStopped)
	expectAck(t, c, seq, "")
	runtimetest.Eventually(t, wait, "the tombstone is dropped", func() bool { return len(a.Inventory()) == 0 })
	seq = send(t, c, startMsg(j, "primary", 6))
	expectAck(t, c, seq, "FAILED_PRECONDITION")
	startRunning(t, c, j, "primary", 8)
}

// settledTimers waits until the fake clock has exactly n timers pending and
// returns n: with a stream up, the only one is the heartbeat (the link's
// re-registration timer is stopped once the stream is up).
func settledTimers(t *testing.T, fc *clock.Fake, n int) int {
	t.Helper()
	runtimetest.Eventually(t, wait, fmt.Sprintf("%d timers on the clock", n), func() bool { return fc.Pending() == n })
	return n
}

// awaitTimer waits until the fake clock has more than n timers pending.
func awaitTimer(t *testing.T, fc *clock.Fake, n int) {
	t.Helper()
	runtimetest.Eventually(t, wait, "a timer on the clock", func() bool { return fc.Pending() > n })
}

func TestRestartOnFailureWithinBudgetThenFail(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	fc := clock.NewFake(time.Now())
	cfg := e.config()
	cfg.Clock = fc
	a := e.run(cfg)
	c, _ := e.dial(a, noHeartbeats)
	base := settledTimers(t, fc, 1) // the heartbeat

	s := withRestart(svc("main", "-exit", "3", "-run", "20ms"), managerv1.RestartMode_RESTART_MODE_ON_FAILURE, 2, 60)
	startRunning(t, c, job("flaky", s), "primary", 1)

	awaitTimer(t, fc, base) // first backoff: 1 s
	fc.Advance(time.Second)
	if r := expectReport(t, c, phaseRunning); r.GetRestarts() != 1 {
		t.Fatalf("after the first restart: %v", r)
	}
	awaitTimer(t, fc, base) // second backoff: 2 s
	fc.Advance(2 * time.Second)
	if r := expectReport(t, c, phaseRunning); r.GetRestarts() != 2 {
		t.Fatalf("after the second restart: %v", r)
	}
	// The third exit spends the budget: the instance fails.
	r := expectReport(t, c, phaseStopping)
	if r.GetReason() != reasonFailed ||
		!strings.Contains(r.GetAdditionalReason(), "service main exited with code 3") ||
		!strings.Contains(r.GetAdditionalReason(), "last output: ") ||
		!strings.Contains(r.GetAdditionalReason(), "testprog: ready") {
		t.Fatalf("STOPPING: %v", r)
	}
	r = expectReport(t, c, phaseStopped)
	if r.GetExitCodes()["main"] != 3 || r.GetReason() != reasonFailed || r.GetRestarts() != 2 {
		t.Fatalf("STOPPED: %v", r)
	}
}

// TestRestartAlways runs over the in-memory runtime: what it proves is
// the worker's restart bookkeeping, not how a process exits.
func TestRestartAlways(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	fc := clock.NewFake(time.Now())
	cfg, _ := e.fakeConfig()
	cfg.Clock = fc
	a := e.run(cfg)
	c, _ := e.dial(a, noHeartbeats)
	base := settledTimers(t, fc, 1) // the heartbeat

	s := withRestart(svc("main", "-exit", "0", "-run", "20ms"), managerv1.RestartMode_RESTART_MODE_ALWAYS, 0, 0)
	startRunning(t, c, job("always", s), "primary", 1)
	backoff := time.Second
	for i := uint32(1); i <= 3; i++ {
		awaitTimer(t, fc, base)
		fc.Advance(backoff)
		backoff *= 2
		if r := expectReport(t, c, phaseRunning); r.GetRestarts() != i {
			t.Fatalf("restart %d: %v", i, r)
		}
	}
	seq := send(t, c, stopMsg("always", "primary", 0, 0, reasonUser, ""))
	expectReport(t, c, phaseStopping)
	expectReport(t, c, phaseStopped)
	expectAck(t, c, seq, "")
}

// TestRestartNeverFailsAtOnce runs over the in-memory runtime: what it
// proves is the worker's failure handling (the other services stopped,
// everything removed), which the runtime's List shows.
func TestRestartNeverFailsAtOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg, rt := e.fakeConfig()
	a := e.run(cfg)
	c, _ := e.dial(a, noHeartbeats)
	s := withRestart(svc("main", "-exit", "0", "-run", "20ms"), managerv1.RestartMode_RESTART_MODE_NEVER, 0, 0)
	startRunning(t, c, job("once", s, svc("sidecar")), "primary", 1)
	r := expectReport(t, c, phaseStopping)
	if r.GetReason() != reasonFailed || !strings.Contains(r.GetAdditionalReason(), "service main exited with code 0") {
		t.Fatalf("STOPPING: %v", r)
	}
	r = expectReport(t, c, phaseStopped)
	if code, ok := r.GetExitCodes()["main"]; !ok || code != 0 || len(r.GetExitCodes()) != 1 {
		t.Fatalf("STOPPED exit codes: %v", r.GetExitCodes())
	}
	// The other service was stopped and everything removed.
	if sts, err := rt.List(t.Context()); err != nil || len(sts) != 0 {
		t.Fatalf("the runtime still holds %v (%v)", sts, err)
	}
}

func TestDependsOnOrder(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	inner, err := process.New(process.Config{NodeID: e.nodeID, ClusterID: e.mgr.ClusterID, Dir: filepath.Join(e.dataDir, "process"), Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	rec := &recordingRuntime{Runtime: inner, calls: make(chan string, 100)}
	cfg := e.config()
	cfg.RuntimeImpl = rec
	a := e.run(cfg)
	c, _ := e.dial(a, noHeartbeats)

	web := svc("web")
	web.DependsOn = []string{"api"}
	api := svc("api")
	api.DependsOn = []string{"db"}
	startRunning(t, c, job("stack", web, api, svc("db")), "primary", 1)
	seq := send(t, c, stopMsg("stack", "primary", 1, 0, reasonUser, ""))
	expectReport(t, c, phaseStopping)
	expectReport(t, c, phaseStopped)
	expectAck(t, c, seq, "")

	var calls []string
	for len(calls) < 6 {
		select {
		case s := <-rec.calls:
			calls = append(calls, s)
		case <-time.After(wait):
			t.Fatalf("calls: %v", calls)
		}
	}
	want := "start db,start api,start web,stop web,stop api,stop db"
	if got := strings.Join(calls, ","); got != want {
		t.Fatalf("calls %s, want %s", got, want)
	}

	// A cycle is an invalid spec: the start fails.
	x, y := svc("x"), svc("y")
	x.DependsOn, y.DependsOn = []string{"y"}, []string{"x"}
	seq = send(t, c, startMsg(job("cycle", x, y), "primary", 1))
	r := expectReport(t, c, phaseStopping)
	if r.GetReason() != reasonFailed || !strings.Contains(r.GetAdditionalReason(), "cycle") {
		t.Fatalf("STOPPING: %v", r)
	}
	expectReport(t, c, phaseStopped)
	expectAck(t, c, seq, "FAILED_PRECONDITION")
}

func TestInvalidSpecFailsTheStart(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := e.run(e.config())
	c, _ := e.dial(a, noHeartbeats)
	seq := send(t, c, startMsg(job("bad", &managerv1.Service{Name: "main", Image: "some/image:1"}), "primary", 1))
	r := expectReport(t, c, phaseStopping)
	if r.GetReason() != reasonFailed || r.GetAdditionalReason() == "" {
		t.Fatalf("STOPPING: %v", r)
	}
	expectReport(t, c, phaseStopped)
	ack := expectAck(t, c, seq, "FAILED_PRECONDITION")
	if ack.GetError() == "" {
		t.Fatal("no error in the ack")
	}
	// A start without a token or a job id is refused outright.
	seq = send(t, c, startMsg(job("bad", svc("main")), "primary", 0))
	expectAck(t, c, seq, "INVALID_ARGUMENT")
	seq = send(t, c, startMsg(job("", svc("main")), "primary", 1))
	expectAck(t, c, seq, "INVALID_ARGUMENT")
}

func TestUpdateKeepsTheSpec(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := e.run(e.config())
	c, _ := e.dial(a, noHeartbeats)
	j := job("upd", svc("main"))
	startRunning(t, c, j, "primary", 2)
	pid := pidOf(t, e.dataDir, "upd", "main")

	upd := func(token uint64, hash uint64) *managerv1.ControllerMessage {
		nj := job("upd", svc("main", "-exit", "1"))
		nj.CurrentHash = hash
		return &managerv1.ControllerMessage{Msg: &managerv1.ControllerMessage_Update{Update: &managerv1.UpdateInstance{Job: nj, Role: "primary", FencingToken: token}}}
	}
	seq := send(t, c, upd(2, 9))
	if r := expectReport(t, c, phaseRunning); r.GetJobHash() != 9 {
		t.Fatalf("report after update: %v", r)
	}
	expectAck(t, c, seq, "")
	if got := pidOf(t, e.dataDir, "upd", "main"); got != pid || !alive(pid) {
		t.Fatal("an update recreated the running service")
	}
	seq = send(t, c, upd(1, 10))
	expectAck(t, c, seq, "FAILED_PRECONDITION")

	nope := upd(2, 10)
	nope.GetUpdate().Role = "backup"
	seq = send(t, c, nope)
	expectAck(t, c, seq, "NOT_FOUND")
}

func TestWorkerRestartAdoptsRunningInstance(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := e.run(e.config())
	c, _ := e.dial(a, noHeartbeats)
	r := startRunning(t, c, job("adopt", listening(svc("main"), 9000)), "primary", 11)
	url := r.GetServicePortMappings()["main"].GetMappings()[0].GetUrl()
	pid := pidOf(t, e.dataDir, "adopt", "main")
	if err := a.stop(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if !alive(pid) {
		t.Fatal("the instance stopped with the worker")
	}

	cfg := e.config()
	cfg.Token = ""
	b := e.run(cfg)
	c2, hello := e.dial(b, noHeartbeats)
	got := inventoryFind(hello.GetInventory(), "adopt", "primary")
	if got.GetPhase() != phaseRunning || got.GetFencingToken() != 11 ||
		got.GetServicePortMappings()["main"].GetMappings()[0].GetUrl() != url {
		t.Fatalf("inventory: %v", hello.GetInventory())
	}
	if p := pidOf(t, e.dataDir, "adopt", "main"); p != pid || !alive(pid) {
		t.Fatalf("pid %d → %d: the service was restarted", pid, p)
	}

	// The adopted instance is supervised: a stop works on it.
	seq := send(t, c2, stopMsg("adopt", "primary", 11, 0, reasonUser, ""))
	expectReport(t, c2, phaseStopping)
	expectReport(t, c2, phaseStopped)
	expectAck(t, c2, seq, "")
	waitDead(t, pid)
}

func TestWorkerRestartAppliesRestartPolicyToServicesThatExited(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := e.run(e.config())
	c, _ := e.dial(a, noHeartbeats)
	flag := filepath.Join(t.TempDir(), "flag")
	s := withRestart(flagScript("main", flag, 4), managerv1.RestartMode_RESTART_MODE_ON_FAILURE, 0, 0)
	startRunning(t, c, job("exiter", s), "primary", 1)
	pid := pidOf(t, e.dataDir, "exiter", "main")
	c.Close()
	if err := a.stop(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if err := os.WriteFile(flag, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitDead(t, pid)

	cfg := e.config()
	cfg.Token = ""
	b := e.run(cfg)
	var r *managerv1.InstanceReport
	runtimetest.Eventually(t, wait, "the service is restarted", func() bool {
		r = inventoryFind(b.Inventory(), "exiter", "primary")
		return r.GetPhase() == phaseRunning && r.GetRestarts() == 1
	})
	if p := pidOf(t, e.dataDir, "exiter", "main"); p == pid || !alive(p) {
		t.Fatalf("pid %d after the restart (was %d)", p, pid)
	}
}

func TestTombstoneOfAFailureWithoutStreamIsInNextHello(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := e.run(e.config())
	c, _ := e.dial(a, noHeartbeats)
	flag := filepath.Join(t.TempDir(), "flag")
	startRunning(t, c, job("lonely", flagScript("main", flag, 2)), "primary", 6)
	c.Close()
	// With no stream up, a report has nowhere to go: the tombstone keeps it.
	runtimetest.Eventually(t, wait, "the stream is down", func() bool { return !a.Connected() })
	if err := os.WriteFile(flag, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	runtimetest.Eventually(t, wait, "the instance has failed", func() bool {
		return inventoryFind(a.Inventory(), "lonely", "primary").GetPhase() == phaseStopped
	})

	_, hello := e.dial(a, noHeartbeats)
	got := inventoryFind(hello.GetInventory(), "lonely", "primary")
	if got.GetPhase() != phaseStopped || got.GetReason() != reasonFailed || got.GetFencingToken() != 6 ||
		!strings.Contains(got.GetAdditionalReason(), "service main exited with code 2") ||
		!strings.Contains(got.GetAdditionalReason(), "bye-from-job") ||
		got.GetExitCodes()["main"] != 2 {
		t.Fatalf("inventory: %v", hello.GetInventory())
	}
	// Delivered: dropped, and not in the next hello.
	runtimetest.Eventually(t, wait, "the tombstone is dropped", func() bool { return len(a.Inventory()) == 0 })
	_, hello3 := e.dial(a, noHeartbeats)
	if len(hello3.GetInventory()) != 0 {
		t.Fatalf("inventory after delivery: %v", hello3.GetInventory())
	}
}

// A tombstone is forgotten only once the Manager says it has committed the
// STOPPED report: one that was sent to a Manager that never confirmed it
// is in the next hello.
func TestTombstoneKeptUntilTheManagerConfirms(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := e.run(e.config())
	c, _ := e.dial(a, noHeartbeats)
	c.HoldConfirmations()
	startRunning(t, c, job("quick", svc("main")), "primary", 7)
	seq := send(t, c, stopMsg("quick", "primary", 7, 0, managerv1.StoppingReason_STOPPING_REASON_USER_REQUESTED, ""))
	expectReport(t, c, phaseStopping)
	expectReport(t, c, phaseStopped)
	expectAck(t, c, seq, "")
	if got := inventoryFind(a.Inventory(), "quick", "primary"); got.GetPhase() != phaseStopped {
		t.Fatalf("the unconfirmed tombstone was forgotten: inventory %v", a.Inventory())
	}
	c.Close()

	_, hello := e.dial(a, noHeartbeats) // confirms
	if got := inventoryFind(hello.GetInventory(), "quick", "primary"); got.GetPhase() != phaseStopped || got.GetFencingToken() != 7 {
		t.Fatalf("the next hello lacks the unconfirmed tombstone: %v", hello.GetInventory())
	}
	runtimetest.Eventually(t, wait, "the confirmed tombstone is dropped", func() bool { return len(a.Inventory()) == 0 })
}

func TestTombstoneSurvivesAWorkerRestart(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := e.run(e.config())
	c, _ := e.dial(a, noHeartbeats)
	flag := filepath.Join(t.TempDir(), "flag")
	startRunning(t, c, job("gone", flagScript("main", flag, 5)), "primary", 2)
	c.Close()
	if err := os.WriteFile(flag, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	runtimetest.Eventually(t, wait, "the instance has failed", func() bool {
		return inventoryFind(a.Inventory(), "gone", "primary").GetPhase() == phaseStopped
	})
	if err := a.stop(t); err != nil {
		t.Fatal(err)
	}
	cfg := e.config()
	cfg.Token = ""
	b := e.run(cfg)
	_, hello := e.dial(b, noHeartbeats)
	got := inventoryFind(hello.GetInventory(), "gone", "primary")
	if got.GetPhase() != phaseStopped || got.GetExitCodes()["main"] != 5 || !strings.Contains(got.GetAdditionalReason(), "exited with code 5") {
		t.Fatalf("inventory: %v", hello.GetInventory())
	}
}

func TestOrphanedServicesAreRemoved(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	rt, err := process.New(process.Config{NodeID: e.nodeID, ClusterID: e.mgr.ClusterID, Dir: filepath.Join(e.dataDir, "process"), Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	key := runtime.Key{JobID: "orphan", Role: "primary"}
	if err := rt.Prepare(ctx, runtime.InstanceSpec{Key: key, NodeID: e.nodeID, Token: 1, Job: job("orphan", svc("main"))}); err != nil {
		t.Fatal(err)
	}
	if _, err := rt.StartService(ctx, key, "main"); err != nil {
		t.Fatal(err)
	}
	pid := pidOf(t, e.dataDir, "orphan", "main")

	a := e.run(e.config())
	waitDead(t, pid)
	runtimetest.Eventually(t, wait, "the orphan is removed", func() bool {
		sts, err := rt.List(ctx)
		return err == nil && len(sts) == 0
	})
	if inv := a.Inventory(); len(inv) != 0 {
		t.Fatalf("inventory: %v", inv)
	}
	// Nothing asked for it: the job's history is told (issue 12, item 2).
	c, _ := e.dial(a, noHeartbeats)
	if n, err := c.AwaitNotice(wait, "removed-orphan", "orphan"); err != nil {
		t.Fatal(err)
	} else if n.GetFencingToken() != 1 || !strings.Contains(n.GetMessage(), "main") {
		t.Errorf("notice = %v", n)
	}
}

func TestWrongBearerIsUnauthenticated(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := e.run(e.config())
	c := workertest.Dial(context.Background(), a.Addr(), "not-the-secret")
	defer c.Close()
	_, err := c.Hello(e.nodeID, noHeartbeats, wait)
	if connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Fatalf("hello with a wrong secret: %v", err)
	}
}

func TestFirstMessageMustBeHello(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := e.run(e.config())
	c := workertest.Dial(context.Background(), a.Addr(), e.secret())
	defer c.Close()
	send(t, c, stopMsg("x", "primary", 0, 0, reasonUser, ""))
	ended, err := c.Ended(wait)
	if !ended || connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Fatalf("stream ended %v with %v, want INVALID_ARGUMENT", ended, err)
	}
}

func TestSecondStreamReplacesTheFirst(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := e.run(e.config())
	c1, _ := e.dial(a, noHeartbeats)
	c2, _ := e.dial(a, noHeartbeats)
	ended, err := c1.Ended(wait)
	if !ended {
		t.Fatal("the first stream still runs")
	}
	if connect.CodeOf(err) != connect.CodeAborted {
		t.Errorf("first stream ended with %v", err)
	}
	seq := send(t, c2, stopMsg("unknown", "primary", 3, 0, reasonUser, ""))
	expectReport(t, c2, phaseStopped)
	expectAck(t, c2, seq, "")
}

func TestHeartbeats(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := e.run(e.config())
	c, _ := e.dial(a, 20)
	m, err := c.Await(wait, func(m *managerv1.WorkerMessage) bool { return m.GetHeartbeat() != nil })
	if err != nil {
		t.Fatal(err)
	}
	l := m.GetHeartbeat().GetLoad()
	if l.GetMemoryUsedBytes() == 0 || l.GetMeasuredAt() == nil || l.GetCpuPercent() < 0 || l.GetCpuPercent() > 100 {
		t.Fatalf("load: %v", l)
	}
}

func TestReregistersWhileNoStreamIsUp(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	fc := clock.NewFake(time.Now())
	cfg := e.config()
	cfg.Clock = fc
	cfg.ReregisterAfter = 15 * time.Second
	a := e.run(cfg)
	if n := len(e.mgr.Registrations()); n != 1 {
		t.Fatalf("%d registrations", n)
	}
	awaitTimer(t, fc, 0)
	fc.Advance(15 * time.Second)
	runtimetest.Eventually(t, wait, "a registration with the secret", func() bool { return len(e.mgr.Registrations()) == 2 })
	if r := e.mgr.Registrations()[1]; r.WithToken || r.Request.GetNodeSecret() == "" || r.Request.GetAddress() != a.Addr() {
		t.Fatalf("re-registration: %+v", r)
	}
}

func TestTerminate(t *testing.T) {
	t.Parallel()
	for _, dereg := range []bool{false, true} {
		t.Run(map[bool]string{false: "terminated", true: "deregistered"}[dereg], func(t *testing.T) {
			e := newEnv(t)
			a := e.run(e.config())
			c, _ := e.dial(a, noHeartbeats)
			startRunning(t, c, job("term", svc("main")), "primary", 1)
			pid := pidOf(t, e.dataDir, "term", "main")
			seq := send(t, c, &managerv1.ControllerMessage{Msg: &managerv1.ControllerMessage_Terminate{Terminate: &managerv1.Terminate{
				Reason: "node retired", Deregistered: dereg,
			}}})
			r := expectReport(t, c, phaseStopping)
			if r.GetReason() != reasonTerminated || r.GetAdditionalReason() != "node retired" {
				t.Fatalf("STOPPING: %v", r)
			}
			expectReport(t, c, phaseStopped)
			expectAck(t, c, seq, "")
			err := a.result(t)
			want := worker.ErrTerminated
			if dereg {
				want = worker.ErrDeregistered
			}
			if !errors.Is(err, want) {
				t.Fatalf("Run: %v, want %v", err, want)
			}
			if alive(pid) {
				t.Fatal("the instance survived the node's termination")
			}
			_, statErr := os.Stat(filepath.Join(e.dataDir, "identity.json"))
			if dereg != errors.Is(statErr, os.ErrNotExist) {
				t.Fatalf("identity after terminate (deregistered=%v): %v", dereg, statErr)
			}
		})
	}
}

func TestHealthz(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := e.run(e.config())
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Get("http://" + a.Addr() + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || strings.TrimSpace(string(b)) != "ok" {
		t.Fatalf("healthz: %d %q", resp.StatusCode, b)
	}
}

func TestNewRefusesBadConfig(t *testing.T) {
	t.Parallel()
	for name, cfg := range map[string]worker.Config{
		"no manager url": {DataDir: "/tmp/x"},
		"bad url":        {ManagerURL: "ftp://x", DataDir: "/tmp/x"},
		"no data dir":    {ManagerURL: "http://127.0.0.1:1"},
		"bad runtime":    {ManagerURL: "http://127.0.0.1:1", DataDir: "/tmp/x", Runtime: "podman"},
	} {
		if _, err := worker.New(cfg); err == nil {
			t.Errorf("%s: New accepted %+v", name, cfg)
		}
	}
}

func TestSeveralWorkersInOneProcess(t *testing.T) {
	t.Parallel()
	e1, e2 := newEnv(t), newEnv(t)
	a1, a2 := e1.run(e1.config()), e2.run(e2.config())
	c1, _ := e1.dial(a1, noHeartbeats)
	c2, _ := e2.dial(a2, noHeartbeats)
	startRunning(t, c1, job("same", svc("main")), "primary", 1)
	startRunning(t, c2, job("same", svc("main")), "primary", 1)
	if pidOf(t, e1.dataDir, "same", "main") == pidOf(t, e2.dataDir, "same", "main") {
		t.Fatal("two workers share an instance")
	}
}

func TestWorkerRestartFinishesAStopInProgress(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := e.run(e.config())
	c, _ := e.dial(a, noHeartbeats)
	startRunning(t, c, job("halfway", svc("main")), "primary", 3)
	pid := pidOf(t, e.dataDir, "halfway", "main")
	c.Close()
	if err := a.stop(t); err != nil {
		t.Fatal(err)
	}
	// As if the worker had died just after recording a stop.
	paths, _ := filepath.Glob(filepath.Join(e.dataDir, "instances", "*.json"))
	if len(paths) != 1 {
		t.Fatalf("records: %v", paths)
	}
	b, err := os.ReadFile(paths[0])
	if err != nil {
		t.Fatal(err)
	}
	var rec map[string]any
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatal(err)
	}
	rec["desired"] = "stopped"
	rec["stopReason"] = reasonUser.String()
	rec["stopAdditionalReason"] = "halfway there"
	if b, err = json.Marshal(rec); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(paths[0], b, 0o600); err != nil {
		t.Fatal(err)
	}

	cfg := e.config()
	cfg.Token = ""
	w := e.run(cfg)
	waitDead(t, pid)
	runtimetest.Eventually(t, wait, "the stop is finished", func() bool {
		return inventoryFind(w.Inventory(), "halfway", "primary").GetPhase() == phaseStopped
	})
	_, hello := e.dial(w, noHeartbeats)
	got := inventoryFind(hello.GetInventory(), "halfway", "primary")
	if got.GetPhase() != phaseStopped || got.GetReason() != reasonUser || got.GetAdditionalReason() != "halfway there" {
		t.Fatalf("inventory: %v", hello.GetInventory())
	}
}
