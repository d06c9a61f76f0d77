// Package runtimetest is the conformance suite every runtime.Runtime must
// pass, and the helpers its runners share. A runtime's tests call Run with a
// Harness that makes runtimes and service specs; the services run testprog
// (the Go program in ./testprog), as a host process or as the entrypoint of
// an image built from it (see internal/testimage).
//
// The suite checks the contract runtime.Runtime states: Prepare is
// idempotent and starts nothing; a started service runs with resolved,
// reachable ports; Wait returns the exit code of a service that exits by
// itself; StopService stops with grace and kills a service that ignores
// SIGTERM once grace has passed; a new runtime over the same node (a
// restarted worker) lists and adopts a running service and Wait works on it;
// fencing tokens replace an older instance and refuse an older binding;
// Remove cleans up; two clusters with a node of the same name over one
// engine (or directory) never see or touch each other's services, and a
// service made before cluster ids is seen, and adopted, by the node's
// runtime whatever its cluster; and the runtime's refusals (missing image,
// invalid spec, unknown service) wrap the runtime package's errors.
//
// Every subtest uses its own node id and job id, so runtimes sharing one
// engine do not see each other's services, and removes everything it made.
package runtimetest

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/internal/runtime"
)

// TestProgPackage is the import path of the test program.
const TestProgPackage = "github.com/norsk-go/norsk-manager/internal/runtime/runtimetest/testprog"

// Behaviour is what the test program does when it runs.
type Behaviour struct {
	// ExitCode is the code it exits with when it exits by itself.
	ExitCode int
	// Run is how long it runs before exiting by itself; 0 runs until it is
	// signalled.
	Run time.Duration
	// IgnoreTerm makes it ignore SIGTERM. Otherwise SIGTERM makes it exit
	// with 143.
	IgnoreTerm bool
	// Listen is a container port it accepts TCP connections on (0: none).
	// Connections are answered with "testprog\n". It listens only once it
	// handles signals, so a reachable port also means "ready".
	Listen uint32
}

// Args returns the test program's arguments for b.
func (b Behaviour) Args() []string {
	args := []string{"-exit", strconv.Itoa(b.ExitCode), "-run", b.Run.String()}
	if b.IgnoreTerm {
		args = append(args, "-ignore-term")
	}
	if b.Listen != 0 {
		args = append(args, "-listen", strconv.FormatUint(uint64(b.Listen), 10))
	}
	return args
}

// Unrunnable is a service a runtime must refuse at Prepare.
type Unrunnable struct {
	Name    string
	Service *managerv1.Service
	// Err is the runtime error Prepare's error must wrap.
	Err error
}

// Harness adapts the suite to one runtime.
type Harness struct {
	// New returns a new runtime for nodeID. stateDir is a directory the
	// suite made for the node (the process runtime's Dir; the docker
	// runtime ignores it). Called again with the same nodeID and stateDir
	// it must return another instance over the same state: that is how
	// the suite restarts the worker. The suite closes what it gets.
	New func(t *testing.T, nodeID, stateDir string) runtime.Runtime
	// Service returns a service named name that runs the test program
	// with args (Behaviour.Args).
	Service func(name string, args []string) *managerv1.Service
	// Unrunnable are services Prepare must refuse.
	Unrunnable []Unrunnable
	// AdoptedExitCodeMayBeUnknown: Wait on a service a predecessor
	// started may return -1 instead of the exit code.
	AdoptedExitCodeMayBeUnknown bool
}

// volumeRemover is implemented by runtimes that keep job volumes apart from
// instances; the suite uses it to clean up.
type volumeRemover interface {
	RemoveJobVolumes(ctx context.Context, jobID string) error
}

// callTimeout bounds every runtime call of the suite.
const callTimeout = 60 * time.Second

// env is one subtest's node and job.
type env struct {
	t        *testing.T
	h        Harness
	nodeID   string
	stateDir string
	jobID    string
}

