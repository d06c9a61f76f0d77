package fake_test

import (
	"context"
	"errors"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/internal/runtime"
	"github.com/norsk-go/norsk-manager/internal/runtime/fake"
)

// The fake's own logic beyond what the conformance suite asks of every
// runtime: Exit's edge cases, restarts after an exit, Host.Close, its port
// binding, its refusals of what the process runtime also refuses, and its
// log's bound.

var testKey = runtime.Key{JobID: "job", Role: "primary"}

// prepared makes a Host and a runtime of node-1 with svcs prepared under
// testKey at token 1.
func prepared(t *testing.T, svcs ...*managerv1.Service) (*fake.Host, *fake.Runtime) {
	t.Helper()
	h := fake.NewHost()
	t.Cleanup(h.Close)
	rt := h.New("node-1")
	spec := runtime.InstanceSpec{Key: testKey, NodeID: "node-1", Token: 1, Job: &managerv1.Job{JobId: testKey.JobID, Services: svcs}}
	if err := rt.Prepare(t.Context(), spec); err != nil {
		t.Fatalf("Prepare: %v", err)
	}
	return h, rt
}

func status(t *testing.T, rt runtime.Runtime, name string) runtime.ServiceStatus {
	t.Helper()
	all, err := rt.List(t.Context())
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	for _, s := range all {
		if s.Key == testKey && s.Service == name {
			return s
		}
	}
	t.Fatalf("List has no %s: %+v", name, all)
	return runtime.ServiceStatus{}
}

// TestExitEdges: Exit of a service never started, or already exited,
// changes nothing.
func TestExitEdges(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	_, rt := prepared(t, testService("svc", nil))
	if err := rt.Exit(testKey, "svc", 3); err != nil {
		t.Fatalf("Exit of a prepared service: %v", err)
	}
	if st := status(t, rt, "svc"); st.Running || st.ExitCode != -1 || !st.StartedAt.IsZero() {
		t.Errorf("after Exit of a service never started: %+v; want created, not run, exit code -1", st)
	}
	if _, err := rt.StartService(ctx, testKey, "svc"); err != nil {
		t.Fatalf("StartService: %v", err)
	}
	if err := rt.Exit(testKey, "svc", 4); err != nil {
		t.Fatalf("Exit: %v", err)
	}
	if err := rt.Exit(testKey, "svc", 5); err != nil {
		t.Fatalf("second Exit: %v", err)
	}
	if st := status(t, rt, "svc"); st.Running || st.ExitCode != 4 {
		t.Errorf("after Exit 4 then Exit 5: %+v; want the first exit's code, 4", st)
	}
	if code, err := rt.Wait(ctx, testKey, "svc"); err != nil || code != 4 {
		t.Errorf("Wait = %d, %v; want 4", code, err)
	}
}

// TestRestartAfterExit: a service started again after it exited runs
// anew — no exit code, a new start time — and its next exit is the one
// Wait and List report; a Wait on the first run has already returned its
// code.
func TestRestartAfterExit(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	_, rt := prepared(t, testService("svc", nil))
	first, err := rt.StartService(ctx, testKey, "svc")
	if err != nil {
		t.Fatalf("StartService: %v", err)
	}
	if err := rt.Exit(testKey, "svc", 1); err != nil {
		t.Fatalf("Exit: %v", err)
	}
	second, err := rt.StartService(ctx, testKey, "svc")
	if err != nil {
		t.Fatalf("StartService again: %v", err)
	}
	if !second.Running || second.ExitCode != -1 || second.StartedAt.Before(first.StartedAt) {
		t.Errorf("restarted: %+v; want running, exit code -1, started no earlier than the first run (%v)", second, first.StartedAt)
	}
	waited := make(chan int, 1)
	go func() {
		code, _ := rt.Wait(ctx, testKey, "svc")
		waited <- code
	}()
	if err := rt.Exit(testKey, "svc", 2); err != nil {
		t.Fatalf("Exit of the second run: %v", err)
	}
	if code := <-waited; code != 2 {
		t.Errorf("Wait on the second run = %d, want 2", code)
	}
	if st := status(t, rt, "svc"); st.ExitCode != 2 || st.Running {
		t.Errorf("List after the second exit: %+v; want exit code 2", st)
	}
	logs, _ := rt.Logs(ctx, testKey, "svc", 0)
	if strings.Count(logs, "started") != 2 || !strings.Contains(logs, "exited with code 1") || !strings.Contains(logs, "exited with code 2") {
		t.Errorf("Logs = %q; want two starts and both exits", logs)
	}
}

