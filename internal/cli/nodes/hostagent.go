package nodes

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/spf13/cobra"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/internal/chapi"
	"github.com/norsk-go/norsk-manager/internal/chqemu"
	"github.com/norsk-go/norsk-manager/internal/chsim"
	"github.com/norsk-go/norsk-manager/internal/cli/cmdutil"
	"github.com/norsk-go/norsk-manager/internal/hostagent"
	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

// The Cloud Hypervisor commands: host-agent (one per hypervisor host),
// ch-vmm (the local VMM, test equipment) and node create-ch.

// NewHostAgentCommand is "host-agent": run a Cloud Hypervisor host agent, and
// add, list or remove the Manager's host agents.
func NewHostAgentCommand(g *cmdutil.Globals) *cobra.Command {
	var (
		cfg              hostagent.Config
		shapes, images   []string
		tokenFile, vmm   string
		vmmArgs          []string
		memory, logLevel string
		localVMM         string
		reg              hostagent.Registration
		regManagers      string
	)
	c := &cobra.Command{
		Use:   "host-agent --name NAME --dir DIR --token-file FILE --shape S… --image NAME=PATH --kernel PATH",
		Short: "Run this hypervisor host's agent: the Manager's cloud-hypervisor provider runs workers here as microVMs",
		Long: `Run a Cloud Hypervisor host agent. The Manager's cloud-hypervisor provider
(providers.cloudHypervisor in its config.yaml, with this host's URL and the
secret in --token-file) asks it for a microVM per elastic node: the agent
makes the VM's root disk from the base image (--image; copy-on-write where
the file system clones files), writes the worker's first-boot data on a
second disk, starts one VMM per VM (--vmm, default cloud-hypervisor) with
--api-socket path=<dir>/vms/<vm>/api.sock, and drives it only through Cloud
Hypervisor's REST API on that socket. The VMs outlive the agent; a restarted
agent finds them again through their sockets, and reports (never kills) a
VMM it cannot account for.

--shape NAME:VCPUS:MEMORY[:GPUS] (repeatable) are the sizes offered;
--vcpus and --memory what the VMs may take in all. --bridge names the host
bridge each VM's tap joins. --local-vmm runs the local VMM (test equipment
serving the same REST API, its guest a worker process or, with --local-vmm
docker, a container) instead of cloud-hypervisor, on a machine without KVM.

Registered with an https Manager (--registration-token, --manager-url
https://…), the agent sends a certificate request and serves mutual TLS with
the certificate the Manager's cluster CA signs, accepting only the Manager's
client certificate (kept in <dir>/tls across restarts). Without one it serves
cleartext, which it does off loopback only with --insecure-plaintext.`,
		Example: `  norsk-ctl host-agent --name enc-01 --dir /var/lib/norsk-host-agent --listen 10.0.0.5:6797 \
    --registration-token nht_… --manager-url https://mgr-1:6790 --manager-ca-hash sha256:… \
    --shape ch.small:2:2G --shape ch.large:8:8G \
    --image norsk-worker-1.4.0=/var/lib/norsk/images/worker-1.4.0.raw \
    --kernel /var/lib/norsk/vmlinux --cmdline "console=ttyS0 root=/dev/vda rw" --bridge br0`,
		Args: cmdutil.ExactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			var level slog.Level
			if err := level.UnmarshalText([]byte(logLevel)); err != nil {
				return cmdutil.UsageErrorf("--log-level %q: want debug, info, warn or error", logLevel)
			}
			log := slog.New(slog.NewTextHandler(g.ErrOut, &slog.HandlerOptions{Level: level}))
			cfg.Logger = log
			for _, s := range shapes {
				sh, err := hostagent.ParseShape(s)
				if err != nil {
					return cmdutil.UsageErrorf("--shape: %v", err)
				}
				cfg.Shapes = append(cfg.Shapes, sh)
			}
			cfg.Images = map[string]string{}
			for _, kv := range images {
				k, v, err := cmdutil.SplitKV("--image", kv)
				if err != nil {
					return err
				}
				cfg.Images[k] = v
			}
			if memory != "" {
				sh, err := hostagent.ParseShape("x:1:" + memory)
				if err != nil {
					return cmdutil.UsageErrorf("--memory %q: want a size (16G, 512M)", memory)
				}
				cfg.MemoryBytes = sh.MemoryBytes
			}
			if tokenFile != "" {
				b, err := os.ReadFile(tokenFile)
				if err != nil {
					return fmt.Errorf("--token-file: %w", err)
				}
				cfg.Token = strings.TrimSpace(string(b))
			}
			switch localVMM {
			case "":
				cfg.VMM = hostagent.Exec{Path: vmm, Args: vmmArgs}
			case "process", "docker":
				self, err := os.Executable()
				if err != nil {
					return err
				}
				cfg.VMM = hostagent.Exec{Path: self, Args: []string{"ch-vmm", "--guest", localVMM}}
			default:
				return cmdutil.UsageErrorf("--local-vmm %q: want process or docker", localVMM)
			}
			if reg.Token != "" {
				for _, u := range strings.Split(regManagers, ",") {
					if u = strings.TrimSpace(u); u != "" {
						if !strings.Contains(u, "://") {
							u = "http://" + u
						}
						reg.ManagerURLs = append(reg.ManagerURLs, u)
					}
				}
				if len(reg.ManagerURLs) == 0 {
					return cmdutil.UsageErrorf("--registration-token needs --manager-url")
				}
				cfg.Register = &reg
			}
			a, err := hostagent.Start(cfg)
			if err != nil {
				return err
			}
			fmt.Fprintf(g.ErrOut, "host agent %s serving at %s\n", cfg.Name, a.URL())
			<-cmd.Context().Done()
			return a.Close()
		},
	}
	f := c.Flags()
	f.StringVar(&cfg.Name, "name", "", "the host's name (the provider's region; the overrides file names it)")
	f.StringVar(&cfg.Dir, "dir", "/var/lib/norsk-host-agent", "where the VMs' disks, records and API sockets live")
	f.StringVar(&cfg.Listen, "listen", "127.0.0.1:6797", "where the agent serves the Manager")
	f.StringVar(&cfg.MetricsListen, "metrics-listen", "", "also serve /metrics alone here, in cleartext (the --listen address serves it behind mutual TLS once the agent has a certificate)")
	f.StringVar(&tokenFile, "token-file", "", "file holding the host secret the Manager presents")
	f.StringArrayVar(&shapes, "shape", nil, "a shape offered, NAME:VCPUS:MEMORY[:GPUS] (repeatable)")
	f.StringArrayVar(&images, "image", nil, "a base image, NAME=PATH of a raw disk image with the worker installed (repeatable)")
	f.StringVar(&cfg.Kernel, "kernel", "", "the kernel the VMs boot (vmlinux, PVH)")
	f.StringVar(&cfg.Cmdline, "cmdline", "console=ttyS0 root=/dev/vda rw", "the kernel command line")
	f.StringVar(&cfg.Initramfs, "initramfs", "", "an initramfs")
	f.StringVar(&cfg.Firmware, "firmware", "", "firmware to boot instead of a kernel (e.g. hypervisor-fw)")
	f.StringVar(&cfg.Bridge, "bridge", "", "the host bridge each VM's tap device joins")
	f.Uint32Var(&cfg.VCPUs, "vcpus", 0, "vCPUs the VMs may take in all (default: the host's CPUs)")
	f.StringVar(&memory, "memory", "", "memory the VMs may take in all (default 8G)")
	f.StringArrayVar(&cfg.GPUDevices, "gpu", nil, "a VFIO device (/sys/bus/pci/devices/…) to pass through (repeatable)")
	f.StringVar(&vmm, "vmm", "cloud-hypervisor", "the VMM binary")
	f.StringArrayVar(&vmmArgs, "vmm-arg", nil, "an argument to the VMM before --api-socket (repeatable)")
	f.StringVar(&localVMM, "local-vmm", "", "run the local VMM (test equipment) instead: its guest a worker process or docker container")
	f.StringVar(&reg.Token, "registration-token", "", "register with the Manager (--manager-url) with this one-shot token from 'norsk-ctl host-agent add NAME'; the host secret it answers is kept in --dir")
	f.StringVar(&reg.AdvertiseURL, "advertise-url", "", "where the Manager reaches the agent (default https://<--listen> with an https Manager, which signs the agent's certificate; else http://<--listen>)")
	f.BoolVar(&cfg.AllowPlaintext, "insecure-plaintext", false, "serve cleartext HTTP off loopback when the agent has no certificate from the Manager (default: refuse to start)")
	f.StringVar(&reg.TLS.Fingerprint, "manager-ca-hash", "", "the Manager's CA fingerprint (sha256:…) for an https Manager")
	f.StringVar(&logLevel, "log-level", "info", "log level: debug, info, warn or error")
	c.PreRunE = func(cmd *cobra.Command, _ []string) error {
		regManagers = g.ManagerURL
		return nil
	}
	c.AddCommand(newHostAgentAddCommand(g), newHostAgentListCommand(g), newHostAgentRemoveCommand(g))
	return c
}

