package process

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/internal/runtime"
	"github.com/norsk-go/norsk-manager/internal/runtime/runtimetest"
)

// testProg is the test program, built once for the package's tests.
var testProg string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "process-runtime-test-")
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

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func newRuntime(t *testing.T, nodeID, dir string) *Runtime {
	t.Helper()
	rt, err := New(Config{NodeID: nodeID, Dir: dir, Logger: quietLogger()})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return rt
}

func testService(name string, args []string) *managerv1.Service {
	return &managerv1.Service{Name: name, Command: []string{testProg}, Args: args}
}

func TestConformance(t *testing.T) {
	runtimetest.Run(t, runtimetest.Harness{
		New: func(t *testing.T, nodeID, stateDir string) runtime.Runtime {
			return newRuntime(t, nodeID, stateDir)
		},
		Service: testService,
		Unrunnable: []runtimetest.Unrunnable{
			{Name: "NoCommand", Service: &managerv1.Service{Name: "nocmd", Image: "ignored:latest"}, Err: runtime.ErrInvalidSpec},
			{Name: "MissingExecutable", Service: &managerv1.Service{Name: "missing", Command: []string{"/nonexistent/norsk-test-program"}}, Err: runtime.ErrInvalidSpec},
			{Name: "ExecutableNotInPath", Service: &managerv1.Service{Name: "nopath", Command: []string{"norsk-no-such-program-in-path"}}, Err: runtime.ErrInvalidSpec},
			{Name: "BadServiceName", Service: &managerv1.Service{Name: "../escape", Command: []string{testProg}}, Err: runtime.ErrInvalidSpec},
		},
		// A service adopted from an earlier runtime is not this runtime's
		// child; its exit code is known only if the earlier one recorded it.
		AdoptedExitCodeMayBeUnknown: true,
	})
}

func testSpec(nodeID, jobID string, token uint64, svcs ...*managerv1.Service) runtime.InstanceSpec {
	return runtime.InstanceSpec{
		Key:         runtime.Key{JobID: jobID, Role: "primary"},
		NodeID:      nodeID,
		Token:       token,
		RuntimeRole: "primary",
		Job:         &managerv1.Job{JobId: jobID, Services: svcs},
		Env:         map[string]string{runtime.EnvJobID: jobID, "SHARED": "from-instance"},
	}
}

// removeOnCleanup removes the instance and its job's volumes when the test ends.
func removeOnCleanup(t *testing.T, rt *Runtime, key runtime.Key) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := rt.Remove(ctx, key); err != nil {
			t.Errorf("cleanup: %v", err)
		}
		if err := rt.RemoveJobVolumes(ctx, key.JobID); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
}