func newEnv(t *testing.T, h Harness) *env {
	t.Helper()
	suffix := randomHex(4)
	return &env{t: t, h: h, nodeID: "node-" + suffix, stateDir: t.TempDir(), jobID: "job-" + suffix}
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

// runtime returns a new runtime instance for the subtest's node, closed when
// the subtest ends.
func (e *env) runtime() runtime.Runtime {
	e.t.Helper()
	rt := e.h.New(e.t, e.nodeID, e.stateDir)
	e.t.Cleanup(func() { _ = rt.Close() })
	return rt
}

// removeOnCleanup removes the instances (and the job's volumes) when the
// subtest ends, through rt.
func (e *env) removeOnCleanup(rt runtime.Runtime, keys ...runtime.Key) {
	e.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
		defer cancel()
		for _, k := range keys {
			if err := rt.Remove(ctx, k); err != nil {
				e.t.Errorf("cleanup: remove %s: %v", k, err)
			}
		}
		if vr, ok := rt.(volumeRemover); ok {
			if err := vr.RemoveJobVolumes(ctx, e.jobID); err != nil {
				e.t.Errorf("cleanup: remove volumes of %s: %v", e.jobID, err)
			}
		}
	})
}

func (e *env) key(role string) runtime.Key { return runtime.Key{JobID: e.jobID, Role: role} }

func (e *env) spec(role string, token uint64, services ...*managerv1.Service) runtime.InstanceSpec {
	return runtime.InstanceSpec{
		Key:         e.key(role),
		NodeID:      e.nodeID,
		Token:       token,
		RuntimeRole: role,
		Job:         &managerv1.Job{JobId: e.jobID, Services: services},
		Env: map[string]string{
			runtime.EnvJobID:       e.jobID,
			runtime.EnvRole:        role,
			runtime.EnvRuntimeRole: role,
			runtime.EnvNodeID:      e.nodeID,
			runtime.EnvToken:       strconv.FormatUint(token, 10),
		},
	}
}

func (e *env) service(name string, b Behaviour) *managerv1.Service {
	svc := e.h.Service(name, b.Args())
	if b.Listen != 0 {
		svc.Ports = append(svc.Ports, &managerv1.PortMapping{
			ContainerPort: b.Listen,
			Protocol:      managerv1.Protocol_PROTOCOL_TCP,
			HostPort:      &managerv1.PortMapping_Ephemeral{Ephemeral: &managerv1.Ephemeral{}},
		})
	}
	return svc
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), callTimeout)
	t.Cleanup(cancel)
	return ctx
}

// find returns the status of one service in a List, and whether it is there.
func find(t *testing.T, ctx context.Context, rt runtime.Runtime, key runtime.Key, service string) (runtime.ServiceStatus, bool) {
	t.Helper()
	all, err := rt.List(ctx)
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	for _, s := range all {
		if s.Key == key && s.Service == service {
			return s, true
		}
	}
	return runtime.ServiceStatus{}, false
}

// servicesOf returns the statuses of key's services in a List.
func servicesOf(t *testing.T, ctx context.Context, rt runtime.Runtime, key runtime.Key) []runtime.ServiceStatus {
	t.Helper()
	all, err := rt.List(ctx)
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	var out []runtime.ServiceStatus
	for _, s := range all {
		if s.Key == key {
			out = append(out, s)
		}
	}
	return out
}

// Eventually polls cond every 20 ms until it holds, and fails the test if it
// does not within timeout.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, timeout)
		}
		<-tick.C
	}
}