func newHostAgentAddCommand(g *cmdutil.Globals) *cobra.Command {
	return &cobra.Command{
		Use:   "add NAME",
		Short: "Make a one-shot registration token for a host agent to come",
		Long: `Make a one-shot registration token for the host agent NAME (a DNS label;
the overrides file names the host, with its base images). Start the agent
with --registration-token TOKEN and --manager-url: it registers, and the
Manager answers the host secret it will call the agent with (kept in the
agent's --dir). Hosts may instead be listed in config.yaml
(providers.cloudHypervisor.hosts) with their secret.`,
		Example: `  norsk-ctl host-agent add enc-03`,
		Args:    cmdutil.ExactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			t, err := cmdutil.Ask(g, cmd, func(ctx context.Context, m *norsk.Manager) (*norsk.HostAgentToken, error) {
				return m.AddHostAgent(ctx, args[0])
			}, "add host agent %s", args[0])
			if err != nil {
				return err
			}
			return g.Printer().Print(cmdutil.Result{Data: t, Table: func(w io.Writer) {
				fmt.Fprintf(w, "Host agent %s: start it with\n  norsk-ctl host-agent --name %s --registration-token %s --manager-url %s …\n", t.GetName(), t.GetName(), t.GetToken(), g.ManagerURL)
			}})
		},
	}
}

