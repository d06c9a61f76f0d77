package managercmd

import (
	"context"
	"errors"
	"os"

	"github.com/spf13/cobra"

	"github.com/norsk-go/norsk-manager/internal/devmode"
	"github.com/norsk-go/norsk-manager/internal/worker"
)

// newDevWorkerCommand is the hidden command `norsk-manager dev` runs each
// of its workers with, as a process of its own (so that killing one loses
// a node). The first registration's token comes in NORSK_WORKER_TOKEN.
func newDevWorkerCommand() *cobra.Command {
	var (
		url, dir, rt, name string
		logs               logFlags
	)
	c := &cobra.Command{
		Use:    "dev-worker",
		Short:  "A worker of norsk-manager dev (started by dev)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := logs.logger(os.Stderr)
			if err != nil {
				return err
			}
			cfg := devmode.WorkerConfig(url, dir, os.Getenv("NORSK_WORKER_TOKEN"), rt, log.With("worker", name))
			a, err := worker.New(cfg)
			if err != nil {
				return err
			}
			err = a.Run(cmd.Context())
			if errors.Is(err, context.Canceled) || errors.Is(err, worker.ErrTerminated) || errors.Is(err, worker.ErrDeregistered) {
				return nil
			}
			return err
		},
	}
	f := c.Flags()
	f.StringVar(&url, "manager-url", "", "the dev Manager's URL")
	f.StringVar(&dir, "data-dir", "", "the worker's state")
	f.StringVar(&rt, "runtime", "process", "docker or process")
	f.StringVar(&name, "name", "", "the worker's name (its node)")
	logs.register(c)
	return c
}