// TestEnvironment checks the environment conventions of the package comment.
func TestEnvironment(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	bindSrc := t.TempDir()
	rt := newRuntime(t, "n1", dir)
	svc := &managerv1.Service{
		Name:    "env",
		Command: []string{testProg, "-print-env"},
		Args:    []string{"-run", "1ms"},
		Env:     map[string]string{"OWN": "svc", "SHARED": "from-service", runtime.EnvService: "spoofed"},
		Ports: []*managerv1.PortMapping{
			{ContainerPort: 8080},
			{ContainerPort: 5004, Protocol: managerv1.Protocol_PROTOCOL_UDP, HostAddress: "127.0.0.1"},
		},
		VolumeMounts: []*managerv1.VolumeMount{
			{Source: "media-cache", ContainerPath: "/var/cache/media"},
			{Source: bindSrc, ContainerPath: "/data/in", ReadOnly: true},
		},
	}
	spec := testSpec("n1", "job-env", 1, svc)
	spec.Job.Volumes = []string{"scratch"}
	removeOnCleanup(t, rt, spec.Key)
	if err := rt.Prepare(ctx, spec); err != nil {
		t.Fatalf("Prepare: %v", err)
	}
	if _, err := rt.StartService(ctx, spec.Key, "env"); err != nil {
		t.Fatalf("StartService: %v", err)
	}
	if code, err := rt.Wait(ctx, spec.Key, "env"); err != nil || code != 0 {
		t.Fatalf("Wait = %d, %v", code, err)
	}
	logText, err := os.ReadFile(filepath.Join(rt.instanceDir(spec.Key), "env.log"))
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for _, line := range strings.Split(string(logText), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			env[k] = v
		}
	}
	st, err := loadState(rt.statePath(spec.Key, "env"))
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Ports) != 2 {
		t.Fatalf("state ports = %+v", st.Ports)
	}
	volumes := rt.jobVolumesDir("job-env")
	want := map[string]string{
		"PATH":                        os.Getenv("PATH"),
		"HOME":                        os.Getenv("HOME"),
		"OWN":                         "svc",
		"SHARED":                      "from-instance", // the instance's Env wins
		runtime.EnvJobID:              "job-env",
		runtime.EnvService:            "env", // the runtime's wins
		"NORSK_PORT_8080":             strconv.Itoa(int(st.Ports[0].HostPort)),
		"NORSK_PORT_5004":             strconv.Itoa(int(st.Ports[1].HostPort)),
		"NORSK_VOLUME_SCRATCH":        filepath.Join(volumes, "scratch"),
		"NORSK_VOLUME_MEDIA_CACHE":    filepath.Join(volumes, "media-cache"),
		"NORSK_MOUNT_VAR_CACHE_MEDIA": filepath.Join(volumes, "media-cache"),
		"NORSK_MOUNT_DATA_IN":         bindSrc,
	}
	for k, v := range want {
		if env[k] != v {
			t.Errorf("%s = %q, want %q", k, env[k], v)
		}
	}
	for _, v := range []string{"scratch", "media-cache"} {
		if fi, err := os.Stat(filepath.Join(volumes, v)); err != nil || !fi.IsDir() {
			t.Errorf("volume directory %s: %v", v, err)
		}
	}
	if st.Ports[1].Protocol != "udp" || st.Ports[1].HostAddress != "127.0.0.1" || st.Ports[0].Protocol != "tcp" {
		t.Errorf("ports = %+v, want tcp then udp on 127.0.0.1", st.Ports)
	}

	// Remove keeps the job's volumes; RemoveJobVolumes removes them.
	if err := rt.Remove(ctx, spec.Key); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(volumes, "scratch")); err != nil {
		t.Errorf("Remove removed the job's volume: %v", err)
	}
	if _, err := os.Stat(rt.instanceDir(spec.Key)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Remove left the instance directory: %v", err)
	}
	if err := rt.RemoveJobVolumes(ctx, "job-env"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(volumes); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("RemoveJobVolumes left %s: %v", volumes, err)
	}
}