func newHostAgentListCommand(g *cmdutil.Globals) *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List the host agents added at run time",
		Args:  cmdutil.ExactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			hs, err := cmdutil.Ask(g, cmd, func(ctx context.Context, m *norsk.Manager) ([]*norsk.RegisteredHostAgent, error) {
				return m.ListHostAgents(ctx)
			}, "list host agents")
			if err != nil {
				return err
			}
			return g.Printer().Print(cmdutil.Result{Data: &managerv1.ListHostAgentsResponse{HostAgents: hs}, Table: func(w io.Writer) {
				fmt.Fprintln(w, "NAME\tREGISTERED\tURL")
				for _, h := range hs {
					fmt.Fprintf(w, "%s\t%v\t%s\n", h.GetName(), h.GetRegistered(), cmdutil.Dash(h.GetUrl()))
				}
			}})
		},
	}
}

func newHostAgentRemoveCommand(g *cmdutil.Globals) *cobra.Command {
	return &cobra.Command{
		Use:   "remove NAME",
		Short: "Forget a host agent added at run time",
		Args:  cmdutil.ExactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			_, err := cmdutil.Ask(g, cmd, func(ctx context.Context, m *norsk.Manager) (struct{}, error) {
				return struct{}{}, m.RemoveHostAgent(ctx, args[0])
			}, "remove host agent %s", args[0])
			if err != nil {
				return err
			}
			fmt.Fprintf(g.Out, "Host agent %s removed.\n", args[0])
			return nil
		},
	}
}

// NewCHVMMCommand is the local VMM's program form: one process per VM,
// serving Cloud Hypervisor's REST API on --api-socket.
func NewCHVMMCommand(g *cmdutil.Globals) *cobra.Command {
	var apiSocket, guest, logLevel, backend, qemu, accel string
	c := &cobra.Command{
		Use:    "ch-vmm --api-socket path=SOCKET",
		Short:  "The local VMM: Cloud Hypervisor's REST API on a socket, its VM a worker (test equipment)",
		Hidden: true,
		Args:   cmdutil.ExactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			var level slog.Level
			if err := level.UnmarshalText([]byte(logLevel)); err != nil {
				return cmdutil.UsageErrorf("--log-level %q: want debug, info, warn or error", logLevel)
			}
			log := slog.New(slog.NewTextHandler(g.ErrOut, &slog.HandlerOptions{Level: level}))
			switch backend {
			case "local":
				return chsim.Program(cmd.Context(), apiSocket, guest, g.Version, log)
			case "qemu":
				sock, err := chapi.ParseAPISocketFlag(apiSocket)
				if err != nil {
					return cmdutil.UsageErrorf("%v", err)
				}
				return chqemu.Run(cmd.Context(), chqemu.Options{APISocket: sock, QEMU: qemu, Accel: accel, Logger: log})
			default:
				return cmdutil.UsageErrorf("--backend %q: want local or qemu", backend)
			}
		},
	}
	c.Flags().StringVar(&backend, "backend", "local", "local (the VM's guest is a worker on this host) or qemu (a real microVM: QEMU's microvm machine under KVM)")
	c.Flags().StringVar(&qemu, "qemu", "qemu-system-x86_64", "the qemu backend's emulator binary")
	c.Flags().StringVar(&accel, "accel", chqemu.AccelKVM, "the qemu backend's accelerator: kvm, or tcg (emulation) where /dev/kvm cannot run the guest's kernel")
	c.Flags().StringVar(&apiSocket, "api-socket", "", "path=SOCKET: where the API is served")
	c.Flags().StringVar(&guest, "guest", chsim.GuestProcess, "how the VM's worker runs: process (its jobs as processes) or docker (a container)")
	c.Flags().StringVar(&logLevel, "log-level", "info", "log level: debug, info, warn or error")
	return c
}

