package chsim

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/norsk-go/norsk-manager/internal/chapi"
	"github.com/norsk-go/norsk-manager/internal/cloudsim"
)

// bootRecorder is a runner that records each guest's first-boot data.
type bootRecorder struct {
	mu      sync.Mutex
	booted  [][]byte
	stopped int
}

type recMachine struct{ r *bootRecorder }

func (r *bootRecorder) Boot(_ string, ud []byte) (cloudsim.Machine, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.booted = append(r.booted, ud)
	return recMachine{r}, nil
}

func (m recMachine) Stop(context.Context) error {
	m.r.mu.Lock()
	defer m.r.mu.Unlock()
	m.r.stopped++
	return nil
}

func start(t *testing.T) (*VMM, *chapi.Client, *bootRecorder, string) {
	t.Helper()
	// A short directory: a Unix socket's path is at most 107 bytes.
	dir, err := os.MkdirTemp("", "chsim")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	rec := &bootRecorder{}
	v, err := Start(Options{APISocket: filepath.Join(dir, "api.sock"), Runner: rec})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = v.Close() })
	return v, chapi.NewClient(filepath.Join(dir, "api.sock")), rec, dir
}

func status(err error) int {
	var e *chapi.Error
	if errors.As(err, &e) {
		return e.Status
	}
	return 0
}

// The VM's life through the API, with the status codes and error bodies
// Cloud Hypervisor answers: 404 before vm.create, 400 for a bad config,
// 409 for a duplicate disk, 500 for a second create, 204 for each step.
func TestVMLifecycleAndStatusCodes(t *testing.T) {
	t.Parallel()
	v, c, rec, dir := start(t)
	ctx := t.Context()
	kernel, root, boot := filepath.Join(dir, "vmlinux"), filepath.Join(dir, "root.img"), filepath.Join(dir, "boot.img")
	for f, b := range map[string]string{kernel: "k", root: "r", boot: "#norsk-worker\n{}\x00\x00\x00"} {
		if err := os.WriteFile(f, []byte(b), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	p, err := c.Ping(ctx)
	if err != nil || p.Version != Version || p.PID != int64(os.Getpid()) {
		t.Fatalf("ping = %+v, %v", p, err)
	}
	for _, tc := range []struct {
		name string
		call func() error
		want int
	}{
		{"info before create", func() error { _, err := c.Info(ctx); return err }, 404},
		{"boot before create", func() error { return c.BootVM(ctx) }, 404},
		{"shutdown before create", func() error { return c.ShutdownVM(ctx) }, 404},
		{"no payload", func() error { return c.CreateVM(ctx, chapi.VmConfig{}) }, 400},
		{"missing kernel", func() error {
			return c.CreateVM(ctx, chapi.VmConfig{Payload: &chapi.PayloadConfig{Kernel: filepath.Join(dir, "nope")}})
		}, 400},
		{"zero vCPUs", func() error {
			return c.CreateVM(ctx, chapi.VmConfig{Payload: &chapi.PayloadConfig{Kernel: kernel}, Cpus: &chapi.CpusConfig{}})
		}, 400},
		{"duplicate disk", func() error {
			return c.CreateVM(ctx, chapi.VmConfig{Payload: &chapi.PayloadConfig{Kernel: kernel}, Disks: []chapi.DiskConfig{{Path: root}, {Path: root}}})
		}, 409},
	} {
		if err := tc.call(); status(err) != tc.want {
			t.Errorf("%s: %v, want %d", tc.name, err, tc.want)
		}
	}
	cfg := chapi.VmConfig{Payload: &chapi.PayloadConfig{Kernel: kernel, Cmdline: "console=ttyS0"}, Cpus: &chapi.CpusConfig{BootVcpus: 2, MaxVcpus: 2},
		Memory: &chapi.MemoryConfig{Size: 1 << 30}, Disks: []chapi.DiskConfig{{Path: root}, {Path: boot, Readonly: true}}}
	if err := c.CreateVM(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	err = c.CreateVM(ctx, cfg)
	var e *chapi.Error
	if !errors.As(err, &e) || e.Status != 500 || !strings.Contains(strings.Join(e.Messages, " "), "already created") {
		t.Errorf("a second create: %v, want 500 with the VMM's error chain", err)
	}
	if info, err := c.Info(ctx); err != nil || info.State != chapi.VmCreated || info.Config.Cpus.BootVcpus != 2 {
		t.Errorf("info after create = %+v, %v", info, err)
	}
	if err := c.ShutdownVM(ctx); status(err) != 500 {
		t.Errorf("shutdown of a VM not booted: %v, want 500", err)
	}
	if err := c.BootVM(ctx); err != nil {
		t.Fatal(err)
	}
	if info, err := c.Info(ctx); err != nil || info.State != chapi.VmRunning {
		t.Errorf("info after boot = %+v, %v", info, err)
	}
	if len(rec.booted) != 1 || string(rec.booted[0]) != "#norsk-worker\n{}" {
		t.Errorf("the guest booted from %q; want the first-boot disk up to its NULs", rec.booted)
	}
	if err := c.ShutdownVM(ctx); err != nil {
		t.Fatal(err)
	}
	if info, err := c.Info(ctx); err != nil || info.State != chapi.VmShutdown || rec.stopped != 1 {
		t.Errorf("after shutdown: %+v, %v, stopped %d", info, err, rec.stopped)
	}
	if err := c.DeleteVM(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Info(ctx); status(err) != 404 {
		t.Errorf("info after delete: %v, want 404", err)
	}
	if err := c.ShutdownVMM(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-v.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the VMM still serves after vmm.shutdown")
	}
	if _, err := c.Ping(ctx); !errors.Is(err, chapi.ErrUnreachable) {
		t.Errorf("ping after vmm.shutdown: %v, want unreachable", err)
	}
}

// A wrong method is 400 and an unknown endpoint 404, as the VMM answers.
func TestMethodsAndEndpoints(t *testing.T) {
	t.Parallel()
	_, _, _, dir := start(t)
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", filepath.Join(dir, "api.sock"))
	}}}
	for _, tc := range []struct {
		method, path string
		want         int
	}{
		{http.MethodGet, "/api/v1/vmm.ping", 200},
		{http.MethodPut, "/api/v1/vmm.ping", 400},
		{http.MethodGet, "/api/v1/vm.create", 400},
		{http.MethodPut, "/api/v1/vm.nope", 404},
		{http.MethodGet, "/elsewhere", 404},
	} {
		req, _ := http.NewRequestWithContext(t.Context(), tc.method, "http://localhost"+tc.path, nil)
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("%s %s = %d, want %d", tc.method, tc.path, resp.StatusCode, tc.want)
		}
	}
}

func TestParseAPISocketFlag(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{"path=/run/a.sock": "/run/a.sock", "/run/b.sock": "/run/b.sock", "fd=3,path=/x": "/x", "": "", "fd=3": ""} {
		got, err := chapi.ParseAPISocketFlag(in)
		if got != want || (want == "") != (err != nil) {
			t.Errorf("%q = %q, %v; want %q", in, got, err, want)
		}
	}
}