// TestProcessSurvivesInOwnSession checks that a service runs in a session
// of its own (so the worker's exit does not end it) and that the state file
// records what identifies it.
func TestProcessSurvivesInOwnSession(t *testing.T) {
	ctx := t.Context()
	rt := newRuntime(t, "n1", t.TempDir())
	spec := testSpec("n1", "job-session", 3, testService("svc", nil))
	removeOnCleanup(t, rt, spec.Key)
	if err := rt.Prepare(ctx, spec); err != nil {
		t.Fatal(err)
	}
	if _, err := rt.StartService(ctx, spec.Key, "svc"); err != nil {
		t.Fatal(err)
	}
	st, err := loadState(rt.statePath(spec.Key, "svc"))
	if err != nil {
		t.Fatal(err)
	}
	p := st.Process
	if p == nil || p.PID <= 0 || p.StartTicks == 0 || p.StartedAt.IsZero() {
		t.Fatalf("state process = %+v, want pid, start ticks and time", p)
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(p.PID) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	fields := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	// fields[2] is pgrp (field 5), fields[3] the session (field 6).
	if fields[2] != strconv.Itoa(p.PID) || fields[3] != strconv.Itoa(p.PID) {
		t.Errorf("pgrp %s, session %s; want both %d (setsid)", fields[2], fields[3], p.PID)
	}
	if st.Token != 3 || st.NodeID != "n1" || st.Service != "svc" || len(st.Argv) == 0 || st.Argv[0] != testProg {
		t.Errorf("state = %+v", st)
	}
}

// TestReusedPIDIsNotTheService checks that a state file whose pid is alive
// but whose start time differs is not taken for a running service, and that
// StopService then leaves that process alone.
func TestReusedPIDIsNotTheService(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	rt := newRuntime(t, "n1", dir)
	spec := testSpec("n1", "job-reuse", 1, testService("svc", nil))
	removeOnCleanup(t, rt, spec.Key)
	if err := rt.Prepare(ctx, spec); err != nil {
		t.Fatal(err)
	}
	if _, err := rt.StartService(ctx, spec.Key, "svc"); err != nil {
		t.Fatal(err)
	}
	path := rt.statePath(spec.Key, "svc")
	st, err := loadState(path)
	if err != nil {
		t.Fatal(err)
	}
	real := *st.Process
	st.Process.StartTicks++ // as if the pid now belonged to another process
	if err := saveState(path, st); err != nil {
		t.Fatal(err)
	}

	later := newRuntime(t, "n1", dir) // a restarted worker
	s, err := later.List(ctx)
	if err != nil || len(s) != 1 || s[0].Running {
		t.Fatalf("List = %+v, %v; want the service not running", s, err)
	}
	if err := later.StopService(ctx, spec.Key, "svc", time.Second); err != nil {
		t.Fatal(err)
	}
	if !alive(real.PID, real.StartTicks) {
		t.Fatal("StopService killed a process that is not the service")
	}
	if code, err := later.Wait(ctx, spec.Key, "svc"); err != nil || code != -1 {
		t.Errorf("Wait = %d, %v; want -1 at once", code, err)
	}

	st.Process = &real // Remove in cleanup kills it
	if err := saveState(path, st); err != nil {
		t.Fatal(err)
	}
}

func TestParseProcStat(t *testing.T) {
	tail := " 1 1 1 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 %s 1000 100 ..."
	tests := []struct {
		name, comm, state, ticks string
		want                     procStat
		wantErr                  bool
	}{
		{"plain", "sleep", "S", "12345", procStat{'S', 12345}, false},
		{"spaces and parens", "my (odd) prog", "R", "7", procStat{'R', 7}, false},
		{"zombie", "x", "Z", "99", procStat{'Z', 99}, false},
		{"bad ticks", "x", "S", "abc", procStat{}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			line := fmt.Sprintf("4242 (%s) %s"+tail, tc.comm, tc.state, tc.ticks)
			got, err := parseProcStat([]byte(line))
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Errorf("parseProcStat(%q) = %+v, %v; want %+v, error %v", line, got, err, tc.want, tc.wantErr)
			}
		})
	}
	if _, err := parseProcStat([]byte("4242 (short) S 1 2")); err == nil {
		t.Error("a short stat line parsed")
	}
	self, err := readProcStat(os.Getpid())
	if err != nil || self.startTicks == 0 || !alive(os.Getpid(), self.startTicks) {
		t.Errorf("own stat = %+v, %v", self, err)
	}
}

func TestEnvSuffix(t *testing.T) {
	tests := []struct {
		in   string
		path bool
		want string
	}{
		{"data", false, "DATA"},
		{"media-cache.v2", false, "MEDIA_CACHE_V2"},
		{"/data/in", true, "DATA_IN"},
		{"/var/lib/norsk/", true, "VAR_LIB_NORSK"},
		{"/", true, "ROOT"},
	}
	for _, tc := range tests {
		if got := envSuffix(tc.in, tc.path); got != tc.want {
			t.Errorf("envSuffix(%q, %v) = %q, want %q", tc.in, tc.path, got, tc.want)
		}
	}
}

