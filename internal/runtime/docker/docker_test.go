package docker

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/api/types/volume"
	"github.com/docker/docker/client"
	"github.com/docker/go-connections/nat"
	"go.uber.org/goleak"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/internal/runtime"
	"github.com/norsk-go/norsk-manager/internal/runtime/runtimetest"
	"github.com/norsk-go/norsk-manager/internal/testimage"
)

// testImage is built FROM scratch from the test program; nothing is pulled.
const testImage = "norsk-testprog:test"

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// newRuntime returns a docker runtime for nodeID over the local engine, with
// the test image built; it skips the test when no engine answers.
func newRuntime(t *testing.T, nodeID string) *Runtime {
	t.Helper()
	cli := testimage.EnsureImage(t, testImage, runtimetest.TestProgPackage)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	rt, err := New(ctx, Config{NodeID: nodeID, Client: cli, Logger: quietLogger()})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = rt.Close() })
	return rt
}

func testService(name string, args []string) *managerv1.Service {
	return &managerv1.Service{Name: name, Image: testImage, Args: args}
}

func TestConformance(t *testing.T) {
	t.Parallel()
	runtimetest.Run(t, runtimetest.Harness{
		New: func(t *testing.T, nodeID, _ string) runtime.Runtime {
			return newRuntime(t, nodeID)
		},
		Service: testService,
		Unrunnable: []runtimetest.Unrunnable{
			{Name: "MissingImage", Service: &managerv1.Service{Name: "missing", Image: "norsk-test/no-such-image:never", PullPolicy: managerv1.PullPolicy_PULL_POLICY_NEVER}, Err: runtime.ErrImageNotFound},
			{Name: "NoImage", Service: &managerv1.Service{Name: "noimage", Command: []string{"/prog"}}, Err: runtime.ErrInvalidSpec},
		},
	})
}

func TestNewWithoutEngine(t *testing.T) {
	t.Parallel()
	cli, err := client.NewClientWithOpts(client.WithHost("unix://"+t.TempDir()+"/no-docker.sock"), client.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	_, err = New(t.Context(), Config{NodeID: "n", Client: cli})
	if err == nil || !strings.Contains(err.Error(), "no Docker engine answers") {
		t.Fatalf("New without an engine = %v, want a clear error", err)
	}
	if _, err := New(t.Context(), Config{Client: cli}); err == nil {
		t.Error("New without NodeID succeeded")
	}
}

func TestContainerName(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 120)
	tests := []struct {
		name    string
		cluster string
		node    string
		key     runtime.Key
		service string
		want    string // "" when only the shape is checked
	}{
		{"plain", "", "node1", runtime.Key{JobID: "job.1", Role: "primary"}, "enc", "norsk-node1-job.1-primary-enc"},
		{"at sign", "", "worker@host", runtime.Key{JobID: "j", Role: "backup"}, "svc", ""},
		{"long", "", "n", runtime.Key{JobID: long, Role: "primary"}, "svc", ""},
		{"cluster", "0123456789abcdef0123456789abcdef", "node1", runtime.Key{JobID: "job.1", Role: "primary"}, "enc", "norsk-0123456789ab-node1-job.1-primary-enc"},
		{"other cluster", "fedcba9876543210fedcba9876543210", "node1", runtime.Key{JobID: "job.1", Role: "primary"}, "enc", "norsk-fedcba987654-node1-job.1-primary-enc"},
		{"long in cluster", "0123456789abcdef0123456789abcdef", "n", runtime.Key{JobID: long, Role: "primary"}, "svc", ""},
	}
	seen := map[string]bool{}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := ContainerName(tc.cluster, tc.node, tc.key, tc.service)
			if tc.want != "" && got != tc.want {
				t.Errorf("ContainerName = %q, want %q", got, tc.want)
			}
			if len(got) > maxNameLen {
				t.Errorf("ContainerName = %q: %d characters, want at most %d", got, len(got), maxNameLen)
			}
			for _, r := range got {
				if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("_.-", r)) {
					t.Errorf("ContainerName = %q holds %q", got, r)
				}
			}
			if seen[got] {
				t.Errorf("ContainerName = %q twice", got)
			}
			seen[got] = true
			if again := ContainerName(tc.cluster, tc.node, tc.key, tc.service); again != got {
				t.Errorf("ContainerName is not deterministic: %q then %q", got, again)
			}
		})
	}
	if a, b := ContainerName("", "w@h", runtime.Key{JobID: "j", Role: "r"}, "s"), ContainerName("", "w_h", runtime.Key{JobID: "j", Role: "r"}, "s"); a == b {
		t.Errorf("nodes w@h and w_h share the container name %q", a)
	}
	if got := ContainerName("", "worker@host", runtime.Key{JobID: "j", Role: "backup"}, "svc"); !strings.HasPrefix(got, "norsk-worker_host-j-backup-svc-") {
		t.Errorf("ContainerName = %q, want '@' as '_' and a hash suffix", got)
	}
}