// dial connects to a test program's port and reads its greeting.
func dial(url string) error {
	c, err := net.DialTimeout("tcp", url, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if line != "testprog\n" {
		return fmt.Errorf("greeting %q", line)
	}
	return nil
}

// waitReachable waits until the service's first port answers: it is then
// running and handles signals.
func waitReachable(t *testing.T, st runtime.ServiceStatus) {
	t.Helper()
	if len(st.Ports) == 0 {
		t.Fatalf("service %s has no resolved ports: %+v", st.Service, st)
	}
	url := st.Ports[0].GetUrl()
	var last error
	Eventually(t, 30*time.Second, "port "+url+" answers", func() bool {
		last = dial(url)
		return last == nil
	})
}

type waitResult struct {
	code int
	err  error
}

// waitAsync calls Wait in a goroutine that ends with the call (bounded by
// ctx) and hands its result over a buffered channel, so that it never
// blocks and never touches the test after it ends.
func waitAsync(ctx context.Context, rt runtime.Runtime, key runtime.Key, service string) <-chan waitResult {
	ch := make(chan waitResult, 1)
	go func() {
		code, err := rt.Wait(ctx, key, service)
		ch <- waitResult{code, err}
	}()
	return ch
}

// BuildTestProg builds the test program into dir and returns its path.
func BuildTestProg(ctx context.Context, dir string) (string, error) {
	out := filepath.Join(dir, "testprog")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, TestProgPackage)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %w\n%s", TestProgPackage, err, b)
	}
	return out, nil
}

// Run runs the conformance suite against the runtime h makes.
func Run(t *testing.T, h Harness) {
	if h.New == nil || h.Service == nil {
		t.Fatal("runtimetest: Harness needs New and Service")
	}
	tests := []struct {
		name string
		fn   func(t *testing.T, h Harness)
	}{
		{"PrepareIsIdempotentAndStartsNothing", testPrepare},
		{"StartResolvesPorts", testStart},
		{"WaitReturnsExitCode", testWait},
		{"StopWithGrace", testStop},
		{"AdoptionAfterRestart", testAdoption},
		{"FencingTokens", testFencing},
		{"RemoveCleansUp", testRemove},
		{"NodesAreIsolated", testIsolation},
		{"ClustersAreIsolated", testClusters},
		{"Refusals", testRefusals},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, h)
		})
	}
}

func testPrepare(t *testing.T, h Harness) {
	e := newEnv(t, h)
	ctx := ctxFor(t)
	rt := e.runtime()
	spec := e.spec("primary", 7, e.service("a", Behaviour{}), e.service("b", Behaviour{Listen: 8080}))
	e.removeOnCleanup(rt, spec.Key)

	for i := range 2 {
		if err := rt.Prepare(ctx, spec); err != nil {
			t.Fatalf("Prepare #%d: %v", i+1, err)
		}
	}
	got := servicesOf(t, ctx, rt, spec.Key)
	if len(got) != 2 {
		t.Fatalf("List after Prepare twice: %d services, want 2: %+v", len(got), got)
	}
	for i, want := range []string{"a", "b"} {
		s := got[i]
		if s.Service != want || !s.Created || s.Running || s.Token != 7 || s.RuntimeRole != "primary" || s.ExitCode != -1 || len(s.Ports) != 0 {
			t.Errorf("service %d = %+v, want %s created, not running, token 7, runtime role primary, exit code -1, no ports", i, s, want)
		}
	}

	// A service never started: Wait returns at once, Stop is a no-op.
	code, err := rt.Wait(ctx, spec.Key, "a")
	if err != nil || code != -1 {
		t.Errorf("Wait on a prepared service = %d, %v; want -1, nil", code, err)
	}
	if err := rt.StopService(ctx, spec.Key, "a", time.Second); err != nil {
		t.Errorf("StopService on a prepared service: %v", err)
	}
}

