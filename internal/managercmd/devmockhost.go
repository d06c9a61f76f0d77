package managercmd

import (
	"fmt"
	"net"
	"os"

	"github.com/spf13/cobra"

	"github.com/norsk-go/norsk-manager/internal/buildinfo"
	"github.com/norsk-go/norsk-manager/internal/providers/mock/mockhost"
	"github.com/norsk-go/norsk-manager/internal/worker"
)

// newDevMockHostCommand is the hidden command `norsk-manager dev` runs each
// of its mock hosts with, as a process of its own (so that killing one
// loses its node as a vanished machine would). It serves on the listener
// dev hands it (--listen-fd), which dev keeps across the host's restarts.
func newDevMockHostCommand() *cobra.Command {
	var (
		fd            int
		dir, rt, name string
		logs          logFlags
	)
	c := &cobra.Command{
		Use:    "dev-mock-host",
		Short:  "A mock host of norsk-manager dev (started by dev)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := logs.logger(os.Stderr)
			if err != nil {
				return err
			}
			f := os.NewFile(uintptr(fd), "mock-host-listener")
			if f == nil {
				return fmt.Errorf("--listen-fd %d: not an open file", fd)
			}
			ln, err := net.FileListener(f)
			_ = f.Close()
			if err != nil {
				return fmt.Errorf("--listen-fd %d: %w", fd, err)
			}
			h, err := mockhost.Start(mockhost.Config{
				Listener: ln,
				DataDir:  dir,
				Logger:   log.With("host", name),
				Worker:   worker.Config{Runtime: rt, Version: buildinfo.Version},
			})
			if err != nil {
				return err
			}
			<-cmd.Context().Done()
			return h.Close()
		},
	}
	f := c.Flags()
	f.IntVar(&fd, "listen-fd", 3, "the inherited listener's file descriptor")
	f.StringVar(&dir, "data-dir", "", "the host's state")
	f.StringVar(&rt, "runtime", "process", "docker or process")
	f.StringVar(&name, "name", "", "the host's name")
	logs.register(c)
	return c
}