func TestGraceSeconds(t *testing.T) {
	t.Parallel()
	tests := []struct {
		grace time.Duration
		want  int
	}{
		{0, 10}, {-time.Second, 10}, {time.Millisecond, 1}, {time.Second, 1}, {1500 * time.Millisecond, 2}, {30 * time.Second, 30},
	}
	for _, tc := range tests {
		if got := graceSeconds(tc.grace); got != tc.want {
			t.Errorf("graceSeconds(%v) = %d, want %d", tc.grace, got, tc.want)
		}
	}
}

// TestPlanService checks the mapping of a service to a container's
// configuration, without an engine.
func TestPlanService(t *testing.T) {
	t.Parallel()
	svc := &managerv1.Service{
		Name:    "enc",
		Image:   "norsk/media:1.2",
		Command: []string{"/bin/enc", "--fast"},
		Args:    []string{"--in", "srt://x"},
		Env:     map[string]string{"A": "svc", "SHARED": "svc"},
		Ports: []*managerv1.PortMapping{
			{ContainerPort: 8080},
			{ContainerPort: 5001, Protocol: managerv1.Protocol_PROTOCOL_TCP, HostPort: &managerv1.PortMapping_Specific{Specific: 15001}, HostAddress: "10.0.0.5"},
			{ContainerPort: 5004, Protocol: managerv1.Protocol_PROTOCOL_UDP, HostPort: &managerv1.PortMapping_Range{Range: &managerv1.PortRange{MinPort: 20000, MaxPort: 20010}}},
			{ContainerPort: 9000, Protocol: managerv1.Protocol_PROTOCOL_ANY, HostPort: &managerv1.PortMapping_Ephemeral{Ephemeral: &managerv1.Ephemeral{}}},
		},
		VolumeMounts: []*managerv1.VolumeMount{
			{Source: "/srv/media", ContainerPath: "/media", ReadOnly: true},
			{Source: "cache", ContainerPath: "/cache"},
		},
		WorkingDir:   "/work",
		ShmSizeBytes: 1 << 30,
		CpuSet:       []uint32{2, 3},
	}
	spec := runtime.InstanceSpec{
		Key: runtime.Key{JobID: "job1", Role: "primary"}, NodeID: "n1", Token: 17, RuntimeRole: "backup",
		Job: &managerv1.Job{JobId: "job1", Services: []*managerv1.Service{svc}, Volumes: []string{"shared", "cache"}},
		Env: map[string]string{"SHARED": "instance", runtime.EnvService: "spoofed"},
	}
	p, err := planService("n1", "c1234567", "", spec, svc)
	if err != nil {
		t.Fatal(err)
	}
	if p.name != "norsk-c1234567-n1-job1-primary-enc" {
		t.Errorf("name = %q", p.name)
	}
	c, h := p.config, p.host
	if c.Image != "norsk/media:1.2" || !slices.Equal(c.Entrypoint, []string{"/bin/enc", "--fast"}) || !slices.Equal(c.Cmd, []string{"--in", "srt://x"}) {
		t.Errorf("image %q entrypoint %v cmd %v", c.Image, c.Entrypoint, c.Cmd)
	}
	if want := []string{"A=svc", "NORSK_SERVICE=enc", "SHARED=instance"}; !slices.Equal(c.Env, want) {
		t.Errorf("env = %v, want %v", c.Env, want)
	}
	wantLabels := map[string]string{
		runtime.LabelNode: "n1", runtime.LabelJob: "job1", runtime.LabelRole: "primary",
		runtime.LabelService: "enc", runtime.LabelToken: "17", runtime.LabelRuntimeRole: "backup",
		runtime.LabelCluster: "c1234567",
	}
	for k, v := range wantLabels {
		if c.Labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, c.Labels[k], v)
		}
	}
	wantBindings := map[string][2]string{ // port → host IP, host port
		"8080/tcp": {"", ""},
		"5001/tcp": {"10.0.0.5", "15001"},
		"5004/udp": {"", "20000-20010"},
		"9000/tcp": {"", ""},
	}
	if len(h.PortBindings) != len(wantBindings) || len(c.ExposedPorts) != len(wantBindings) {
		t.Errorf("bindings %v, exposed %v; want %v", h.PortBindings, c.ExposedPorts, wantBindings)
	}
	for port, want := range wantBindings {
		b := h.PortBindings[nat.Port(port)]
		if len(b) != 1 || b[0].HostIP != want[0] || b[0].HostPort != want[1] {
			t.Errorf("binding of %s = %v, want %v", port, b, want)
		}
	}
	wantMounts := []mount.Mount{
		{Type: mount.TypeBind, Source: "/srv/media", Target: "/media", ReadOnly: true},
		{Type: mount.TypeVolume, Source: "norsk-job1-cache", Target: "/cache"},
	}
	if !slices.Equal(h.Mounts, wantMounts) {
		t.Errorf("mounts = %+v, want %+v", h.Mounts, wantMounts)
	}
	if want := []string{"norsk-job1-shared", "norsk-job1-cache"}; !slices.Equal(p.volumes, want) {
		t.Errorf("volumes = %v, want %v", p.volumes, want)
	}
	if c.WorkingDir != "/work" || h.ShmSize != 1<<30 || h.CpusetCpus != "2,3" {
		t.Errorf("working dir %q, shm %d, cpuset %q", c.WorkingDir, h.ShmSize, h.CpusetCpus)
	}
	if h.RestartPolicy.Name != container.RestartPolicyDisabled {
		t.Errorf("restart policy = %q, want none", h.RestartPolicy.Name)
	}
	if !slices.Equal(h.ExtraHosts, []string{"host.docker.internal:host-gateway"}) {
		t.Errorf("extra hosts = %v, want host.docker.internal at the host gateway", h.ExtraHosts)
	}
	// A publish host (dev: loopback) binds every mapping that names no
	// host address of its own.
	p, err = planService("n1", "", "127.0.0.1", spec, svc)
	if err != nil {
		t.Fatal(err)
	}
	for port, want := range map[string]string{"8080/tcp": "127.0.0.1", "5001/tcp": "10.0.0.5", "5004/udp": "127.0.0.1", "9000/tcp": "127.0.0.1"} {
		if b := p.host.PortBindings[nat.Port(port)]; len(b) != 1 || b[0].HostIP != want {
			t.Errorf("with publish host 127.0.0.1, binding of %s = %v, want host IP %s", port, b, want)
		}
	}

	// No command or args: the image's own entrypoint and command.
	bare := &managerv1.Service{Name: "bare", Image: "img"}
	p, err = planService("n1", "", "", spec, bare)
	if err != nil {
		t.Fatal(err)
	}
	if p.config.Entrypoint != nil || p.config.Cmd != nil {
		t.Errorf("bare service: entrypoint %v cmd %v, want the image's", p.config.Entrypoint, p.config.Cmd)
	}
}

