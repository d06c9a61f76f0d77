package hostagent

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"connectrpc.com/connect"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1/managerv1connect"
	"github.com/norsk-go/norsk-manager/internal/chsim"
	"github.com/norsk-go/norsk-manager/internal/cloudsim"
	"github.com/norsk-go/norsk-manager/internal/providers"
)

func TestParseShape(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want Shape
		err  string
	}{
		{"ch.small:2:2G", Shape{Name: "ch.small", VCPUs: 2, MemoryBytes: 2 << 30}, ""},
		{"gpu:8:16384:1", Shape{Name: "gpu", VCPUs: 8, MemoryBytes: 16 << 30, GPUs: 1}, ""},
		{"m:1:512M", Shape{Name: "m", VCPUs: 1, MemoryBytes: 512 << 20}, ""},
		{"x:2", Shape{}, "want name:vcpus:memory"},
		{"x:0:1G", Shape{}, "vcpus"},
		{"x:1:lots", Shape{}, "memory"},
		{"x:1:1G:y", Shape{}, "gpus"},
	} {
		got, err := ParseShape(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%q = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
}

func TestDisks(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	src, dst := filepath.Join(dir, "base"), filepath.Join(dir, "copy")
	if err := os.WriteFile(src, []byte("base image"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := cloneOrCopy(src, dst); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(dst); string(b) != "base image" {
		t.Errorf("copy holds %q", b)
	}
	boot := filepath.Join(dir, "boot")
	if err := writeFirstBootDisk(boot, []byte("data")); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(boot)
	if len(b) != sector || string(b[:4]) != "data" || b[4] != 0 {
		t.Errorf("first-boot disk: %d bytes starting %q", len(b), b[:5])
	}
	if err := writeFirstBootDisk(boot, []byte("a\x00b")); err == nil {
		t.Error("data with a NUL was written")
	}
	full := make([]byte, sector)
	for i := range full {
		full[i] = 'x'
	}
	if err := writeFirstBootDisk(boot, full); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(boot); len(b) != 2*sector || b[sector] != 0 {
		t.Errorf("a sector of data: %d bytes; want a NUL sector after it", len(b))
	}
}

type nopRunner struct {
	mu    sync.Mutex
	boots int
}

type nopMachine struct{}

func (r *nopRunner) Boot(string, []byte) (cloudsim.Machine, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.boots++
	return nopMachine{}, nil
}
func (nopMachine) Stop(context.Context) error { return nil }

func testConfig(t *testing.T, vmm Launcher) Config {
	t.Helper()
	dir, err := os.MkdirTemp("", "ha")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	kernel, base := filepath.Join(dir, "vmlinux"), filepath.Join(dir, "base.img")
	for _, f := range []string{kernel, base} {
		if err := os.WriteFile(f, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return Config{Name: "enc-01", Dir: filepath.Join(dir, "state"), Token: "secret", VCPUs: 4, MemoryBytes: 8 << 30,
		Shapes: []Shape{{Name: "s", VCPUs: 2, MemoryBytes: 1 << 30}, {Name: "l", VCPUs: 4, MemoryBytes: 2 << 30}},
		Images: map[string]string{"w": base}, Kernel: kernel, VMM: vmm}
}

func client(a *Agent, token string) managerv1connect.HostAgentClient {
	return managerv1connect.NewHostAgentClient(http.DefaultClient, a.URL(), connect.WithInterceptors(connect.UnaryInterceptorFunc(
		func(next connect.UnaryFunc) connect.UnaryFunc {
			return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
				req.Header().Set("Authorization", "Bearer "+token)
				return next(ctx, req)
			}
		})))
}

func create(node, token, shape string) *connect.Request[managerv1.CreateVmRequest] {
	return connect.NewRequest(&managerv1.CreateVmRequest{NodeId: node, ClusterId: "c1", ClientToken: token, Shape: shape, Image: "w",
		UserData: providers.UserData{NodeID: node, ManagerURLs: []string{"http://m:6790"}, Token: "nrt_x"}.Encode()})
}

// Creates are idempotent in the client token, bounded by the host's room,
// refused for bad input; a restarted agent finds its VMs; deletes end the
// VMM and the directory.
func TestAgent(t *testing.T) {
	t.Parallel()
	vmms := &chsim.Launcher{Runner: &nopRunner{}}
	t.Cleanup(vmms.Close)
	cfg := testConfig(t, vmms)
	a, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })
	ctx := t.Context()
	if _, err := client(a, "wrong").GetHost(ctx, connect.NewRequest(&managerv1.GetHostRequest{})); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Errorf("a wrong token: %v, want UNAUTHENTICATED", err)
	}
	c := client(a, "secret")
	vm, err := c.CreateVm(ctx, create("n1", "t1", "s"))
	if err != nil {
		t.Fatal(err)
	}
	again, err := c.CreateVm(ctx, create("n1", "t1", "s"))
	if err != nil || again.Msg.GetId() != vm.Msg.GetId() || again.Msg.GetState() != "Running" {
		t.Fatalf("repeated create = %v, %v; want the same running VM", again.Msg, err)
	}
	for _, tc := range []struct {
		name string
		req  *connect.Request[managerv1.CreateVmRequest]
		want connect.Code
	}{
		{"another token for the node", create("n1", "t2", "s"), connect.CodeAlreadyExists},
		{"unknown shape", create("n2", "t3", "xl"), connect.CodeInvalidArgument},
		{"no room", create("n2", "t3", "l"), connect.CodeResourceExhausted},
		{"no node", create("", "t3", "s"), connect.CodeInvalidArgument},
		{"bad user data", func() *connect.Request[managerv1.CreateVmRequest] {
			r := create("n2", "t3", "s")
			r.Msg.UserData = []byte("#!/bin/sh")
			return r
		}(), connect.CodeInvalidArgument},
		{"unknown image", func() *connect.Request[managerv1.CreateVmRequest] {
			r := create("n2", "t3", "s")
			r.Msg.Image = "other"
			return r
		}(), connect.CodeInvalidArgument},
	} {
		if _, err := c.CreateVm(ctx, tc.req); connect.CodeOf(err) != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	if _, err := c.CreateVm(ctx, create("n2", "t3", "s")); err != nil {
		t.Fatal(err)
	}
	h, err := c.GetHost(ctx, connect.NewRequest(&managerv1.GetHostRequest{}))
	if err != nil || len(h.Msg.GetVms()) != 2 || h.Msg.GetUsedVcpus() != 4 || h.Msg.GetVmmVersion() != chsim.Version || h.Msg.GetName() != "enc-01" {
		t.Fatalf("host = %v, %v", h.Msg, err)
	}
	resp, err := http.Get(a.URL() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	for _, want := range []string{`norsk_host_agent_vms{state="Running"} 2`, `norsk_host_agent_vm_creates_total{outcome="ok"} 2`,
		`norsk_host_agent_vm_creates_total{outcome="capacity"} 1`, `norsk_host_agent_vcpus{kind="used"} 4`, `norsk_host_agent_unaccounted_vmms 0`} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %s:\n%s", want, body)
		}
	}
	// Restarted: the same VMs, running.
	_ = a.Close()
	cfg.Listen = strings.TrimPrefix(a.URL(), "http://")
	if a, err = Start(cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })
	c = client(a, "secret")
	h, err = c.GetHost(ctx, connect.NewRequest(&managerv1.GetHostRequest{}))
	if err != nil || len(h.Msg.GetVms()) != 2 || h.Msg.GetVms()[0].GetState() != "Running" || len(h.Msg.GetUnaccounted()) != 0 {
		t.Fatalf("after a restart: %v, %v", h.Msg, err)
	}
	if _, err := c.DeleteVm(ctx, connect.NewRequest(&managerv1.DeleteVmRequest{NodeId: "n1"})); err != nil {
		t.Fatal(err)
	}
	if _, err := c.DeleteVm(ctx, connect.NewRequest(&managerv1.DeleteVmRequest{Id: vm.Msg.GetId()})); err != nil {
		t.Errorf("deleting a VM gone already: %v", err)
	}
	if _, err := os.Stat(filepath.Join(cfg.Dir, "vms", vm.Msg.GetId())); !os.IsNotExist(err) {
		t.Errorf("the deleted VM's directory: %v", err)
	}
	if vmms.Running() != 1 {
		t.Errorf("VMMs running: %d, want 1", vmms.Running())
	}
}

func TestConfigRefusals(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		mod  func(*Config)
		err  string
	}{
		{"bad name", func(c *Config) { c.Name = "Enc 1" }, "DNS label"},
		{"no token", func(c *Config) { c.Token = "" }, "no token"},
		{"no shapes", func(c *Config) { c.Shapes = nil }, "no shapes"},
		{"no kernel", func(c *Config) { c.Kernel = "" }, "kernel or firmware"},
		{"missing image", func(c *Config) { c.Images = map[string]string{"w": "/nope"} }, "base image w"},
		{"gpu shape without gpus", func(c *Config) { c.Shapes = []Shape{{Name: "g", VCPUs: 1, MemoryBytes: 1 << 30, GPUs: 1}} }, "passes through 0"},
		{"long dir", func(c *Config) { c.Dir = "/" + strings.Repeat("d", 100) }, "too long"},
	} {
		cfg := testConfig(t, &chsim.Launcher{})
		tc.mod(&cfg)
		if _, err := Start(cfg); err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.err)
		}
	}
}
