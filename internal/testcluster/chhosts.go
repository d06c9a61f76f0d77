package testcluster

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/norsk-go/norsk-manager/internal/buildinfo"
	"github.com/norsk-go/norsk-manager/internal/chsim"
	"github.com/norsk-go/norsk-manager/internal/cloudsim"
	"github.com/norsk-go/norsk-manager/internal/hostagent"
	"github.com/norsk-go/norsk-manager/internal/manager"
	"github.com/norsk-go/norsk-manager/internal/providers"
	"github.com/norsk-go/norsk-manager/internal/providers/cloudconf"
	"github.com/norsk-go/norsk-manager/internal/worker"
)

// Facts of the host agents Options.CHHosts starts.
const (
	// CHPool is the elastic pool tier created on the hosts.
	CHPool = "ch-burst"
	// CHImage is the base image of this build's worker version.
	CHImage = "norsk-worker"
	// CHHostVCPUs and CHHostMemory are each host's room.
	CHHostVCPUs  = 4
	CHHostMemory = 8 << 30
	// CHClusterID tags the cluster's VMs (without Options.Clouds).
	CHClusterID = "test-ch"
)

// CHShapes are each host's shapes, smallest first.
var CHShapes = []hostagent.Shape{
	{Name: "ch.small", VCPUs: 2, MemoryBytes: 2 << 30},
	{Name: "ch.large", VCPUs: 4, MemoryBytes: 4 << 30},
}

// CHHosts are a cluster's host agents (Options.CHHosts).
type CHHosts struct {
	// Agents are the running agents: ch-1 … ch-N.
	Agents []*hostagent.Agent
	// Configs are their configurations (RestartAgent starts one again).
	Configs []hostagent.Config
	// VMMs run every host's VMMs in this process, independent of the
	// agents (as VMM processes outlive theirs).
	VMMs *chsim.Launcher
	// Overrides is the overrides file the members read (shared with
	// Options.Clouds when both are on).
	Overrides string

	cfg cloudconf.CloudHypervisor
}

// CHHostName is the i-th host's name (0-based).
func CHHostName(i int) string { return fmt.Sprintf("ch-%d", i+1) }

// CHOverrides is the overrides file's cloudHypervisor section for n hosts.
func CHOverrides(n int) string {
	var b strings.Builder
	b.WriteString("cloudHypervisor:\n  regions:\n")
	for i := range n {
		fmt.Fprintf(&b, "    %s:\n      workerImages:\n        %q: %s\n", CHHostName(i), buildinfo.Version, CHImage)
	}
	return b.String()
}