func testStart(t *testing.T, h Harness) {
	e := newEnv(t, h)
	ctx := ctxFor(t)
	rt := e.runtime()
	spec := e.spec("primary", 1, e.service("web", Behaviour{Listen: 8080}))
	e.removeOnCleanup(rt, spec.Key)
	if err := rt.Prepare(ctx, spec); err != nil {
		t.Fatalf("Prepare: %v", err)
	}

	st, err := rt.StartService(ctx, spec.Key, "web")
	if err != nil {
		t.Fatalf("StartService: %v", err)
	}
	if !st.Running || st.Service != "web" || st.Key != spec.Key || st.StartedAt.IsZero() {
		t.Fatalf("StartService status = %+v, want web running with a start time", st)
	}
	if len(st.Ports) != 1 {
		t.Fatalf("resolved ports = %v, want one", st.Ports)
	}
	p := st.Ports[0]
	if p.GetTarget() != 8080 || p.GetPublished() == 0 || p.GetProtocol() != managerv1.Protocol_PROTOCOL_TCP ||
		p.GetUrl() != net.JoinHostPort("127.0.0.1", strconv.FormatUint(uint64(p.GetPublished()), 10)) {
		t.Fatalf("resolved port = %v, want target 8080 published on 127.0.0.1:<port> over TCP", p)
	}
	waitReachable(t, st)

	again, err := rt.StartService(ctx, spec.Key, "web")
	if err != nil {
		t.Fatalf("StartService on a running service: %v", err)
	}
	if !again.Running || !again.StartedAt.Equal(st.StartedAt) || len(again.Ports) != 1 || again.Ports[0].GetPublished() != p.GetPublished() {
		t.Errorf("StartService on a running service = %+v, want the same running service %+v", again, st)
	}
	listed, ok := find(t, ctx, rt, spec.Key, "web")
	if !ok || !listed.Running || listed.ExitCode != -1 || len(listed.Ports) != 1 || listed.Ports[0].GetUrl() != p.GetUrl() {
		t.Errorf("List = %+v (found %v), want running with port %s", listed, ok, p.GetUrl())
	}
}

func testWait(t *testing.T, h Harness) {
	for _, code := range []int{0, 3} {
		t.Run(fmt.Sprintf("exit%d", code), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, h)
			ctx := ctxFor(t)
			rt := e.runtime()
			spec := e.spec("primary", 1, e.service("job", Behaviour{ExitCode: code, Run: 100 * time.Millisecond}))
			e.removeOnCleanup(rt, spec.Key)
			if err := rt.Prepare(ctx, spec); err != nil {
				t.Fatalf("Prepare: %v", err)
			}
			// Twice: the second start is the supervisor's restart of a
			// service that exited.
			for i := range 2 {
				if _, err := rt.StartService(ctx, spec.Key, "job"); err != nil {
					t.Fatalf("StartService #%d: %v", i+1, err)
				}
				got, err := rt.Wait(ctx, spec.Key, "job")
				if err != nil || got != code {
					t.Fatalf("Wait #%d = %d, %v; want %d", i+1, got, err, code)
				}
				st, ok := find(t, ctx, rt, spec.Key, "job")
				if !ok || st.Running || st.ExitCode != code || !st.Created {
					t.Fatalf("List after exit #%d = %+v (found %v), want created, not running, exit code %d", i+1, st, ok, code)
				}
				// Wait on a service that has exited returns at once.
				if got, err := rt.Wait(ctx, spec.Key, "job"); err != nil || got != code {
					t.Fatalf("second Wait #%d = %d, %v; want %d", i+1, got, err, code)
				}
			}
		})
	}
}

func testStop(t *testing.T, h Harness) {
	tests := []struct {
		name       string
		ignoreTerm bool
		grace      time.Duration
		want       int
	}{
		{name: "ExitsOnSIGTERM", grace: 20 * time.Second, want: 143},
		{name: "IgnoresSIGTERMKilledAfterGrace", ignoreTerm: true, grace: 500 * time.Millisecond, want: 137},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, h)
			ctx := ctxFor(t)
			rt := e.runtime()
			spec := e.spec("primary", 1, e.service("svc", Behaviour{IgnoreTerm: tc.ignoreTerm, Listen: 9000}))
			e.removeOnCleanup(rt, spec.Key)
			if err := rt.Prepare(ctx, spec); err != nil {
				t.Fatalf("Prepare: %v", err)
			}
			st, err := rt.StartService(ctx, spec.Key, "svc")
			if err != nil {
				t.Fatalf("StartService: %v", err)
			}
			waitReachable(t, st) // it handles signals now

			waited := waitAsync(ctx, rt, spec.Key, "svc")
			if err := rt.StopService(ctx, spec.Key, "svc", tc.grace); err != nil {
				t.Fatalf("StopService: %v", err)
			}
			if got := <-waited; got.err != nil || got.code != tc.want {
				t.Errorf("Wait after stop = %d, %v; want %d", got.code, got.err, tc.want)
			}
			after, ok := find(t, ctx, rt, spec.Key, "svc")
			if !ok || after.Running || after.ExitCode != tc.want {
				t.Errorf("List after stop = %+v (found %v), want not running, exit code %d", after, ok, tc.want)
			}
			if err := rt.StopService(ctx, spec.Key, "svc", tc.grace); err != nil {
				t.Errorf("StopService on a stopped service: %v", err)
			}
		})
	}
}

