package cloudsim

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/client"

	"github.com/norsk-go/norsk-manager/internal/imagebuild"
)

// Docker facts of the instances' containers.
const (
	// WorkerImage is the image an instance's container runs: FROM scratch,
	// the static norsk-ctl binary (built locally; never pulled).
	WorkerImage = "norsk-cloudsim/worker:dev"
	// WorkerPackage is what the image is built from.
	WorkerPackage = "github.com/norsk-go/norsk-manager/cmd/norsk-ctl"
	// userDataPath is where cloud-init keeps an instance's user data; the
	// container finds it there.
	userDataPath = "/var/lib/cloud/instance/user-data.txt"
	// labelInstance marks an instance's container.
	labelInstance = "norsk.cloudsim/instance"
)

// Docker runs each instance as a Docker container of WorkerImage on the
// host's network, its worker reading its user data where cloud-init keeps
// it and running its jobs as sibling containers (the engine's socket is
// mounted).
type Docker struct {
	Client *client.Client
	// Dir holds each machine's disk (bind-mounted into its container).
	Dir    string
	Logger *slog.Logger

	once sync.Once
	err  error
}

// EnsureImage builds WorkerImage unless the engine has it (the go command
// builds the binary; nothing is pulled).
func (r *Docker) EnsureImage(ctx context.Context) error {
	r.once.Do(func() {
		if _, err := r.Client.ImageInspect(ctx, WorkerImage); err == nil {
			return
		}
		r.err = imagebuild.Build(ctx, r.Client, WorkerImage, WorkerPackage)
	})
	return r.err
}

// Boot creates and starts the instance's container.
func (r *Docker) Boot(id string, userData []byte) (Machine, error) {
	ud, err := nodeOf(userData)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := r.EnsureImage(ctx); err != nil {
		return nil, fmt.Errorf("cloudsim: the worker image: %w", err)
	}
	dir, err := filepath.Abs(filepath.Join(r.Dir, id))
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(dir, "worker"), 0o700); err != nil {
		return nil, err
	}
	udFile := filepath.Join(dir, "user-data.txt")
	if err := os.WriteFile(udFile, userData, 0o600); err != nil {
		return nil, err
	}
	name := "norsk-cloudsim-" + id
	_ = r.Client.ContainerRemove(ctx, name, container.RemoveOptions{Force: true})
	cfg := &container.Config{
		Image: WorkerImage,
		Cmd: []string{"worker", "--user-data", userDataPath, "--data-dir", "/var/lib/norsk-worker",
			"--listen", "127.0.0.1:0", "--runtime", "docker"},
		Labels: map[string]string{labelInstance: id},
		Env:    []string{"HOME=/var/lib/norsk-worker", "TMPDIR=/tmp"},
	}
	host := &container.HostConfig{
		NetworkMode: "host",
		Mounts: []mount.Mount{
			{Type: mount.TypeBind, Source: udFile, Target: userDataPath, ReadOnly: true},
			{Type: mount.TypeBind, Source: filepath.Join(dir, "worker"), Target: "/var/lib/norsk-worker"},
			{Type: mount.TypeBind, Source: "/var/run/docker.sock", Target: "/var/run/docker.sock"},
			{Type: mount.TypeTmpfs, Target: "/tmp"},
		},
	}
	if _, err := r.Client.ContainerCreate(ctx, cfg, host, nil, nil, name); err != nil {
		return nil, fmt.Errorf("cloudsim: create instance %s's container: %w", id, err)
	}
	if err := r.Client.ContainerStart(ctx, name, container.StartOptions{}); err != nil {
		_ = r.Client.ContainerRemove(ctx, name, container.RemoveOptions{Force: true})
		return nil, fmt.Errorf("cloudsim: start instance %s's container: %w", id, err)
	}
	log := r.Logger
	if log == nil {
		log = slog.Default()
	}
	return &containerMachine{cli: r.Client, name: name, nodeID: ud.NodeID, log: log.With("instance", id)}, nil
}

type containerMachine struct {
	cli    *client.Client
	name   string
	nodeID string
	log    *slog.Logger
	once   sync.Once
}

func (m *containerMachine) Stop(ctx context.Context) error {
	var err error
	m.once.Do(func() {
		timeout := 10
		_ = m.cli.ContainerStop(ctx, m.name, container.StopOptions{Timeout: &timeout})
		err = m.cli.ContainerRemove(ctx, m.name, container.RemoveOptions{Force: true})
		removeInstances(ctx, m.nodeID, "", "docker", nil, "", m.log)
	})
	return err
}
