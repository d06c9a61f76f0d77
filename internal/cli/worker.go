package cli

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/internal/cli/cmdutil"
	"github.com/norsk-go/norsk-manager/internal/cli/nodes"
	"github.com/norsk-go/norsk-manager/internal/providers"
	"github.com/norsk-go/norsk-manager/internal/worker"
	"github.com/norsk-go/norsk-manager/pkg/jobsocket"
	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

// defaultWorkerDataDir is where a worker keeps its identity and instance
// records unless told otherwise.
func defaultWorkerDataDir() string {
	base := os.Getenv("XDG_DATA_HOME")
	if base == "" {
		if home, err := os.UserHomeDir(); err == nil {
			base = filepath.Join(home, ".local", "share")
		}
	}
	return filepath.Join(base, "norsk-worker")
}

func newWorkerCommand(g *cmdutil.Globals) *cobra.Command {
	var (
		cfg      worker.Config
		caps     []string
		gpus     []string
		logLevel string
		userData string
	)
	c := &cobra.Command{
		Use:   "worker",
		Short: "Run this machine as a worker node",
		Long: `Run this machine as a worker node of the Manager at --manager-url.
In a Manager cluster --manager-url may name several members, comma-separated
(https://mgr-1:6790,https://mgr-2:6790): the worker registers with whichever
answers, and remembers every member the primary names for later starts.

The first start presents the one-shot registration token (--token, from
'norsk-ctl slot register'); the worker then keeps its node secret in
--data-dir and later starts need no token. The Manager dials the worker back
at --advertise (default: the --listen address) and drives its job instances.
Instances keep running when the worker stops and are adopted when it starts
again. With an https Manager, --tls-ca or --tls-ca-hash (as 'norsk-ctl slot
register' prints it) verifies the Manager, and the worker serves its stream
with mutual TLS using a certificate the Manager signs at every registration.
With --job-socket every instance gets a job socket (NORSK_JOB_SOCKET) over
which a handover migration talks to the job (docs/job-socket.md), and the
worker advertises the capability jobSocket that handovers are placed by.
The seed's form 'norsk-ctl --mode=worker --token=… --manager-url=…'
is the same command.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var level slog.Level
			if err := level.UnmarshalText([]byte(logLevel)); err != nil {
				return cmdutil.UsageErrorf("--log-level %q: want debug, info, warn or error", logLevel)
			}
			for _, s := range caps {
				name, count, err := nameCount(s)
				if err != nil {
					return cmdutil.UsageErrorf("--capability %q: %v", s, err)
				}
				cfg.Capabilities = append(cfg.Capabilities, &managerv1.Capability{Name: name, Count: uint32(count)})
			}
			for _, s := range gpus {
				model, capacity, ok := strings.Cut(s, "=")
				c, err := strconv.ParseFloat(capacity, 32)
				if !ok || model == "" || err != nil || c <= 0 {
					return cmdutil.UsageErrorf("--gpu %q: want model=capacity (e.g. L4=1)", s)
				}
				cfg.GPUs = append(cfg.GPUs, &managerv1.Gpu{Model: model, Capacity: float32(c)})
			}
			cfg.ManagerURL = g.ManagerURL
			cfg.TLSCAFile, cfg.TLSCAHash = g.TlsTrust()
			// The registration token comes from --token (or the user data)
			// alone: $NORSK_TOKEN is an operator's API token, never a
			// node's registration.
			if f := cmd.Flag("token"); f != nil && f.Changed {
				cfg.Token = g.Token
			}
			if userData != "" {
				urlSet := cmd.Flags().Changed("manager-url") || os.Getenv(norsk.EnvManagerURL) != ""
				if err := applyUserData(&cfg, userData, cmd.Flags().Changed("listen"), urlSet); err != nil {
					return err
				}
			}
			cfg.Version = clientVersion()
			cfg.Logger = slog.New(slog.NewTextHandler(g.ErrOut, &slog.HandlerOptions{Level: level}))
			if cfg.DataDir == "" {
				cfg.DataDir = defaultWorkerDataDir()
			}
			if cfg.Token == "" && !worker.HasIdentity(cfg.DataDir) {
				return cmdutil.UsageErrorf("no worker identity in %s: give the registration token with --token (from 'norsk-ctl slot register')", cfg.DataDir)
			}
			a, err := worker.New(cfg)
			if err != nil {
				return err
			}
			err = a.Run(cmd.Context())
			switch {
			case errors.Is(err, worker.ErrTerminated):
				fmt.Fprintln(g.ErrOut, "the Manager terminated this node; every instance was stopped")
				return nil
			case errors.Is(err, worker.ErrDeregistered):
				fmt.Fprintln(g.ErrOut, "the Manager deregistered this node; every instance was stopped and the identity removed")
				return nil
			}
			return err
		},
	}
	c.AddCommand(nodes.NewMockHostCommand(g))
	f := c.Flags()
	f.StringVar(&cfg.DataDir, "data-dir", "", "where the worker keeps its identity and instance records (default "+defaultWorkerDataDir()+")")
	f.StringVar(&cfg.Listen, "listen", "127.0.0.1:6791", "where the worker serves the NodeController stream the Manager dials")
	f.StringVar(&cfg.Advertise, "advertise", "", "host:port the Manager dials (default: the --listen address)")
	f.StringVar(&cfg.PublishHost, "publish-host", "", "docker runtime: the host IP a job's port is published on when its mapping names none (default: every address; 127.0.0.1 keeps job ports off the network)")
	f.StringVar(&cfg.Runtime, "runtime", "", "container runtime: docker or process (default: docker when an engine answers)")
	f.StringArrayVar(&caps, "capability", nil, "a capability this node offers, name=count (repeatable)")
	f.StringArrayVar(&gpus, "gpu", nil, "a GPU this node has, model=capacity (repeatable)")
	f.BoolVar(&cfg.JobSocket, "job-socket", false, "serve every instance a job socket (NORSK_JOB_SOCKET) for handover migrations, and advertise the "+jobsocket.Capability+" capability")
	f.StringVar(&cfg.JobSocketDir, "job-socket-dir", "", "directory of the job sockets, one sub-directory per instance (default: a short per-worker directory under $TMPDIR; see docs/job-socket.md)")
	f.StringVar(&logLevel, "log-level", "info", "log level: debug, info, warn or error")
	cmdutil.CompleteEnum(c, "log-level", "debug", "info", "warn", "error")
	cmdutil.CompleteEnum(c, "runtime", "docker", "process")
	f.StringVar(&userData, "user-data", "", "boot from a cloud instance's user data (the file cloud-init keeps, /var/lib/cloud/instance/user-data.txt): the Manager's URLs, the one-shot token and the CA pin the Manager wrote there")
	return c
}

// applyUserData takes the Manager's URLs, the registration token and the
// CA pin from a cloud instance's user data (providers.UserData). Flags
// given explicitly keep their values; a worker that already has its
// identity ignores the token. Without --listen the worker listens on every
// address (the Manager dials the instance's private address).
func applyUserData(cfg *worker.Config, path string, listenSet, urlSet bool) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("--user-data: %w", err)
	}
	ud, err := providers.DecodeUserData(b)
	if err != nil {
		return fmt.Errorf("--user-data %s: %w", path, err)
	}
	if !urlSet {
		cfg.ManagerURL = strings.Join(ud.ManagerURLs, ",")
	}
	if cfg.Token == "" {
		cfg.Token = ud.Token
	}
	if cfg.TLSCAHash == "" && cfg.TLSCAFile == "" {
		cfg.TLSCAHash = ud.CAHash
	}
	if !listenSet {
		cfg.Listen = ud.Listen
		if cfg.Listen == "" {
			cfg.Listen = "0.0.0.0:6791"
		}
	}
	return nil
}

// nameCount parses "name=count" (count defaults to 1).
func nameCount(s string) (string, int, error) {
	name, count, ok := strings.Cut(s, "=")
	if name == "" {
		return "", 0, errors.New("want name=count")
	}
	if !ok {
		return name, 1, nil
	}
	n, err := strconv.Atoi(count)
	if err != nil || n < 0 {
		return "", 0, errors.New("count must be a whole number >= 0")
	}
	return name, n, nil
}