func testAdoption(t *testing.T, h Harness) {
	e := newEnv(t, h)
	ctx := ctxFor(t)
	first := e.runtime()
	spec := e.spec("backup", 42, e.service("svc", Behaviour{Listen: 7000}))
	if err := first.Prepare(ctx, spec); err != nil {
		t.Fatalf("Prepare: %v", err)
	}
	started, err := first.StartService(ctx, spec.Key, "svc")
	if err != nil {
		t.Fatalf("StartService: %v", err)
	}
	waitReachable(t, started)
	// The worker restarts: the first runtime goes, a new one comes.
	if err := first.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}

	second := e.runtime()
	e.removeOnCleanup(second, spec.Key)
	st, ok := find(t, ctx, second, spec.Key, "svc")
	if !ok || !st.Running || st.Token != 42 || st.RuntimeRole != "backup" || len(st.Ports) != 1 ||
		st.Ports[0].GetUrl() != started.Ports[0].GetUrl() || !st.StartedAt.Equal(started.StartedAt) {
		t.Fatalf("new runtime lists %+v (found %v), want the running service %+v", st, ok, started)
	}
	again, err := second.StartService(ctx, spec.Key, "svc")
	if err != nil || !again.Running || !again.StartedAt.Equal(started.StartedAt) {
		t.Fatalf("StartService on the adopted service = %+v, %v; want it running, not restarted", again, err)
	}
	if err := dial(started.Ports[0].GetUrl()); err != nil {
		t.Fatalf("adopted service unreachable: %v", err)
	}

	waited := waitAsync(ctx, second, spec.Key, "svc")
	if err := second.StopService(ctx, spec.Key, "svc", 20*time.Second); err != nil {
		t.Fatalf("StopService on the adopted service: %v", err)
	}
	got := <-waited
	if got.err != nil || got.code != 143 && !(h.AdoptedExitCodeMayBeUnknown && got.code == -1) {
		t.Errorf("Wait on the adopted service = %d, %v; want 143", got.code, got.err)
	}
	if after, ok := find(t, ctx, second, spec.Key, "svc"); !ok || after.Running {
		t.Errorf("List after stopping the adopted service = %+v (found %v), want not running", after, ok)
	}
}

func testFencing(t *testing.T, h Harness) {
	e := newEnv(t, h)
	ctx := ctxFor(t)
	rt := e.runtime()
	old := e.spec("primary", 5, e.service("svc", Behaviour{Listen: 7000}), e.service("gone", Behaviour{}))
	e.removeOnCleanup(rt, old.Key)
	if err := rt.Prepare(ctx, old); err != nil {
		t.Fatalf("Prepare token 5: %v", err)
	}
	st, err := rt.StartService(ctx, old.Key, "svc")
	if err != nil {
		t.Fatalf("StartService: %v", err)
	}
	waitReachable(t, st)

	// A newer binding replaces the instance: the running service of token
	// 5 is removed, the new one is created and not started; a service the
	// new spec lacks is gone.
	newer := e.spec("primary", 6, e.service("svc", Behaviour{}))
	if err := rt.Prepare(ctx, newer); err != nil {
		t.Fatalf("Prepare token 6: %v", err)
	}
	got := servicesOf(t, ctx, rt, old.Key)
	if len(got) != 1 || got[0].Service != "svc" || got[0].Token != 6 || got[0].Running {
		t.Fatalf("after Prepare with token 6: %+v, want svc alone, token 6, not running", got)
	}

	// The older binding is refused and changes nothing.
	err = rt.Prepare(ctx, old)
	if !errors.Is(err, runtime.ErrSuperseded) {
		t.Fatalf("Prepare token 5 after 6 = %v, want ErrSuperseded", err)
	}
	got = servicesOf(t, ctx, rt, old.Key)
	if len(got) != 1 || got[0].Token != 6 {
		t.Fatalf("after a refused Prepare: %+v, want svc with token 6", got)
	}
}