// TestHostCloseKillsEverything: Host.Close kills every service of every
// node, frees its ports and forgets it.
func TestHostCloseKillsEverything(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	h := fake.NewHost()
	var ports []string
	for _, node := range []string{"node-1", "node-2"} {
		rt := h.New(node)
		svc := testService("web", []string{"-listen", "80"})
		svc.Ports = []*managerv1.PortMapping{{ContainerPort: 80}}
		spec := runtime.InstanceSpec{Key: testKey, NodeID: node, Token: 1, Job: &managerv1.Job{JobId: testKey.JobID, Services: []*managerv1.Service{svc}}}
		if err := rt.Prepare(ctx, spec); err != nil {
			t.Fatalf("Prepare on %s: %v", node, err)
		}
		st, err := rt.StartService(ctx, testKey, "web")
		if err != nil {
			t.Fatalf("StartService on %s: %v", node, err)
		}
		ports = append(ports, st.Ports[0].GetUrl())
	}
	h.Close()
	for _, node := range []string{"node-1", "node-2"} {
		rt := h.New(node)
		if all, err := rt.List(ctx); err != nil || len(all) != 0 {
			t.Errorf("%s lists %+v, %v after Host.Close; want nothing", node, all, err)
		}
		if _, err := rt.Wait(ctx, testKey, "web"); !errors.Is(err, runtime.ErrNotFound) {
			t.Errorf("Wait on %s after Host.Close = %v; want ErrNotFound", node, err)
		}
	}
	for _, u := range ports {
		if c, err := net.Dial("tcp", u); err == nil {
			c.Close()
			t.Errorf("%s still answers after Host.Close", u)
		}
	}
}

// TestPorts: a service's ports as the fake binds them — a specific host
// port, the first free port of a range, UDP — and the -listen port greets.
func TestPorts(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	// Two free ports, held while the service is prepared: one to take
	// by number, one that makes a range skip it.
	hold := func() (net.Listener, uint32) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		return ln, uint32(ln.Addr().(*net.TCPAddr).Port)
	}
	lnA, portA := hold()
	lnB, portB := hold()
	lnA.Close() // free: the service takes it by number
	defer lnB.Close()
	if portB == 65535 {
		t.Skip("no port above the held one to fall back to")
	}
	lo, hi := portB, portB+1
	svc := testService("web", []string{"-listen", "80"})
	svc.Ports = []*managerv1.PortMapping{
		{ContainerPort: 80, HostPort: &managerv1.PortMapping_Specific{Specific: portA}},
		{ContainerPort: 81, HostPort: &managerv1.PortMapping_Range{Range: &managerv1.PortRange{MinPort: lo, MaxPort: hi}}},
		{ContainerPort: 82, Protocol: managerv1.Protocol_PROTOCOL_UDP},
	}
	_, rt := prepared(t, svc)
	st, err := rt.StartService(ctx, testKey, "web")
	if err != nil {
		// Another process may have taken portA or portB+1 meanwhile.
		t.Skipf("StartService: %v (a port was taken meanwhile)", err)
	}
	if len(st.Ports) != 3 {
		t.Fatalf("ports %v; want three", st.Ports)
	}
	byTarget := map[uint32]*managerv1.ResolvedPortMapping{}
	for _, p := range st.Ports {
		byTarget[p.GetTarget()] = p
	}
	if p := byTarget[80]; p.GetPublished() != portA || p.GetUrl() != net.JoinHostPort("127.0.0.1", strconv.Itoa(int(portA))) {
		t.Errorf("port 80 = %v; want published on %d as asked", p, portA)
	}
	if p := byTarget[81]; p.GetPublished() != hi {
		t.Errorf("port 81 = %v; want %d, the range's first free port (%d is held)", p, hi, portB)
	}
	if p := byTarget[82]; p.GetProtocol() != managerv1.Protocol_PROTOCOL_UDP || p.GetPublished() == 0 {
		t.Errorf("port 82 = %v; want a UDP port", p)
	}
	c, err := net.DialTimeout("tcp", byTarget[80].GetUrl(), 5*time.Second)
	if err != nil {
		t.Fatalf("dial the -listen port: %v", err)
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	greeting, _ := io.ReadAll(c)
	if string(greeting) != "testprog\n" {
		t.Errorf("the -listen port answered %q; want the test program's greeting", greeting)
	}
	if err := rt.StopService(ctx, testKey, "web", time.Second); err != nil {
		t.Fatalf("StopService: %v", err)
	}
	if c, err := net.Dial("tcp", byTarget[80].GetUrl()); err == nil {
		c.Close()
		t.Errorf("port %d still bound after the service stopped", portA)
	}
}

