package chsim

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/docker/docker/client"

	"github.com/norsk-go/norsk-manager/internal/chapi"
	"github.com/norsk-go/norsk-manager/internal/cloudsim"
	"github.com/norsk-go/norsk-manager/internal/worker"
)

// Guests are the ways a VM's guest boots its worker in the program form.
const (
	// GuestProcess runs the worker in the VMM's process, its jobs as
	// processes.
	GuestProcess = "process"
	// GuestDocker runs the worker as a Docker container (the cloudsim
	// worker image, built FROM scratch; never pulled), its jobs as sibling
	// containers.
	GuestDocker = "docker"
)

// Program is the program form's main: `ch-vmm --api-socket path=<socket>
// --guest process|docker`. It serves until ctx ends or a PUT
// /vmm.shutdown. version is the guest worker's version.
func Program(ctx context.Context, apiSocketFlag, guest, version string, log *slog.Logger) error {
	sock, err := chapi.ParseAPISocketFlag(apiSocketFlag)
	if err != nil {
		return err
	}
	dir := filepath.Join(filepath.Dir(sock), "guest")
	var runner cloudsim.Runner
	switch guest {
	case GuestProcess:
		runner = &cloudsim.InProcess{Dir: dir, Logger: log, Worker: worker.Config{Runtime: "process", Version: version,
			ReregisterAfter: 2 * time.Second, RegisterRetry: time.Second}}
	case GuestDocker:
		cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
		if err != nil {
			return err
		}
		defer cli.Close()
		d := &cloudsim.Docker{Client: cli, Dir: dir, Logger: log}
		bctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
		err = d.EnsureImage(bctx)
		cancel()
		if err != nil {
			return fmt.Errorf("the guest's worker image: %w", err)
		}
		runner = d
	default:
		return fmt.Errorf("--guest %q: want %s or %s", guest, GuestProcess, GuestDocker)
	}
	return Run(ctx, Options{APISocket: sock, Runner: runner, Logger: log})
}