func testRemove(t *testing.T, h Harness) {
	e := newEnv(t, h)
	ctx := ctxFor(t)
	rt := e.runtime()
	spec := e.spec("primary", 1, e.service("a", Behaviour{Listen: 7000}), e.service("b", Behaviour{}))
	other := e.spec("backup", 1, e.service("a", Behaviour{}))
	e.removeOnCleanup(rt, spec.Key, other.Key)
	for _, s := range []runtime.InstanceSpec{spec, other} {
		if err := rt.Prepare(ctx, s); err != nil {
			t.Fatalf("Prepare %s: %v", s.Key, err)
		}
	}
	st, err := rt.StartService(ctx, spec.Key, "a")
	if err != nil {
		t.Fatalf("StartService: %v", err)
	}
	waitReachable(t, st)

	for i := range 2 {
		if err := rt.Remove(ctx, spec.Key); err != nil {
			t.Fatalf("Remove #%d: %v", i+1, err)
		}
	}
	if got := servicesOf(t, ctx, rt, spec.Key); len(got) != 0 {
		t.Errorf("List after Remove: %+v, want nothing of %s", got, spec.Key)
	}
	if got := servicesOf(t, ctx, rt, other.Key); len(got) != 1 {
		t.Errorf("List after Remove of %s: %+v, want %s untouched", spec.Key, got, other.Key)
	}
	if err := dial(st.Ports[0].GetUrl()); err == nil {
		t.Errorf("removed service still answers at %s", st.Ports[0].GetUrl())
	}
	if _, err := rt.StartService(ctx, spec.Key, "a"); !errors.Is(err, runtime.ErrNotFound) {
		t.Errorf("StartService after Remove = %v, want ErrNotFound", err)
	}
	if _, err := rt.Wait(ctx, spec.Key, "a"); !errors.Is(err, runtime.ErrNotFound) {
		t.Errorf("Wait after Remove = %v, want ErrNotFound", err)
	}
	if err := rt.StopService(ctx, spec.Key, "a", time.Second); !errors.Is(err, runtime.ErrNotFound) {
		t.Errorf("StopService after Remove = %v, want ErrNotFound", err)
	}
}

func testIsolation(t *testing.T, h Harness) {
	a, b := newEnv(t, h), newEnv(t, h)
	b.jobID = a.jobID // the same job on two nodes
	ctx := ctxFor(t)
	rtA, rtB := a.runtime(), b.runtime()
	spec := a.spec("primary", 1, a.service("svc", Behaviour{}))
	a.removeOnCleanup(rtA, spec.Key)
	if err := rtA.Prepare(ctx, spec); err != nil {
		t.Fatalf("Prepare on node A: %v", err)
	}
	all, err := rtB.List(ctx)
	if err != nil {
		t.Fatalf("List on node B: %v", err)
	}
	for _, s := range all {
		if s.Key == spec.Key {
			t.Errorf("node B lists node A's service %+v", s)
		}
	}
	if _, err := rtB.StartService(ctx, spec.Key, "svc"); !errors.Is(err, runtime.ErrNotFound) {
		t.Errorf("node B starts node A's service: %v, want ErrNotFound", err)
	}
	if err := rtB.Remove(ctx, spec.Key); err != nil {
		t.Errorf("Remove on node B: %v", err)
	}
	if got := servicesOf(t, ctx, rtA, spec.Key); len(got) != 1 {
		t.Errorf("node A after node B's Remove: %+v, want its service", got)
	}
}

// Cluster ids of testClusters.
const (
	clusterA = "aaaaaaaa0000000000000000000000a1"
	clusterB = "bbbbbbbb0000000000000000000000b2"
)

