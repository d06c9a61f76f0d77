package worker_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/internal/runtime"
	"github.com/norsk-go/norsk-manager/internal/runtime/fake"
	"github.com/norsk-go/norsk-manager/internal/runtime/process"
	"github.com/norsk-go/norsk-manager/internal/runtime/runtimetest"
	"github.com/norsk-go/norsk-manager/internal/worker"
	"github.com/norsk-go/norsk-manager/internal/worker/workertest"
)

// wait bounds every wait of these tests for something that should happen.
const wait = 30 * time.Second

// testProg is the test program, built once for the package's tests.
var testProg string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "worker-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	testProg, err = runtimetest.BuildTestProg(ctx, dir)
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

func testLogger() *slog.Logger {
	if os.Getenv("WORKER_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

// env is one test's node: a fake Manager with a token for it, and a data
// directory. Every process the node's runtime holds is removed when the
// test ends.
type env struct {
	t       *testing.T
	mgr     *workertest.Manager
	nodeID  string
	token   string
	dataDir string
	jsDir   string // the job socket directory of jsConfig
}

func newEnv(t *testing.T) *env {
	t.Helper()
	e := &env{t: t, mgr: workertest.NewManager(t), nodeID: "node-" + randomHex(4), dataDir: t.TempDir()}
	e.token = e.mgr.AddToken(e.nodeID)
	t.Cleanup(e.removeEverything) // runs after the agents' cleanups
	return e
}

// removeEverything removes whatever the node's process runtime still holds.
func (e *env) removeEverything() {
	rt, err := process.New(process.Config{NodeID: e.nodeID, ClusterID: e.mgr.ClusterID, Dir: filepath.Join(e.dataDir, "process"), Logger: testLogger()})
	if err != nil {
		e.t.Errorf("cleanup: %v", err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	sts, err := rt.List(ctx)
	if err != nil {
		e.t.Errorf("cleanup: %v", err)
		return
	}
	for _, st := range sts {
		if err := rt.Remove(ctx, st.Key); err != nil {
			e.t.Errorf("cleanup: %v", err)
		}
	}
}

func (e *env) config() worker.Config {
	return worker.Config{
		ManagerURL: e.mgr.URL,
		Token:      e.token,
		DataDir:    e.dataDir,
		Runtime:    "process",
		Version:    "test-1",
		Logger:     testLogger(),
		Capabilities: []*managerv1.Capability{
			{Name: "h264", Count: 2},
		},
	}
}

// fakeConfig is config with the in-memory runtime (internal/runtime/fake,
// which passes the runtimes' conformance suite) instead of the process
// runtime: for tests of the worker's own logic (commands, restarts,
// reports) that need no real process. It returns the runtime to inspect.
func (e *env) fakeConfig() (worker.Config, *fake.Runtime) {
	h := fake.NewHost()
	e.t.Cleanup(h.Close) // after the agent's cleanup: it stops first
	rt := h.New(e.nodeID)
	cfg := e.config()
	cfg.Runtime = ""
	cfg.RuntimeImpl = rt
	return cfg, rt
}

// agent is a running Agent.
type agent struct {
	*worker.Agent
	cancel context.CancelFunc
	done   chan error
}

// run starts an agent and waits until it is ready; it is stopped when the
// test ends.
func (e *env) run(cfg worker.Config) *agent {
	e.t.Helper()
	a := e.runNoWait(cfg)
	select {
	case <-a.Ready():
	case err := <-a.done:
		e.t.Fatalf("Run returned before the agent was ready: %v", err)
	case <-time.After(wait):
		e.t.Fatal("agent not ready")
	}
	return a
}

func (e *env) runNoWait(cfg worker.Config) *agent {
	e.t.Helper()
	w, err := worker.New(cfg)
	if err != nil {
		e.t.Fatalf("New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	a := &agent{Agent: w, cancel: cancel, done: make(chan error, 1)}
	go func() { a.done <- w.Run(ctx) }()
	e.t.Cleanup(func() {
		cancel()
		select {
		case <-a.done:
		case <-time.After(wait):
			e.t.Error("Run did not return")
		}
	})
	return a
}

// stop cancels Run and returns what it returned.
func (a *agent) stop(t *testing.T) error {
	t.Helper()
	a.cancel()
	return a.result(t)
}

// result waits for Run to return.
func (a *agent) result(t *testing.T) error {
	t.Helper()
	select {
	case err := <-a.done:
		a.done <- err // for the cleanup
		return err
	case <-time.After(wait):
		t.Fatal("Run did not return")
		return nil
	}
}

func (e *env) secret() string {
	n, ok := e.mgr.Node(e.nodeID)
	if !ok {
		e.t.Fatalf("node %s never registered", e.nodeID)
	}
	return n.Secret
}

// dial opens a Control stream to the agent as the Manager does and
// exchanges hellos.
func (e *env) dial(a *agent, heartbeatMs uint32) (*workertest.Controller, *managerv1.WorkerHello) {
	e.t.Helper()
	c := workertest.Dial(context.Background(), a.Addr(), e.secret())
	e.t.Cleanup(c.Close)
	hello, err := c.Hello(e.nodeID, heartbeatMs, wait)
	if err != nil {
		e.t.Fatalf("hello: %v", err)
	}
	return c, hello
}

// The hello's heartbeat interval for tests that do not want heartbeats.
const noHeartbeats = 3600_000

func svc(name string, args ...string) *managerv1.Service {
	return &managerv1.Service{Name: name, Command: []string{testProg}, Args: args}
}

func listening(s *managerv1.Service, port uint32) *managerv1.Service {
	s.Args = append(s.Args, "-listen", strconv.FormatUint(uint64(port), 10))
	s.Ports = append(s.Ports, &managerv1.PortMapping{
		ContainerPort: port,
		Protocol:      managerv1.Protocol_PROTOCOL_TCP,
		HostPort:      &managerv1.PortMapping_Ephemeral{Ephemeral: &managerv1.Ephemeral{}},
	})
	return s
}

func withRestart(s *managerv1.Service, mode managerv1.RestartMode, count, periodS uint32) *managerv1.Service {
	s.Restart = &managerv1.RestartPolicy{Mode: mode, Count: count, PeriodS: periodS}
	return s
}

func job(id string, services ...*managerv1.Service) *managerv1.Job {
	return &managerv1.Job{JobId: id, Services: services, CurrentHash: 1}
}

func startMsg(j *managerv1.Job, role string, token uint64) *managerv1.ControllerMessage {
	return &managerv1.ControllerMessage{Msg: &managerv1.ControllerMessage_Start{Start: &managerv1.StartInstance{
		Job: j, Role: role, FencingToken: token,
	}}}
}

func stopMsg(jobID, role string, token uint64, graceMs uint32, reason managerv1.StoppingReason, addl string) *managerv1.ControllerMessage {
	return &managerv1.ControllerMessage{Msg: &managerv1.ControllerMessage_Stop{Stop: &managerv1.StopInstance{
		JobId: jobID, Role: role, FencingToken: token, GraceMs: graceMs, Reason: reason, AdditionalReason: addl,
	}}}
}

func send(t *testing.T, c *workertest.Controller, msg *managerv1.ControllerMessage) uint64 {
	t.Helper()
	seq, err := c.Send(msg)
	if err != nil {
		t.Fatalf("send: %v", err)
	}
	return seq
}

// next returns the next message that is not a heartbeat.
func next(t *testing.T, c *workertest.Controller) *managerv1.WorkerMessage {
	t.Helper()
	m, err := c.NextNonHeartbeat(wait)
	if err != nil {
		t.Fatalf("waiting for a message: %v", err)
	}
	return m
}

// expectReport reads the next message and checks that it reports phase.
func expectReport(t *testing.T, c *workertest.Controller, phase managerv1.InstancePhase) *managerv1.InstanceReport {
	t.Helper()
	m := next(t, c)
	r := m.GetReport()
	if r == nil || r.GetPhase() != phase {
		t.Fatalf("want a %s report, got %v", phase, m)
	}
	return r
}

// expectAck reads the next message and checks that it acknowledges seq
// with the error code (empty: carried out).
func expectAck(t *testing.T, c *workertest.Controller, seq uint64, code string) *managerv1.CommandAck {
	t.Helper()
	m := next(t, c)
	ack := m.GetAck()
	if ack == nil || ack.GetSeq() != seq || ack.GetErrorCode() != code {
		t.Fatalf("want the ack of %d with code %q, got %v", seq, code, m)
	}
	return ack
}

// startRunning starts an instance and checks RUNNING and the ack.
func startRunning(t *testing.T, c *workertest.Controller, j *managerv1.Job, role string, token uint64) *managerv1.InstanceReport {
	t.Helper()
	seq := send(t, c, startMsg(j, role, token))
	r := expectReport(t, c, managerv1.InstancePhase_INSTANCE_PHASE_RUNNING)
	expectAck(t, c, seq, "")
	return r
}

// pidOf reads the pid the process runtime recorded for a service.
func pidOf(t *testing.T, dataDir, jobID, service string) int {
	t.Helper()
	paths, _ := filepath.Glob(filepath.Join(dataDir, "process", "instances", "*", service+".json"))
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		var st struct {
			JobID   string `json:"job_id"`
			Process *struct {
				PID int `json:"pid"`
			} `json:"process"`
		}
		if json.Unmarshal(b, &st) == nil && st.JobID == jobID && st.Process != nil {
			return st.Process.PID
		}
	}
	t.Fatalf("no pid recorded for %s/%s", jobID, service)
	return 0
}

// alive reports whether a process runs (and is not a zombie).
func alive(pid int) bool {
	if pid <= 0 || syscall.Kill(pid, 0) != nil {
		return false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

func waitDead(t *testing.T, pid int) {
	t.Helper()
	runtimetest.Eventually(t, wait, fmt.Sprintf("process %d ends", pid), func() bool { return !alive(pid) })
}

// inventoryFind returns the report of (job, role) in an inventory.
func inventoryFind(inv []*managerv1.InstanceReport, jobID, role string) *managerv1.InstanceReport {
	for _, r := range inv {
		if r.GetJobId() == jobID && r.GetRole() == role {
			return r
		}
	}
	return nil
}

// recordingRuntime wraps a runtime and records the service calls.
type recordingRuntime struct {
	runtime.Runtime
	calls chan string
}

func (r *recordingRuntime) StartService(ctx context.Context, key runtime.Key, service string) (runtime.ServiceStatus, error) {
	r.calls <- "start " + service
	return r.Runtime.StartService(ctx, key, service)
}

func (r *recordingRuntime) StopService(ctx context.Context, key runtime.Key, service string, grace time.Duration) error {
	r.calls <- "stop " + service
	return r.Runtime.StopService(ctx, key, service, grace)
}

// flagScript is a shell service that prints a line, waits until the file
// $1 exists, removes it, prints another line and exits with code.
func flagScript(name, flag string, code int) *managerv1.Service {
	script := `echo hello-from-job; while [ ! -e "$1" ]; do sleep 0.02; done; rm -f "$1"; echo bye-from-job; exit ` + strconv.Itoa(code)
	return &managerv1.Service{Name: name, Command: []string{"/bin/sh", "-c", script, "sh", flag}}
}
