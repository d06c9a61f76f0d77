package devmode

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	goruntime "runtime"
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

// Facts of `dev --ch-hosts N`.
const (
	// CHPool is the elastic pool tier the AutoManager creates microVM
	// nodes in (the smallest shape that fits first).
	CHPool = "microvm"
	// chImage is the base image name the overrides file gives every host.
	chImage = "norsk-worker"
)

// chShapes are each dev host's shapes, smallest first.
var chShapes = []hostagent.Shape{
	{Name: "ch.small", VCPUs: 1, MemoryBytes: 1 << 30},
	{Name: "ch.medium", VCPUs: 2, MemoryBytes: 2 << 30},
	{Name: "ch.large", VCPUs: 4, MemoryBytes: 4 << 30},
}

// localHosts are dev's host agents and the local VMMs they launch.
type localHosts struct {
	agents []*hostagent.Agent
	// inproc runs the VMMs in this process when there is no executable
	// to run them as processes (tests).
	inproc *chsim.Launcher
	dir    string
}

// chHostName is the i-th dev host's name.
func chHostName(i int) string { return fmt.Sprintf("dev-ch-%d", i+1) }

// startCHHosts starts n host agents with their state in dir/ch, each
// VM's VMM the local VMM (test equipment serving Cloud Hypervisor's REST
// API): a process of its own (workerExec ch-vmm) when dev runs workers as
// processes, else in this process; its guest a worker process, or a
// container with the docker runtime. It gives cfg the cloud-hypervisor
// provider over them.
func startCHHosts(dir string, n int, rt, workerExec string, log *slog.Logger, cfg *manager.Config) (*localHosts, error) {
	dir = filepath.Join(dir, "ch")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	// The local VMM checks that the kernel and base image exist; they are
	// placeholders for a real host's vmlinux and worker disk image.
	kernel, base := filepath.Join(dir, "vmlinux"), filepath.Join(dir, "worker-base.img")
	for _, f := range []string{kernel, base} {
		if err := os.WriteFile(f, []byte("norsk-manager dev: a placeholder the local VMM checks exists\n"), 0o600); err != nil {
			return nil, err
		}
	}
	guest := "process"
	if rt == "docker" {
		guest = "docker"
	}
	lh := &localHosts{dir: dir}
	var vmm hostagent.Launcher
	if workerExec != "" {
		vmm = hostagent.Exec{Path: workerExec, Args: []string{"ch-vmm", "--guest", guest}}
	} else {
		lh.inproc = &chsim.Launcher{Logger: log, Runner: &cloudsim.InProcess{Dir: filepath.Join(dir, "guests"), Logger: log,
			Worker: worker.Config{Runtime: rt, Version: buildinfo.Version, ReregisterAfter: 2 * time.Second, RegisterRetry: time.Second}}}
		vmm = lh.inproc
	}
	pc := &cloudconf.CloudHypervisor{Hosts: map[string]cloudconf.CloudHypervisorHost{},
		Pools: map[string]cloudconf.CloudHypervisorPool{CHPool: {Shapes: []string{"ch.small", "ch.medium", "ch.large"}}}}
	overrides := &providers.Overrides{Providers: map[string]providers.ProviderOverrides{cloudconf.CloudHypervisorName: {Regions: map[string]providers.RegionOverrides{}}}}
	for i := range n {
		name := chHostName(i)
		secret, err := hostSecret(filepath.Join(dir, name+".secret"))
		if err != nil {
			lh.close()
			return nil, err
		}
		a, err := hostagent.Start(hostagent.Config{
			Name: name, Dir: filepath.Join(dir, name), Token: secret, Shapes: chShapes,
			VCPUs: uint32(max(goruntime.NumCPU(), 4)), MemoryBytes: 8 << 30,
			Images: map[string]string{chImage: base}, Kernel: kernel, Cmdline: "console=ttyS0 root=/dev/vda rw",
			VMM: vmm, Logger: log,
		})
		if err != nil {
			lh.close()
			return nil, fmt.Errorf("host agent %s: %w", name, err)
		}
		lh.agents = append(lh.agents, a)
		pc.Hosts[name] = cloudconf.CloudHypervisorHost{URL: a.URL(), Token: secret}
		overrides.Providers[cloudconf.CloudHypervisorName].Regions[name] = providers.RegionOverrides{WorkerImages: map[string]string{buildinfo.Version: chImage}}
	}
	ofile := filepath.Join(dir, "overrides.yaml")
	b, err := overrides.Marshal()
	if err != nil {
		lh.close()
		return nil, err
	}
	if err := os.WriteFile(ofile, b, 0o600); err != nil {
		lh.close()
		return nil, err
	}
	id, err := clusterID(filepath.Join(dir, "cluster-id"))
	if err != nil {
		lh.close()
		return nil, err
	}
	cfg.CloudHypervisor, cfg.OverridesFile, cfg.ClusterID = pc, ofile, id
	cfg.ReconcileInterval = 10 * time.Second
	cfg.ListGrace = 10 * time.Second
	cfg.CloudStartTimeout = 3 * time.Minute
	cfg.ReaperInterval = time.Second
	return lh, nil
}

// hostSecret is a dev host's secret, made at the first run and kept.
func hostSecret(path string) (string, error) {
	b, err := os.ReadFile(path)
	switch {
	case err == nil && strings.TrimSpace(string(b)) != "":
		return strings.TrimSpace(string(b)), nil
	case err != nil && !errors.Is(err, os.ErrNotExist):
		return "", err
	}
	b = make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	s := hex.EncodeToString(b)
	return s, os.WriteFile(path, []byte(s+"\n"), 0o600)
}

// close stops the agents; with in-process VMMs their VMs end too (with
// VMM processes, the VMs run on and the next dev's agents find them).
func (lh *localHosts) close() {
	for _, a := range lh.agents {
		_ = a.Close()
	}
	if lh.inproc != nil {
		lh.inproc.Close()
	}
}

// deleteVMs deletes every VM of the hosts (an ephemeral dev's end).
func (lh *localHosts) deleteVMs(ctx context.Context) {
	for _, a := range lh.agents {
		a.DeleteAll(ctx)
	}
}

// banner says what the host agents are and what to try.
func (lh *localHosts) banner(w io.Writer, rt string) {
	var names []string
	for i := range lh.agents {
		names = append(names, fmt.Sprintf("%s (%s)", chHostName(i), lh.agents[i].URL()))
	}
	bundle := "microvm"
	if rt != "docker" {
		bundle = "microvm-process"
	}
	fmt.Fprintf(w, `
Cloud Hypervisor host agents: %s.
Each VM is run by the local VMM (test equipment serving Cloud Hypervisor's
REST API on the VM's API socket); its guest boots a worker from the VM's
first-boot disk. The AutoManager creates microVM nodes in pool %s
(ch.small, ch.medium, ch.large: the smallest that fits) when nothing fits.
Try:
  norsk-ctl instance-types --provider cloud-hypervisor
  norsk-ctl node create-ch --host %s --shape ch.medium
  norsk-ctl bundle create -f examples/bundles/%s.yaml   (nothing runs it: a microVM node is made)
`, strings.Join(names, ", "), CHPool, chHostName(0), bundle)
}
