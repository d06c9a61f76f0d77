package managercmd

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/norsk-go/norsk-manager/internal/devmode"
	"github.com/norsk-go/norsk-manager/internal/manager"
)

func newDevCommand() *cobra.Command {
	var (
		opts      devmode.Options
		logs      logFlags
		inProcess bool
	)
	c := &cobra.Command{
		Use:   "dev",
		Short: "Run a complete single-machine system: a Manager, workers and a demo job",
		Long: `Run a complete system on this machine: one Manager member with its store in
--data-dir, --workers workers and — on a fresh store — a demo job named
"demo" (the hello example) started on the first worker. Each worker is a
process of its own (the hidden dev-worker command of this binary; with
--in-process-workers they run inside this process instead), with the docker
runtime when a Docker engine answers and the process runtime when none does
(--runtime). Killing a worker's process (kill -9 <pid>; the banner prints
every pid) loses its node, as a crash would: its jobs move, and dev starts
the worker again a little later, as a rebooted node.

Each worker is a node of its own (dev-worker-1 … dev-worker-N, in pool dev)
with its state in <data-dir>/workers/<name> and its own listener; the banner
prints every worker's node id. The workers serve job sockets (migrations
with --strategy handover) and publish job ports on 127.0.0.1 only.
--workers 3 is a multi-node playground for placement and bundles, e.g.
examples/bundles/resilient.yaml: a primary and a backup kept on different
nodes (resilient-process.yaml with the process runtime). --mock-hosts 2 adds
two mock hosts: when a job fits no worker, the Manager creates an elastic
node on one (pool burst), and the empty-node reaper terminates it after
--idle-expiry without a job. Each mock host is a process of its own (the
banner gives its pid): kill -9 one and its node is lost as a vanished
machine's would be; a fresh, empty host takes its address. --clouds local starts a local EC2 endpoint and
a local OCI endpoint (test equipment speaking the clouds' own protocols) and
gives the Manager its aws and oci providers, pointed at them through the
SDKs' own settings: 'norsk-ctl node create-aws' launches an "instance" that
boots a worker from its user data, and a bundle in pool burst that fits no
node makes the AutoManager create one (--workers 0: nothing but elastic
nodes). --ch-hosts 1 starts a Cloud Hypervisor host agent whose VMs are run
by a local VMM (test equipment serving Cloud Hypervisor's REST API on each
VM's API socket) and gives the Manager its cloud-hypervisor provider: 'norsk-ctl
node create-ch --shape ch.medium' makes a microVM node, and a bundle in pool
microvm that fits no node makes the AutoManager create one.

--registry runs an image registry (Debian's docker-registry) on a loopback
port with the example images pushed into it: jobs naming them pull from it,
and 'norsk-ctl node prefetch' warms a node ahead of need. --spares 2 (with
--mock-hosts 3 or more) keeps two warm spares in pool burst,
--spares-warm-for naming the templates whose images they prefetch.

Dev builds the example programs the demo and examples/ use: the images
norsk-examples/hello:dev and norsk-examples/sample-media:dev (FROM scratch,
nothing pulled, run as user 65534; rebuilt when their source changed), or
./build/hello and ./build/sample-media for the process runtime — so run it
from the repository root.

The admin API token is in <data-dir>/admin.token; norsk-ctl finds it by
itself for a dev on this machine's loopback while the dev runs. The
operator console (norsk-mgr) is at --console-listen.

State lives in --data-dir (default ` + devmode.DefaultDataDirHint + `), so stopping and
starting dev again keeps every job, and the workers adopt the instances that
kept running. --ephemeral uses a temporary directory and, on Ctrl-C, stops
every instance and worker and removes it.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := logs.logger(os.Stderr)
			if err != nil {
				return err
			}
			opts.Logger = log
			opts.Out = os.Stdout
			if opts.Workers < 0 || opts.Workers > 64 || (opts.Workers == 0 && opts.Clouds == "" && opts.MockHosts == 0 && opts.CHHosts == 0) {
				return usageError{fmt.Errorf("--workers %d: want 1 to 64 (0 with --clouds local, --mock-hosts or --ch-hosts: elastic nodes only)", opts.Workers)}
			}
			if opts.Spares < 0 || opts.Spares > 16 || (opts.Spares > 0 && opts.Spares >= opts.MockHosts) {
				return usageError{fmt.Errorf("--spares %d: want 0 to 16, fewer than --mock-hosts (%d)", opts.Spares, opts.MockHosts)}
			}
			if opts.MockHosts < 0 || opts.MockHosts > 16 {
				return usageError{fmt.Errorf("--mock-hosts %d: want 0 to 16", opts.MockHosts)}
			}
			if opts.DataDir != "" {
				if opts.DataDir, err = filepath.Abs(opts.DataDir); err != nil {
					return err
				}
			}
			if !inProcess {
				if exe, err := os.Executable(); err == nil {
					opts.WorkerExec = exe
					opts.WorkerArgs = logs.args() // its logs as dev's (--log-format json: JSON)
				}
			}
			return devmode.Run(cmd.Context(), opts)
		},
	}
	f := c.Flags()
	f.StringVar(&opts.DataDir, "data-dir", "", "where the store and the workers keep their state")
	f.BoolVar(&opts.Ephemeral, "ephemeral", false, "use a temporary data directory; on exit stop every instance and worker and remove it")
	f.IntVar(&opts.Workers, "workers", 1, "number of workers, each a process and a node of its own (1 to 64; 0 with --clouds local, --mock-hosts or --ch-hosts)")
	f.StringVar(&opts.Listen, "listen", "127.0.0.1:6790", "Manager API address")
	f.StringVar(&opts.Runtime, "runtime", "auto", "worker runtime: auto, docker or process")
	f.BoolVar(&opts.NoDemo, "no-demo", false, "do not create and start the demo job (demo, the hello example)")
	f.DurationVar(&opts.LostGrace, "lost-grace", manager.DefaultLostGrace, "how long a worker's stream may be gone before its node is lost (its jobs then move)")
	f.BoolVar(&inProcess, "in-process-workers", false, "run the workers inside this process instead of one process each")
	f.IntVar(&opts.MockHosts, "mock-hosts", 0, "mock hosts standing by for elastic nodes of pool "+devmode.MockPool+" (0 to 16)")
	f.DurationVar(&opts.IdleExpiry, "idle-expiry", 10*time.Minute, "how long an elastic node may be idle before the reaper terminates it")
	f.StringVar(&opts.ConsoleListen, "console-listen", "127.0.0.1:6795", "the operator console's address (norsk-mgr beside the Manager)")
	f.BoolVar(&opts.NoConsole, "no-console", false, "run no console (norsk-mgr)")
	f.IntVar(&opts.CHHosts, "ch-hosts", 0, "start that many Cloud Hypervisor host agents (their VMs run by the local VMM) and give the Manager the cloud-hypervisor provider (pool "+devmode.CHPool+")")
	f.StringVar(&opts.Clouds, "clouds", "", `"local": start a local EC2 and a local OCI endpoint and give the Manager aws and oci providers pointed at them (pool `+devmode.CloudPool+` on EC2)`)
	f.BoolVar(&opts.Registry, "registry", false, "run an image registry (Debian's docker-registry) with the example images pushed into it, for pulls and prefetches (docker runtime)")
	f.IntVar(&opts.Spares, "spares", 0, "warm spares the AutoManager keeps in the mock pool "+devmode.MockPool+" (needs more --mock-hosts)")
	f.StringSliceVar(&opts.SparesWarmFor, "spares-warm-for", nil, "the templates (bundle job names, template tags or job ids) the spares are warm for: their images are prefetched")
	f.StringVar(&opts.RegistryListen, "registry-listen", devmode.DefaultRegistryListen, "the image registry's loopback address (with --registry)")
	logs.register(c)
	return c
}
