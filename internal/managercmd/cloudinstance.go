package managercmd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/norsk-go/norsk-manager/internal/buildinfo"
	"github.com/norsk-go/norsk-manager/internal/chsim"
	"github.com/norsk-go/norsk-manager/internal/providers"
	"github.com/norsk-go/norsk-manager/internal/worker"
)

// newCloudInstanceCommand is the hidden command the local clouds of
// `norsk-manager dev --clouds local` run each instance's worker with, as a
// process of its own (without Docker): the worker boots from the
// instance's user data, as a cloud image's worker does.
func newCloudInstanceCommand() *cobra.Command {
	var (
		userData, dir, rt string
		logs              logFlags
	)
	c := &cobra.Command{
		Use:    "cloud-instance",
		Short:  "The worker of a local cloud instance (started by dev --clouds local)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := logs.logger(os.Stderr)
			if err != nil {
				return err
			}
			b, err := os.ReadFile(userData)
			if err != nil {
				return fmt.Errorf("--user-data: %w", err)
			}
			ud, err := providers.DecodeUserData(b)
			if err != nil {
				return err
			}
			a, err := worker.New(worker.Config{
				ManagerURL: strings.Join(ud.ManagerURLs, ","), Token: ud.Token, TLSCAHash: ud.CAHash,
				DataDir: dir, Listen: "127.0.0.1:0", Runtime: rt, Version: buildinfo.Version,
				Logger: log.With("node", ud.NodeID),
			})
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
	f.StringVar(&userData, "user-data", "", "the instance's user data")
	f.StringVar(&dir, "data-dir", "", "the instance's disk")
	f.StringVar(&rt, "runtime", "process", "docker or process")
	logs.register(c)
	return c
}

// newCHVMMCommand is the hidden command `norsk-manager dev --ch-hosts`
// runs each VM's local VMM with (when its workers are processes): Cloud
// Hypervisor's REST API on --api-socket, the VM's guest a worker booting
// from the VM's first-boot disk.
func newCHVMMCommand() *cobra.Command {
	var (
		apiSocket, guest string
		logs             logFlags
	)
	c := &cobra.Command{
		Use:    "ch-vmm",
		Short:  "The local VMM of a dev host agent's VM (started by dev --ch-hosts)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := logs.logger(os.Stderr)
			if err != nil {
				return err
			}
			return chsim.Program(cmd.Context(), apiSocket, guest, buildinfo.Version, log)
		},
	}
	c.Flags().StringVar(&apiSocket, "api-socket", "", "path=SOCKET: where the API is served")
	c.Flags().StringVar(&guest, "guest", chsim.GuestProcess, "process or docker")
	logs.register(c)
	return c
}