// TestFakeRefusals: specs the fake refuses that the conformance suite
// does not cover; a refused Prepare creates nothing.
func TestFakeRefusals(t *testing.T) {
	t.Parallel()
	withPort := func(pm *managerv1.PortMapping) *managerv1.Service {
		s := testService("svc", nil)
		s.Ports = []*managerv1.PortMapping{pm}
		return s
	}
	tests := []struct {
		name string
		spec func() runtime.InstanceSpec
	}{
		{"OtherNode", func() runtime.InstanceSpec {
			return runtime.InstanceSpec{Key: testKey, NodeID: "node-2", Token: 1, Job: &managerv1.Job{JobId: "job", Services: []*managerv1.Service{testService("svc", nil)}}}
		}},
		{"NoJob", func() runtime.InstanceSpec { return runtime.InstanceSpec{Key: testKey, NodeID: "node-1", Token: 1} }},
		{"BadVolumeName", func() runtime.InstanceSpec {
			return runtime.InstanceSpec{Key: testKey, Token: 1, Job: &managerv1.Job{JobId: "job", Volumes: []string{"../up"}, Services: []*managerv1.Service{testService("svc", nil)}}}
		}},
		{"BadVolumeSource", func() runtime.InstanceSpec {
			s := testService("svc", nil)
			s.VolumeMounts = []*managerv1.VolumeMount{{Source: "a b", ContainerPath: "/data"}}
			return runtime.InstanceSpec{Key: testKey, Token: 1, Job: &managerv1.Job{JobId: "job", Services: []*managerv1.Service{s}}}
		}},
		{"ContainerPortTooHigh", func() runtime.InstanceSpec {
			return runtime.InstanceSpec{Key: testKey, Token: 1, Job: &managerv1.Job{JobId: "job", Services: []*managerv1.Service{withPort(&managerv1.PortMapping{ContainerPort: 70000})}}}
		}},
		{"SpecificPortZero", func() runtime.InstanceSpec {
			return runtime.InstanceSpec{Key: testKey, Token: 1, Job: &managerv1.Job{JobId: "job", Services: []*managerv1.Service{withPort(&managerv1.PortMapping{ContainerPort: 80, HostPort: &managerv1.PortMapping_Specific{}})}}}
		}},
		{"ListenOutOfRange", func() runtime.InstanceSpec {
			return runtime.InstanceSpec{Key: testKey, Token: 1, Job: &managerv1.Job{JobId: "job", Services: []*managerv1.Service{testService("svc", []string{"-listen", "70000"})}}}
		}},
		{"StrayArgument", func() runtime.InstanceSpec {
			return runtime.InstanceSpec{Key: testKey, Token: 1, Job: &managerv1.Job{JobId: "job", Services: []*managerv1.Service{testService("svc", []string{"-exit", "1", "extra"})}}}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := fake.NewHost()
			t.Cleanup(h.Close)
			rt := h.New("node-1")
			if err := rt.Prepare(t.Context(), tc.spec()); !errors.Is(err, runtime.ErrInvalidSpec) {
				t.Fatalf("Prepare = %v; want ErrInvalidSpec", err)
			}
			if all, _ := rt.List(t.Context()); len(all) != 0 {
				t.Errorf("a refused Prepare left %+v", all)
			}
		})
	}
}

// TestPrepareLeavesAnotherClustersServices: a service of another cluster
// at the key makes Prepare refuse (it is left alone, not replaced), even
// with a newer token.
func TestPrepareLeavesAnotherClustersServices(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	h := fake.NewHost()
	t.Cleanup(h.Close)
	a, b := h.New("node-1"), h.New("node-1")
	if err := a.SetClusterID("aaaaaaaa0000000000000000000000a1"); err != nil {
		t.Fatal(err)
	}
	if err := b.SetClusterID("bbbbbbbb0000000000000000000000b2"); err != nil {
		t.Fatal(err)
	}
	spec := func(token uint64) runtime.InstanceSpec {
		return runtime.InstanceSpec{Key: testKey, NodeID: "node-1", Token: token, Job: &managerv1.Job{JobId: "job", Services: []*managerv1.Service{testService("svc", nil)}}}
	}
	if err := a.Prepare(ctx, spec(1)); err != nil {
		t.Fatalf("cluster A's Prepare: %v", err)
	}
	if err := b.Prepare(ctx, spec(2)); err == nil || !strings.Contains(err.Error(), "belongs to cluster") {
		t.Fatalf("cluster B's Prepare over cluster A's service = %v; want a refusal naming the other cluster", err)
	}
	if st := status(t, a, "svc"); st.Token != 1 {
		t.Errorf("cluster A's service after B's refused Prepare: %+v; want it untouched (token 1)", st)
	}
}