func (c *Cluster) startCHHosts() {
	if c.opts.CHHosts <= 0 {
		return
	}
	t := c.t
	dir := filepath.Join(c.Dir, "ch")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	kernel, base := filepath.Join(dir, "vmlinux"), filepath.Join(dir, "worker-base.img")
	for _, f := range []string{kernel, base} {
		if err := os.WriteFile(f, []byte("test equipment: the local VMM checks it exists\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	var runner cloudsim.Runner = &cloudsim.InProcess{Dir: filepath.Join(dir, "machines"), Logger: c.opts.Logger.With("process", "microvm"),
		Worker: worker.Config{ReregisterAfter: 500 * time.Millisecond, RegisterRetry: 500 * time.Millisecond, Version: buildinfo.Version}}
	if c.opts.CHRunner != nil {
		runner = c.opts.CHRunner
	}
	ch := &CHHosts{VMMs: &chsim.Launcher{Logger: c.opts.Logger.With("process", "vmm"), Runner: runner}}
	ch.cfg.Hosts = map[string]cloudconf.CloudHypervisorHost{}
	var vmm hostagent.Launcher = ch.VMMs
	initramfs, cmdline := "", "console=ttyS0 root=/dev/vda rw"
	if c.opts.CHVMM != nil {
		vmm, kernel, initramfs, cmdline = c.opts.CHVMM, c.opts.CHKernel, c.opts.CHInitramfs, c.opts.CHCmdline
	}
	for i := range c.opts.CHHosts {
		cfg := hostagent.Config{
			Name: CHHostName(i), Dir: filepath.Join(dir, CHHostName(i)), Token: "host-secret-" + CHHostName(i),
			Shapes: CHShapes, VCPUs: CHHostVCPUs, MemoryBytes: CHHostMemory,
			Images: map[string]string{CHImage: base}, Kernel: kernel, Initramfs: initramfs, Cmdline: cmdline,
			VMM: vmm, Logger: c.opts.Logger.With("process", "host-agent", "host", CHHostName(i)),
			// Below the ephemeral range (see reserve): RestartCHAgent
			// listens on it again, and a port the kernel handed out for
			// ":0" may by then be a client socket's.
			Listen: net.JoinHostPort("127.0.0.1", strconv.Itoa(FreePort(t, "127.0.0.1"))),
		}
		a, err := hostagent.Start(cfg)
		if err != nil {
			t.Fatal(err)
		}
		ch.Agents, ch.Configs = append(ch.Agents, a), append(ch.Configs, cfg)
		ch.cfg.Hosts[cfg.Name] = cloudconf.CloudHypervisorHost{URL: a.URL(), Token: cfg.Token}
	}
	ch.cfg.Pools = map[string]cloudconf.CloudHypervisorPool{CHPool: {Shapes: []string{"ch.small", "ch.large"}}}
	if c.Clouds != nil {
		ch.Overrides = c.Clouds.Overrides
		c.WriteOverrides(DefaultOverrides() + CHOverrides(c.opts.CHHosts))
	} else {
		ch.Overrides = filepath.Join(dir, "overrides.yaml")
		if err := os.WriteFile(ch.Overrides, []byte("version: 1\n"+CHOverrides(c.opts.CHHosts)), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	c.CH = ch
}

// RealVMStart bounds a real microVM's boot to its worker's registration
// (Options.CHVMM).
const RealVMStart = 4 * time.Minute

// chProvider gives a member's configuration the cloud-hypervisor provider.
func (c *Cluster) chProvider(cfg *manager.Config) {
	ch := c.CH
	if ch == nil {
		return
	}
	pc := ch.cfg
	cfg.CloudHypervisor = &pc
	cfg.OverridesFile = ch.Overrides
	if cfg.ClusterID == "" {
		cfg.ClusterID = CHClusterID
	}
	cfg.ReaperInterval = 100 * time.Millisecond
	cfg.ReconcileInterval = 300 * time.Millisecond
	cfg.ListGrace = time.Second
	cfg.CloudStartTimeout = 30 * time.Second
	if c.opts.CHVMM != nil {
		// A real microVM boots its kernel first; emulated (TCG) on a busy
		// machine that is tens of seconds.
		cfg.CloudStartTimeout = RealVMStart
	}
	cfg.InstanceTypeRefresh = time.Second
	cfg.ProviderBackoff = providers.Backoff{Attempts: 3, Base: time.Millisecond, Max: 10 * time.Millisecond}
}

// RestartCHAgent stops host i's agent and starts it again on the same
// address and directory; its VMs (their VMMs) run on meanwhile.
func (c *Cluster) RestartCHAgent(i int) *hostagent.Agent {
	c.t.Helper()
	_ = c.CH.Agents[i].Close()
	for range 50 { // the port of a just-closed listener can take a moment to be free
		ln, err := net.Listen("tcp", c.CH.Configs[i].Listen)
		if err == nil {
			_ = ln.Close()
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	a, err := hostagent.Start(c.CH.Configs[i])
	if err != nil {
		c.t.Fatal(err)
	}
	c.CH.Agents[i] = a
	return a
}

func (c *Cluster) stopCHHosts() {
	if c.CH == nil {
		return
	}
	for _, a := range c.CH.Agents {
		if c.opts.CHVMM != nil { // VMM processes of their own: end them
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			a.DeleteAll(ctx)
			cancel()
		}
		_ = a.Close()
	}
	c.CH.VMMs.Close()
}

// WriteOverridesFile replaces the overrides file the members read with
// content (they take it at ReloadExternalConfig).
func (c *Cluster) WriteOverridesFile(content string) {
	c.t.Helper()
	if err := os.WriteFile(c.CH.Overrides, []byte(content), 0o600); err != nil {
		c.t.Fatal(err)
	}
}