// testClusters: two runtimes of one node name, in two clusters, over the
// same engine or directory (two Managers' workers on one host): neither
// lists, starts, stops or removes the other's services; a runtime that
// knows no cluster yet sees neither; a service made without a cluster id
// (before cluster ids) is seen by every cluster's runtime of the node, which
// can adopt it (Wait, Stop); and a runtime refuses a second cluster id.
func testClusters(t *testing.T, h Harness) {
	e := newEnv(t, h)
	ctx := ctxFor(t)
	inCluster := func(id string) runtime.Runtime {
		rt := e.runtime()
		if err := rt.SetClusterID(id); err != nil {
			t.Fatalf("SetClusterID(%q): %v", id, err)
		}
		return rt
	}
	rtA, rtB, rtNone := inCluster(clusterA), inCluster(clusterB), e.runtime()

	specA := e.spec("a", 1, e.service("svc", Behaviour{}))
	specB := e.spec("b", 1, e.service("svc", Behaviour{}))
	specOld := e.spec("old", 1, e.service("svc", Behaviour{}))
	e.removeOnCleanup(rtA, specA.Key)
	e.removeOnCleanup(rtB, specB.Key)
	e.removeOnCleanup(rtNone, specOld.Key)
	for _, x := range []struct {
		rt   runtime.Runtime
		spec runtime.InstanceSpec
	}{{rtA, specA}, {rtB, specB}, {rtNone, specOld}} {
		if err := x.rt.Prepare(ctx, x.spec); err != nil {
			t.Fatalf("Prepare %s: %v", x.spec.Key, err)
		}
		if _, err := x.rt.StartService(ctx, x.spec.Key, "svc"); err != nil {
			t.Fatalf("StartService %s: %v", x.spec.Key, err)
		}
	}

	keysOf := func(rt runtime.Runtime) map[runtime.Key]string {
		all, err := rt.List(ctx)
		if err != nil {
			t.Fatalf("List: %v", err)
		}
		out := map[runtime.Key]string{}
		for _, s := range all {
			if s.Key.JobID == e.jobID {
				out[s.Key] = s.ClusterID
			}
		}
		return out
	}
	for _, c := range []struct {
		name string
		rt   runtime.Runtime
		want map[runtime.Key]string
	}{
		{"cluster A", rtA, map[runtime.Key]string{specA.Key: clusterA, specOld.Key: ""}},
		{"cluster B", rtB, map[runtime.Key]string{specB.Key: clusterB, specOld.Key: ""}},
		{"no cluster", rtNone, map[runtime.Key]string{specOld.Key: ""}},
	} {
		if got := keysOf(c.rt); fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("%s lists %v, want %v (key → cluster label)", c.name, got, c.want)
		}
	}

	// B acts on A's key as on an absent one.
	if _, err := rtB.StartService(ctx, specA.Key, "svc"); !errors.Is(err, runtime.ErrNotFound) {
		t.Errorf("cluster B starts cluster A's service: %v, want ErrNotFound", err)
	}
	if err := rtB.StopService(ctx, specA.Key, "svc", time.Second); !errors.Is(err, runtime.ErrNotFound) {
		t.Errorf("cluster B stops cluster A's service: %v, want ErrNotFound", err)
	}
	if err := rtB.Remove(ctx, specA.Key); err != nil {
		t.Errorf("cluster B's Remove of cluster A's key: %v", err)
	}
	if err := rtNone.Remove(ctx, specA.Key); err != nil {
		t.Errorf("Remove of cluster A's key by a runtime of no cluster: %v", err)
	}
	if st, ok := find(t, ctx, rtA, specA.Key, "svc"); !ok || !st.Running {
		t.Errorf("cluster A's service after the others' Remove: %+v (listed %v), want it running", st, ok)
	}

	// The service made before cluster ids is adopted by A: waited on and
	// stopped.
	waited := waitAsync(ctx, rtA, specOld.Key, "svc")
	if err := rtA.StopService(ctx, specOld.Key, "svc", time.Second); err != nil {
		t.Errorf("cluster A stops the service made without a cluster id: %v", err)
	}
	select {
	case r := <-waited:
		if r.err != nil {
			t.Errorf("cluster A's Wait on the service made without a cluster id: %v", r.err)
		}
	case <-ctx.Done():
		t.Fatal("cluster A's Wait on the stopped service did not return")
	}

	if err := rtA.SetClusterID(clusterA); err != nil {
		t.Errorf("SetClusterID with the same id: %v", err)
	}
	if err := rtA.SetClusterID(clusterB); err == nil {
		t.Error("a runtime of cluster A took cluster B's id")
	}
}