func TestAllocatePort(t *testing.T) {
	// A port we hold, to see range allocation skip it.
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	busyPort := uint32(busy.Addr().(*net.TCPAddr).Port)
	// A UDP port we hold whose TCP twin we hold too, until the case that
	// needs it free (another process on a busy machine could take a TCP
	// port nobody holds).
	var busyUDP net.PacketConn
	var tcpTwin net.Listener
	for busyUDP == nil {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		if u, err := net.ListenPacket("udp", l.Addr().String()); err == nil {
			busyUDP, tcpTwin = u, l
		} else {
			l.Close()
		}
	}
	defer busyUDP.Close()
	defer tcpTwin.Close()
	busyUDPPort := uint32(busyUDP.LocalAddr().(*net.UDPAddr).Port)

	rng := func(lo, hi uint32) *managerv1.PortMapping_Range {
		return &managerv1.PortMapping_Range{Range: &managerv1.PortRange{MinPort: lo, MaxPort: hi}}
	}
	tests := []struct {
		name        string
		pm          *managerv1.PortMapping
		freeTCPTwin bool
		reserved    map[string]bool
		check       func(got allocatedPort) bool
		wantErr     bool
	}{
		{name: "ephemeral", pm: &managerv1.PortMapping{ContainerPort: 80, HostAddress: "127.0.0.1"},
			check: func(g allocatedPort) bool { return g.HostPort != 0 && g.Protocol == "tcp" }},
		{name: "specific as given", pm: &managerv1.PortMapping{ContainerPort: 80, HostPort: &managerv1.PortMapping_Specific{Specific: busyPort}},
			check: func(g allocatedPort) bool { return g.HostPort == busyPort }},
		{name: "range skips a bound port", pm: &managerv1.PortMapping{ContainerPort: 80, HostAddress: "127.0.0.1", HostPort: rng(busyPort, busyPort)},
			wantErr: true},
		{name: "range skips a reserved port", pm: &managerv1.PortMapping{ContainerPort: 80, HostAddress: "127.0.0.1", HostPort: rng(busyUDPPort, busyUDPPort)},
			reserved: map[string]bool{"tcp/" + strconv.Itoa(int(busyUDPPort)): true}, wantErr: true},
		{name: "tcp port free though udp is bound", pm: &managerv1.PortMapping{ContainerPort: 80, HostAddress: "127.0.0.1", HostPort: rng(busyUDPPort, busyUDPPort)},
			freeTCPTwin: true, check: func(g allocatedPort) bool { return g.HostPort == busyUDPPort && g.Protocol == "tcp" }},
		{name: "udp port bound", pm: &managerv1.PortMapping{ContainerPort: 80, Protocol: managerv1.Protocol_PROTOCOL_UDP, HostAddress: "127.0.0.1", HostPort: rng(busyUDPPort, busyUDPPort)},
			wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.freeTCPTwin {
				tcpTwin.Close()
			}
			var holds []io.Closer
			defer func() {
				for _, h := range holds {
					h.Close()
				}
			}()
			reserved := tc.reserved
			if reserved == nil {
				reserved = map[string]bool{}
			}
			got, err := allocatePort(tc.pm, reserved, &holds)
			if (err != nil) != tc.wantErr {
				t.Fatalf("allocatePort = %+v, %v; want error %v", got, err, tc.wantErr)
			}
			if err == nil && !tc.check(got) {
				t.Errorf("allocatePort = %+v", got)
			}
		})
	}
}