func newNodeCreateCHCommand(g *cmdutil.Globals) *cobra.Command {
	var (
		n norsk.CloudHypervisorNode
		f cloudCreateFlags
	)
	c := &cobra.Command{
		Use:   "create-ch [ID] --shape SHAPE [--host HOST]",
		Short: "Create a node on a new Cloud Hypervisor microVM and follow it until it is online",
		Long: `Have a host agent run a microVM of the shape, booting the base image the
Manager's overrides file names for the host (and this Manager's version, or
--worker-version); its first-boot disk carries the node's one-shot
registration token, the Manager members' URLs and the CA pin, so its worker
registers by itself. Without --host the host with the most room for the
shape is used. 'norsk-ctl instance-types --provider cloud-hypervisor' lists
the shapes and the hosts offering each.`,
		Example: `  norsk-ctl node create-ch --host enc-01 --shape ch.small --pool encoders`,
		Args:    cmdutil.OptionalArgs("ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 {
				n.NodeID = args[0]
			}
			if n.Shape == "" {
				return cmdutil.UsageErrorf("give --shape")
			}
			tags, err := f.tagMap()
			if err != nil {
				return err
			}
			n.Tags = tags
			return createCloudNode(g, cmd, f, "create a microVM node", func(ctx context.Context, m *norsk.Manager) (*norsk.CloudNode, error) {
				return m.CreateCloudHypervisorNode(ctx, n)
			})
		},
	}
	c.Flags().StringVar(&n.Host, "host", "", "the host agent (default: the one with the most room)")
	c.Flags().StringVar(&n.Shape, "shape", "", "the shape, e.g. ch.small")
	c.Flags().StringVar(&n.Pool, "pool", "", "the pool tier the node joins")
	c.Flags().StringVar(&n.WorkerVersion, "worker-version", "", "the worker version whose base image boots (default: the Manager's)")
	f.register(c)
	return c
}

// NewCHInitramfsCommand builds the initramfs the qemu backend's microVMs
// boot: norsk-guest-init as /init, the worker binary, the kernel's virtio
// modules.
func NewCHInitramfsCommand(g *cmdutil.Globals) *cobra.Command {
	var out, init, worker, kernel, modRoot string
	c := &cobra.Command{
		Use:    "ch-initramfs -o FILE --init PATH --worker PATH --kernel /boot/vmlinuz-RELEASE",
		Short:  "Build the initramfs a ch-vmm --backend qemu microVM boots (its worker from the first-boot disk)",
		Hidden: true,
		Args:   cmdutil.ExactArgs(),
		RunE: func(_ *cobra.Command, _ []string) error {
			for flag, v := range map[string]string{"-o": out, "--init": init, "--worker": worker, "--kernel": kernel} {
				if v == "" {
					return cmdutil.UsageErrorf("give %s", flag)
				}
			}
			rel, err := chqemu.KernelRelease(kernel)
			if err != nil {
				return cmdutil.UsageErrorf("--kernel: %v", err)
			}
			mods, err := chqemu.ModulesFor(modRoot, rel, chqemu.GuestModules...)
			if err != nil {
				return err
			}
			if err := chqemu.WriteInitramfs(out, chqemu.Initramfs{Init: init, Modules: mods,
				Files: []chqemu.InitramfsFile{{Path: "/bin/norsk-ctl", Source: worker, Mode: 0o755}}}); err != nil {
				return err
			}
			fmt.Fprintf(g.Out, "%s: /init, /bin/norsk-ctl and %d modules of %s\n", out, len(mods), rel)
			return nil
		},
	}
	f := c.Flags()
	f.StringVarP(&out, "output", "o", "", "the initramfs file to write")
	f.StringVar(&init, "init", "", "a static norsk-guest-init binary (go build ./cmd/norsk-guest-init with CGO_ENABLED=0)")
	f.StringVar(&worker, "worker", "", "a static norsk-ctl binary (CGO_ENABLED=0) for the guest's worker")
	f.StringVar(&kernel, "kernel", "", "the kernel the VMs boot (/boot/vmlinuz-RELEASE): its modules go in")
	f.StringVar(&modRoot, "modules", "/lib/modules", "where the kernel's modules are")
	return c
}
