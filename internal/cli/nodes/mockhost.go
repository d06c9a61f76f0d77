package nodes

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/norsk-go/norsk-manager/internal/cli/cmdutil"
	"github.com/norsk-go/norsk-manager/internal/providers/mock/mockhost"
	"github.com/norsk-go/norsk-manager/internal/worker"
)

// NewMockHostCommand runs a machine of the Manager's mock provider.
func NewMockHostCommand(g *cmdutil.Globals) *cobra.Command {
	var (
		cfg      mockhost.Config
		runtime  string
		logLevel string
	)
	c := &cobra.Command{
		Use:   "mock-host",
		Short: "Run this machine as a mock host: the Manager's mock provider boots elastic nodes on it",
		Long: `Run a mock host: a machine of the Manager's mock provider, which stands in
for a cloud's instance API on a development machine or in tests. List its
URL (http://<--listen>) under providers.mock.hosts in the Manager's
config.yaml; when placement finds no node for a job, or an operator runs
'norsk-ctl node create-mock', the Manager tells a free host to boot a worker
for a new elastic node, and that worker registers like any other. The host
runs one node at a time; when the Manager terminates the node (the
empty-node reaper does once it is idle), its worker stops every instance and
exits, and the host is free for the next.`,
		Example: `  norsk-ctl worker mock-host --listen 127.0.0.1:7101 --data-dir /tmp/mock-1`,
		Args:    cmdutil.ExactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			var level slog.Level
			if err := level.UnmarshalText([]byte(logLevel)); err != nil {
				return cmdutil.UsageErrorf("--log-level %q: want debug, info, warn or error", logLevel)
			}
			if cfg.DataDir == "" {
				cfg.DataDir = filepath.Join(os.TempDir(), "norsk-mock-host")
			}
			cfg.Logger = slog.New(slog.NewTextHandler(g.ErrOut, &slog.HandlerOptions{Level: level}))
			cfg.Worker = worker.Config{Runtime: runtime, Version: g.Version}
			h, err := mockhost.Start(cfg)
			if err != nil {
				return err
			}
			fmt.Fprintf(g.ErrOut, "mock host serving at %s (list it under providers.mock.hosts)\n", h.URL())
			<-cmd.Context().Done()
			return h.Close()
		},
	}
	f := c.Flags()
	f.StringVar(&cfg.Listen, "listen", "127.0.0.1:7101", "where the host serves the Manager's mock provider")
	f.StringVar(&cfg.DataDir, "data-dir", "", "where the node's worker keeps its state (default <tmp>/norsk-mock-host)")
	f.StringVar(&cfg.Token, "host-token", "", "bearer token the Manager must present (providers.mock.token)")
	f.StringVar(&runtime, "runtime", "", "the workers' container runtime: docker or process (default: docker when an engine answers)")
	f.Uint32Var(&cfg.VCPUs, "vcpus", 0, "vCPUs the host reports offering (informational)")
	f.StringVar(&logLevel, "log-level", "info", "log level: debug, info, warn or error")
	return c
}
