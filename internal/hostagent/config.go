// Package hostagent is the Cloud Hypervisor host agent (`norsk-ctl
// host-agent`, one per hypervisor host): it runs each elastic node's worker
// as a microVM for the Manager's cloud-hypervisor provider.
//
// For every VM it prepares a directory from a base image (the root disk,
// copy-on-write where the file system can clone a file, a copy otherwise)
// and a raw first-boot disk carrying the worker's first-boot data (the
// one-shot registration token, every Manager member's URL, the CA pin),
// spawns one VMM process (cloud-hypervisor --api-socket path=<dir>/api.sock)
// and drives it only through Cloud Hypervisor's REST API on that socket
// (internal/chapi): vm.create, vm.boot, vm.info, vm.shutdown, vm.delete,
// vmm.ping, vmm.shutdown. The VMMs run in sessions of their own and outlive
// the agent: a restarted agent finds its VMs again through their API
// sockets, and a socket it cannot account for (no VM record beside it) is
// reported and left alone, never killed silently.
//
// The agent serves the HostAgent Connect service (its shapes, capacity and
// VMs; create, delete, tag) to the Manager, with a bearer token.
package hostagent

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	goruntime "runtime"
	"strings"
	"time"

	"github.com/norsk-go/norsk-manager/internal/clock"
)

// Shape is a VM size the host offers.
type Shape struct {
	Name        string `json:"name"`
	VCPUs       uint32 `json:"vcpus"`
	MemoryBytes uint64 `json:"memoryBytes"`
	// GPUs passed through to each VM of the shape (from GPUDevices).
	GPUs uint32 `json:"gpus,omitempty"`
}

// Config configures an agent.
type Config struct {
	// Name is the host's name: the cloud-hypervisor provider's "region",
	// as the Manager's config and overrides file name it.
	Name string
	// Dir holds the VMs (Dir/vms/<id>): their disks, records and API
	// sockets. It must survive the agent's restart.
	Dir string
	// Listen is the HostAgent server's address (default 127.0.0.1:0).
	Listen string
	// MetricsListen, if set, serves /metrics alone there, in cleartext
	// (the API's listener serves it too, but behind mutual TLS once the
	// agent has a certificate, which a scraper does not hold).
	MetricsListen string
	// Token is the bearer token every call must carry: the host secret the
	// Manager's config names for this host. Without it, the secret kept
	// from an earlier registration (Dir/host-secret), else Register's.
	Token string
	// Register registers the agent with the Manager when it has no secret.
	// With an https Manager the registration carries a CSR and the Manager
	// answers a certificate its cluster CA signed: the agent then serves
	// mutual TLS (Dir/tls keeps the key and certificate across restarts).
	Register *Registration
	// AllowPlaintext lets an agent without a certificate from the Manager
	// serve cleartext HTTP off loopback (logged loudly at every start);
	// without it such an agent refuses to start. On loopback an agent with
	// no certificate always serves cleartext.
	AllowPlaintext bool
	// Shapes are the VM sizes offered.
	Shapes []Shape
	// VCPUs, MemoryBytes and GPUs are what the host gives its VMs in all
	// (defaults: the host's CPUs, 8 GiB, len(GPUDevices)).
	VCPUs       uint32
	MemoryBytes uint64
	// GPUDevices are VFIO device paths (/sys/bus/pci/devices/…) handed to
	// VMs of shapes with GPUs.
	GPUDevices []string
	// Images are the base images by name (the overrides file's worker
	// images for this host): a raw disk image with the worker installed.
	Images map[string]string
	// Kernel (with Cmdline and Initramfs) or Firmware is what each VM
	// boots.
	Kernel, Cmdline, Initramfs, Firmware string
	// Bridge is the host bridge each VM's tap device joins ("" = the VMs
	// get no network interface: the local VMM's guests share the host's).
	Bridge string
	// VMM starts the VMM processes.
	VMM Launcher
	// Architecture is the VMs' (default: the host's).
	Architecture string
	Clock        clock.Clock
	Logger       *slog.Logger
}

var nameRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9.-]{0,61}[a-z0-9])?$`)

// withDefaults validates c and fills in defaults.
func (c Config) withDefaults() (Config, error) {
	switch {
	case !nameRE.MatchString(c.Name):
		return c, fmt.Errorf("host-agent: name %q: want a DNS label (a-z, 0-9, '-', '.')", c.Name)
	case c.Dir == "":
		return c, errors.New("host-agent: no state directory")
	case len(c.Shapes) == 0:
		return c, errors.New("host-agent: no shapes")
	case c.Kernel == "" && c.Firmware == "":
		return c, errors.New("host-agent: give a kernel or firmware for the VMs")
	case len(c.Images) == 0:
		return c, errors.New("host-agent: no base image")
	case c.VMM == nil:
		return c, errors.New("host-agent: no VMM launcher")
	}
	if n := len(filepath.Join(c.Dir, "vms", "vm-000000000000", socketFile)); n > maxSocketPath {
		return c, fmt.Errorf("host-agent: dir %q is too long: a VM's API socket under it would be %d bytes, more than a Unix socket's %d", c.Dir, n, maxSocketPath)
	}
	if c.Listen == "" {
		c.Listen = "127.0.0.1:0"
	}
	if c.VCPUs == 0 {
		c.VCPUs = uint32(goruntime.NumCPU())
	}
	if c.MemoryBytes == 0 {
		c.MemoryBytes = 8 << 30
	}
	if c.Architecture == "" {
		c.Architecture = map[string]string{"amd64": "x86_64", "arm64": "arm64"}[goruntime.GOARCH]
	}
	seen := map[string]bool{}
	for i, s := range c.Shapes {
		switch {
		case !nameRE.MatchString(strings.ToLower(s.Name)) || s.Name == "":
			return c, fmt.Errorf("host-agent: shapes[%d]: name %q is not a shape name", i, s.Name)
		case seen[s.Name]:
			return c, fmt.Errorf("host-agent: shapes[%d]: %q is listed twice", i, s.Name)
		case s.VCPUs == 0 || s.MemoryBytes < 64<<20:
			return c, fmt.Errorf("host-agent: shapes[%d] %s: give vcpus and at least 64 MiB of memory", i, s.Name)
		case s.GPUs > uint32(len(c.GPUDevices)):
			return c, fmt.Errorf("host-agent: shapes[%d] %s: %d GPUs, but the host passes through %d", i, s.Name, s.GPUs, len(c.GPUDevices))
		}
		seen[s.Name] = true
	}
	for name, p := range c.Images {
		if _, err := os.Stat(p); err != nil {
			return c, fmt.Errorf("host-agent: base image %s: %w", name, err)
		}
	}
	for _, p := range []string{c.Kernel, c.Firmware, c.Initramfs} {
		if p == "" {
			continue
		}
		if _, err := os.Stat(p); err != nil {
			return c, fmt.Errorf("host-agent: %w", err)
		}
	}
	if c.Clock == nil {
		c.Clock = clock.Real{}
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c, nil
}

// ParseShape reads a shape flag: name:vcpus:memory[:gpus], memory in MiB
// or with a unit (512M, 2G).
func ParseShape(s string) (Shape, error) {
	parts := strings.Split(s, ":")
	if len(parts) < 3 || len(parts) > 4 {
		return Shape{}, fmt.Errorf("shape %q: want name:vcpus:memory[:gpus] (e.g. ch.small:2:2G)", s)
	}
	var sh Shape
	sh.Name = parts[0]
	var v, g uint32
	if _, err := fmt.Sscanf(parts[1], "%d", &v); err != nil || v == 0 {
		return Shape{}, fmt.Errorf("shape %q: vcpus %q is not a positive number", s, parts[1])
	}
	sh.VCPUs = v
	mem, err := parseSize(parts[2])
	if err != nil {
		return Shape{}, fmt.Errorf("shape %q: memory: %w", s, err)
	}
	sh.MemoryBytes = mem
	if len(parts) == 4 {
		if _, err := fmt.Sscanf(parts[3], "%d", &g); err != nil {
			return Shape{}, fmt.Errorf("shape %q: gpus %q is not a number", s, parts[3])
		}
		sh.GPUs = g
	}
	return sh, nil
}

func parseSize(s string) (uint64, error) {
	mult := uint64(1 << 20)
	switch {
	case strings.HasSuffix(s, "G"):
		mult, s = 1<<30, strings.TrimSuffix(s, "G")
	case strings.HasSuffix(s, "M"):
		s = strings.TrimSuffix(s, "M")
	}
	var n uint64
	if _, err := fmt.Sscanf(s, "%d", &n); err != nil || n == 0 {
		return 0, fmt.Errorf("%q is not a size (512M, 2G)", s)
	}
	return n * mult, nil
}

// maxSocketPath is the longest path a Unix socket may have (sun_path).
const maxSocketPath = 107

// startWait bounds how long a new VMM may take to answer on its socket.
const startWait = 10 * time.Second