func testRefusals(t *testing.T, h Harness) {
	type refusal struct {
		name string
		svcs func(e *env) []*managerv1.Service
		want error
	}
	tests := []refusal{
		{"DuplicateService", func(e *env) []*managerv1.Service {
			return []*managerv1.Service{e.service("a", Behaviour{}), e.service("a", Behaviour{})}
		}, runtime.ErrInvalidSpec},
		{"NoName", func(e *env) []*managerv1.Service {
			return []*managerv1.Service{e.service("", Behaviour{})}
		}, runtime.ErrInvalidSpec},
		{"ContainerPortZero", func(e *env) []*managerv1.Service {
			s := e.service("a", Behaviour{})
			s.Ports = []*managerv1.PortMapping{{ContainerPort: 0}}
			return []*managerv1.Service{s}
		}, runtime.ErrInvalidSpec},
		{"InvertedPortRange", func(e *env) []*managerv1.Service {
			s := e.service("a", Behaviour{})
			s.Ports = []*managerv1.PortMapping{{ContainerPort: 80, HostPort: &managerv1.PortMapping_Range{Range: &managerv1.PortRange{MinPort: 9000, MaxPort: 8000}}}}
			return []*managerv1.Service{s}
		}, runtime.ErrInvalidSpec},
		{"RelativeContainerPath", func(e *env) []*managerv1.Service {
			s := e.service("a", Behaviour{})
			s.VolumeMounts = []*managerv1.VolumeMount{{Source: "data", ContainerPath: "data"}}
			return []*managerv1.Service{s}
		}, runtime.ErrInvalidSpec},
	}
	for _, u := range h.Unrunnable {
		u := u
		tests = append(tests, refusal{u.Name, func(e *env) []*managerv1.Service {
			// A runnable service first: a refusal creates nothing at all.
			return []*managerv1.Service{e.service("fine", Behaviour{}), u.Service}
		}, u.Err})
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, h)
			ctx := ctxFor(t)
			rt := e.runtime()
			spec := e.spec("primary", 1, tc.svcs(e)...)
			e.removeOnCleanup(rt, spec.Key)
			err := rt.Prepare(ctx, spec)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Prepare = %v, want an error wrapping %v", err, tc.want)
			}
			t.Logf("Prepare refused: %v", err)
			if got := servicesOf(t, ctx, rt, spec.Key); len(got) != 0 {
				t.Errorf("a refused Prepare left %+v", got)
			}
		})
	}
	t.Run("UnknownService", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, h)
		ctx := ctxFor(t)
		rt := e.runtime()
		spec := e.spec("primary", 1, e.service("a", Behaviour{}))
		e.removeOnCleanup(rt, spec.Key)
		if err := rt.Prepare(ctx, spec); err != nil {
			t.Fatalf("Prepare: %v", err)
		}
		if _, err := rt.StartService(ctx, spec.Key, "nope"); !errors.Is(err, runtime.ErrNotFound) {
			t.Errorf("StartService of an unknown service = %v, want ErrNotFound", err)
		}
		if _, err := rt.Wait(ctx, spec.Key, "nope"); !errors.Is(err, runtime.ErrNotFound) {
			t.Errorf("Wait on an unknown service = %v, want ErrNotFound", err)
		}
		if err := rt.StopService(ctx, spec.Key, "nope", time.Second); !errors.Is(err, runtime.ErrNotFound) {
			t.Errorf("StopService of an unknown service = %v, want ErrNotFound", err)
		}
		if err := rt.Remove(ctx, e.key("nobody")); err != nil {
			t.Errorf("Remove of an absent instance = %v, want nil", err)
		}
	})
}