// TestPortsReservedAcrossRuntimes: two runtimes over different directories
// on one host (two workers, or two nodes of a test) never give one host port
// to two services. The first runtime's service is prepared and not started,
// so nothing binds its port: a bind check alone finds it free. That is how,
// under load, a service of one runtime found its port taken by another's
// when it came to bind it (the conformance suite's "no resolved ports").
// Once the first instance is removed, the port is free again.
func TestPortsReservedAcrossRuntimes(t *testing.T) {
	for _, proto := range []managerv1.Protocol{managerv1.Protocol_PROTOCOL_TCP, managerv1.Protocol_PROTOCOL_UDP} {
		t.Run(proto.String(), func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			// The default port registry, as two workers on a host have it.
			a := newRuntime(t, "node-a", t.TempDir())
			b := newRuntime(t, "node-b", t.TempDir())
			svc := func(hp *managerv1.PortMapping_Range) *managerv1.Service {
				pm := &managerv1.PortMapping{ContainerPort: 80, Protocol: proto}
				if hp != nil {
					pm.HostPort = hp
				}
				return &managerv1.Service{Name: "svc", Command: []string{testProg}, Ports: []*managerv1.PortMapping{pm}}
			}
			specA := testSpec("node-a", "job-a", 1, svc(nil))
			removeOnCleanup(t, a, specA.Key)
			if err := a.Prepare(ctx, specA); err != nil {
				t.Fatalf("Prepare on A: %v", err)
			}
			stA, err := loadState(a.statePath(specA.Key, "svc"))
			if err != nil || len(stA.Ports) != 1 {
				t.Fatalf("A's state = %+v, %v; want one port", stA, err)
			}
			port := stA.Ports[0].HostPort
			only := &managerv1.PortMapping_Range{Range: &managerv1.PortRange{MinPort: port, MaxPort: port}}

			specB := testSpec("node-b", "job-b", 1, svc(only))
			removeOnCleanup(t, b, specB.Key)
			if err := b.Prepare(ctx, specB); err == nil {
				t.Fatalf("B was given %s port %d, which A's prepared service holds", stA.Ports[0].Protocol, port)
			}

			if err := a.Remove(ctx, specA.Key); err != nil {
				t.Fatalf("Remove on A: %v", err)
			}
			if err := b.Prepare(ctx, specB); err != nil {
				t.Fatalf("Prepare on B once A's service is removed: %v", err)
			}
			if stB, err := loadState(b.statePath(specB.Key, "svc")); err != nil || len(stB.Ports) != 1 || stB.Ports[0].HostPort != port {
				t.Fatalf("B's state = %+v, %v; want port %d", stB, err, port)
			}
		})
	}
}

// TestStartAllocatesATakenPortAnew: an ephemeral host port that a process
// foreign to the runtimes bound after Prepare (here the test) is allocated
// anew when the service starts, as a container engine chooses an ephemeral
// port at every start: the service runs, its status and environment name
// the new port, and it answers there.
func TestStartAllocatesATakenPortAnew(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	rt := newRuntime(t, "n1", t.TempDir())
	svc := testService("web", runtimetest.Behaviour{Listen: 8080}.Args())
	svc.Ports = []*managerv1.PortMapping{{ContainerPort: 8080}}
	spec := testSpec("n1", "job-taken", 1, svc)
	removeOnCleanup(t, rt, spec.Key)
	if err := rt.Prepare(ctx, spec); err != nil {
		t.Fatalf("Prepare: %v", err)
	}
	prepared, err := loadState(rt.statePath(spec.Key, "web"))
	if err != nil || len(prepared.Ports) != 1 {
		t.Fatalf("state = %+v, %v; want one port", prepared, err)
	}
	port := prepared.Ports[0].HostPort
	if l, err := net.Listen("tcp", ":"+strconv.FormatUint(uint64(port), 10)); err == nil {
		defer l.Close()
	} // else another process holds it already: as good

	st, err := rt.StartService(ctx, spec.Key, "web")
	if err != nil {
		t.Fatalf("StartService: %v", err)
	}
	if !st.Running || len(st.Ports) != 1 || st.Ports[0].GetPublished() == port || st.Ports[0].GetPublished() == 0 {
		t.Fatalf("StartService = %+v; want running with a port other than the taken %d", st, port)
	}
	started, err := loadState(rt.statePath(spec.Key, "web"))
	want := "NORSK_PORT_8080=" + strconv.FormatUint(uint64(st.Ports[0].GetPublished()), 10)
	if err != nil || !slices.Contains(started.Env, want) || started.Ports[0].HostPort != st.Ports[0].GetPublished() {
		t.Fatalf("state after start = %+v, %v; want its port and %s", started, err, want)
	}
	url := st.Ports[0].GetUrl()
	runtimetest.Eventually(t, 30*time.Second, url+" answers", func() bool {
		c, err := net.DialTimeout("tcp", url, time.Second)
		if err != nil {
			return false
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(2 * time.Second))
		line, _ := bufio.NewReader(c).ReadString('\n')
		return line == "testprog\n"
	})
}