// TestVolumesAndEnv checks, on the engine, the named volume and bind mount
// a service gets, its environment, and that Remove keeps the job's volumes.
func TestVolumesAndEnv(t *testing.T) {
	t.Parallel()
	suffix := strconv.FormatInt(time.Now().UnixNano(), 36)
	rt := newRuntime(t, "node-vol-"+suffix)
	ctx := t.Context()
	src := t.TempDir()
	jobID := "job-vol-" + suffix
	svc := testService("svc", []string{"-run", "1ms"})
	svc.VolumeMounts = []*managerv1.VolumeMount{
		{Source: "data", ContainerPath: "/data"},
		{Source: src, ContainerPath: "/in", ReadOnly: true},
	}
	spec := runtime.InstanceSpec{
		Key: runtime.Key{JobID: jobID, Role: "primary"}, NodeID: rt.nodeID, Token: 1, RuntimeRole: "primary",
		Job: &managerv1.Job{JobId: jobID, Services: []*managerv1.Service{svc}},
		Env: map[string]string{runtime.EnvJobID: jobID},
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := rt.Remove(ctx, spec.Key); err != nil {
			t.Errorf("cleanup: %v", err)
		}
		if err := rt.RemoveJobVolumes(ctx, jobID); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	if err := rt.Prepare(ctx, spec); err != nil {
		t.Fatal(err)
	}
	c, err := rt.cli.ContainerInspect(ctx, ContainerName(rt.cluster.Get(), rt.nodeID, spec.Key, "svc"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{runtime.EnvJobID + "=" + jobID, runtime.EnvService + "=svc"} {
		if !slices.Contains(c.Config.Env, want) {
			t.Errorf("env %v lacks %s", c.Config.Env, want)
		}
	}
	if c.HostConfig.RestartPolicy.Name != container.RestartPolicyDisabled && c.HostConfig.RestartPolicy.Name != "" {
		t.Errorf("restart policy = %q", c.HostConfig.RestartPolicy.Name)
	}
	var sawVolume, sawBind bool
	for _, m := range c.HostConfig.Mounts {
		switch {
		case m.Type == mount.TypeVolume && m.Source == VolumeName(jobID, "data") && m.Target == "/data" && !m.ReadOnly:
			sawVolume = true
		case m.Type == mount.TypeBind && m.Source == src && m.Target == "/in" && m.ReadOnly:
			sawBind = true
		}
	}
	if !sawVolume || !sawBind {
		t.Errorf("mounts = %+v, want the job volume and the read-only bind mount", c.HostConfig.Mounts)
	}
	if _, err := rt.StartService(ctx, spec.Key, "svc"); err != nil {
		t.Fatal(err)
	}
	if code, err := rt.Wait(ctx, spec.Key, "svc"); err != nil || code != 0 {
		t.Fatalf("Wait = %d, %v", code, err)
	}

	if err := rt.Remove(ctx, spec.Key); err != nil {
		t.Fatal(err)
	}
	if _, err := rt.cli.VolumeInspect(ctx, VolumeName(jobID, "data")); err != nil {
		t.Errorf("Remove removed the job's volume: %v", err)
	}
	if err := rt.RemoveJobVolumes(ctx, jobID); err != nil {
		t.Fatal(err)
	}
	vs, err := rt.cli.VolumeList(ctx, volume.ListOptions{Filters: filters.NewArgs(filters.Arg("label", runtime.LabelJob+"="+jobID))})
	if err != nil || len(vs.Volumes) != 0 {
		t.Errorf("volumes after RemoveJobVolumes: %v, %v", vs.Volumes, err)
	}
}

// TestMissingImageMessage checks that the error for a missing image whose
// pull policy is never names the image and the policy.
func TestMissingImageMessage(t *testing.T) {
	t.Parallel()
	rt := newRuntime(t, "node-nopull")
	spec := runtime.InstanceSpec{
		Key: runtime.Key{JobID: "job-nopull", Role: "primary"}, NodeID: "node-nopull", Token: 1,
		Job: &managerv1.Job{JobId: "job-nopull", Services: []*managerv1.Service{{Name: "svc", Image: "norsk-test/absent:1", PullPolicy: managerv1.PullPolicy_PULL_POLICY_NEVER}}},
	}
	err := rt.Prepare(t.Context(), spec)
	if !errors.Is(err, runtime.ErrImageNotFound) || !strings.Contains(err.Error(), "norsk-test/absent:1") || !strings.Contains(err.Error(), "pull policy is never") {
		t.Fatalf("Prepare = %v", err)
	}
}