// TestStopIgnoringTermHonoursContext: a stop waiting out the grace of a
// program that ignores SIGTERM returns when its context ends, and leaves
// the program running.
func TestStopIgnoringTermHonoursContext(t *testing.T) {
	t.Parallel()
	_, rt := prepared(t, testService("svc", []string{"-ignore-term"}))
	if _, err := rt.StartService(t.Context(), testKey, "svc"); err != nil {
		t.Fatalf("StartService: %v", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := rt.StopService(ctx, testKey, "svc", time.Hour); !errors.Is(err, context.Canceled) {
		t.Fatalf("StopService with an ended context = %v; want context.Canceled", err)
	}
	if st := status(t, rt, "svc"); !st.Running {
		t.Errorf("after an abandoned stop: %+v; want still running", st)
	}
	logs, _ := rt.Logs(t.Context(), testKey, "svc", 1)
	if !strings.Contains(logs, "ignoring SIGTERM") {
		t.Errorf("last log line %q; want the ignored SIGTERM", logs)
	}
}

// TestLogIsBounded: a service's log keeps its newest lines within a bound
// however much it has written.
func TestLogIsBounded(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	_, rt := prepared(t, testService("svc", nil))
	const runs = 1500 // two lines each: well over the 64 KiB bound
	for i := range runs {
		if _, err := rt.StartService(ctx, testKey, "svc"); err != nil {
			t.Fatalf("StartService #%d: %v", i, err)
		}
		if err := rt.Exit(testKey, "svc", i%256); err != nil {
			t.Fatalf("Exit #%d: %v", i, err)
		}
	}
	logs, err := rt.Logs(ctx, testKey, "svc", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(logs) > 64<<10+1024 {
		t.Errorf("log is %d bytes; want it bounded near 64 KiB", len(logs))
	}
	last, _ := rt.Logs(ctx, testKey, "svc", 1)
	if want := "exited with code " + strconv.Itoa((runs-1)%256); !strings.Contains(last, want) {
		t.Errorf("last line %q; want the newest exit (%q)", last, want)
	}
	if strings.Count(logs, "\n") < 100 {
		t.Errorf("log kept %d lines; want the newest many", strings.Count(logs, "\n"))
	}
}

// TestAdoptedServiceExitsAndRestarts: a service a restarted worker adopts
// (a new Runtime over the Host) can crash (Exit) and be started again by
// it; the exit is what a Wait of the first runtime returns, and the
// restarted service keeps its token and runtime role.
func TestAdoptedServiceExitsAndRestarts(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	h := fake.NewHost()
	t.Cleanup(h.Close)
	first := h.New("node-1")
	spec := runtime.InstanceSpec{Key: testKey, NodeID: "node-1", Token: 9, RuntimeRole: "backup",
		Job: &managerv1.Job{JobId: testKey.JobID, Services: []*managerv1.Service{testService("svc", nil)}}}
	if err := first.Prepare(ctx, spec); err != nil {
		t.Fatalf("Prepare: %v", err)
	}
	if _, err := first.StartService(ctx, testKey, "svc"); err != nil {
		t.Fatalf("StartService: %v", err)
	}
	if err := first.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	second := h.New("node-1")
	if err := second.Exit(testKey, "svc", 3); err != nil {
		t.Fatalf("Exit through the adopting runtime: %v", err)
	}
	if code, err := first.Wait(ctx, testKey, "svc"); err != nil || code != 3 {
		t.Errorf("the first runtime's Wait = %d, %v; want 3", code, err)
	}
	st, err := second.StartService(ctx, testKey, "svc")
	if err != nil {
		t.Fatalf("StartService by the adopting runtime: %v", err)
	}
	if !st.Running || st.Token != 9 || st.RuntimeRole != "backup" {
		t.Errorf("restarted adopted service: %+v; want running, token 9, runtime role backup", st)
	}
}