// TestPortRegistry: the registry lists the directories registered in it
// while they exist, forgets one once it is gone, is made again when it is
// removed, and refuses a directory that others could write to or that is a
// symlink.
func TestPortRegistry(t *testing.T) {
	t.Parallel()
	g, err := openPortRegistry(filepath.Join(t.TempDir(), "registry"))
	if err != nil {
		t.Fatalf("openPortRegistry: %v", err)
	}
	kept, gone := t.TempDir(), t.TempDir()
	for _, d := range []string{kept, gone, kept} {
		if err := g.register(d); err != nil {
			t.Fatalf("register %s: %v", d, err)
		}
	}
	if err := os.Remove(gone); err != nil {
		t.Fatal(err)
	}
	dirs, err := g.dirs()
	if err != nil || len(dirs) != 1 || dirs[0] != kept {
		t.Fatalf("dirs = %v, %v; want [%s]", dirs, err, kept)
	}
	entries, _ := os.ReadDir(g.dir)
	for _, e := range entries {
		if e.Name() != ".lock" && e.Name() != filepath.Base(g.entry(kept)) {
			t.Errorf("registry holds %s after the directory it named was removed", e.Name())
		}
	}

	// The temporary directory's cleaning removed it: it is made again.
	if err := os.RemoveAll(g.dir); err != nil {
		t.Fatal(err)
	}
	unlock, err := g.lock()
	if err != nil {
		t.Fatalf("lock of a removed registry: %v", err)
	}
	unlock()

	open := t.TempDir()
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(kept, link); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{open, link} {
		if _, err := New(Config{NodeID: "n", Dir: t.TempDir(), PortRegistry: dir, Logger: quietLogger()}); err == nil {
			t.Errorf("New with port registry %s succeeded", dir)
		}
	}
}

// TestStatePrepareIsAtomicAndVersioned checks the state file is replaced
// whole and that a newer format is refused, not misread.
func TestStateFiles(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "svc.json")
	st := &serviceState{NodeID: "n", JobID: "j", Role: "r", Service: "svc", Token: 1<<63 + 5}
	if err := saveState(path, st); err != nil {
		t.Fatal(err)
	}
	got, err := loadState(path)
	if err != nil || got.Token != 1<<63+5 || got.Version != stateVersion {
		t.Fatalf("loadState = %+v, %v", got, err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("directory holds %d entries after a save, want the state file alone", len(entries))
	}
	if err := os.WriteFile(path, []byte(`{"version": 99}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := loadState(path); err == nil {
		t.Error("a state file of a newer version was read")
	}
}

func TestNewRefusesBadConfig(t *testing.T) {
	if _, err := New(Config{Dir: t.TempDir()}); err == nil {
		t.Error("New without NodeID succeeded")
	}
	if _, err := New(Config{NodeID: "n"}); err == nil {
		t.Error("New without Dir succeeded")
	}
}

// TestStopKillsTheGroup checks that stopping a service also ends what it
// started in its process group, as stopping a container would: here a child
// that ignores SIGTERM outlives the shell that started it.
func TestStopKillsTheGroup(t *testing.T) {
	ctx := t.Context()
	rt := newRuntime(t, "n1", t.TempDir())
	pidFile := filepath.Join(t.TempDir(), "child.pid")
	svc := &managerv1.Service{
		Name:    "shell",
		Command: []string{"/bin/sh", "-c", `(trap "" TERM; exec sleep 300) & echo $! > "$PID_FILE"; wait`},
		Env:     map[string]string{"PID_FILE": pidFile},
	}
	spec := testSpec("n1", "job-group", 1, svc)
	removeOnCleanup(t, rt, spec.Key)
	if err := rt.Prepare(ctx, spec); err != nil {
		t.Fatal(err)
	}
	if _, err := rt.StartService(ctx, spec.Key, "shell"); err != nil {
		t.Fatal(err)
	}
	var childPID int
	runtimetest.Eventually(t, 10*time.Second, "the shell writes its child's pid", func() bool {
		b, err := os.ReadFile(pidFile)
		if err != nil || !strings.HasSuffix(string(b), "\n") {
			return false
		}
		childPID, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil
	})
	child, err := readProcStat(childPID)
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.StopService(ctx, spec.Key, "shell", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	runtimetest.Eventually(t, 10*time.Second, "the shell's child is gone", func() bool {
		return !alive(childPID, child.startTicks)
	})
}
