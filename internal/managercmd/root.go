// Package managercmd is the norsk-manager command line: `run` starts a
// Manager member from flags and/or a config.yaml, `dev` starts a complete
// single-machine system (a member, in-process workers, a demo job). The
// binary in cmd/norsk-manager only calls Execute.
package managercmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/norsk-go/norsk-manager/internal/buildinfo"

	// The cloud providers config.yaml may name (providers.aws, providers.oci).
	_ "github.com/norsk-go/norsk-manager/internal/providers/aws"
	_ "github.com/norsk-go/norsk-manager/internal/providers/oci"
)

// Execute runs the command line and returns the process exit code.
func Execute() int {
	root := newRoot()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "Error:", err)
		var ue usageError
		if errors.As(err, &ue) {
			return 2
		}
		return 1
	}
	return 0
}

type usageError struct{ error }

func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:           "norsk-manager",
		Short:         "The Norsk Manager: runs live-video jobs on a fleet of workers",
		Version:       buildinfo.Label(),
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error { return usageError{err} })
	root.AddCommand(newRunCommand(), newDevCommand(), newDevWorkerCommand(), newDevMockHostCommand(), newCloudInstanceCommand(), newCHVMMCommand(), newSnapshotCommand(), newTokenCommand(), newTLSCommand())
	return root
}

// logFlags are the logging options every subcommand takes.
type logFlags struct {
	level  string
	format string
}

func (l *logFlags) register(c *cobra.Command) {
	c.Flags().StringVar(&l.level, "log-level", "info", "log level: debug, info, warn or error")
	c.Flags().StringVar(&l.format, "log-format", "text", "log format: text or json")
}

// args are the flags that give a child process (a dev worker) the same
// logging.
func (l *logFlags) args() []string {
	return []string{"--log-level", l.level, "--log-format", l.format}
}

func (l *logFlags) logger(w io.Writer) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(l.level)); err != nil {
		return nil, usageError{fmt.Errorf("--log-level %q: want debug, info, warn or error", l.level)}
	}
	opts := &slog.HandlerOptions{Level: level}
	switch strings.ToLower(l.format) {
	case "text", "":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, usageError{fmt.Errorf("--log-format %q: want text or json", l.format)}
}
