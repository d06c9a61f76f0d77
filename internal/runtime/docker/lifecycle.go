package docker

import (
	"context"
	"fmt"
	"io"
	"math"
	"strconv"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/norsk-go/norsk-manager/internal/runtime"
)

// StartService starts a prepared (or exited) service's container and
// returns its status with the ports the engine published.
func (r *Runtime) StartService(ctx context.Context, key runtime.Key, service string) (runtime.ServiceStatus, error) {
	c, err := r.inspectService(ctx, key, service)
	if err != nil {
		return runtime.ServiceStatus{}, fmt.Errorf("start %s/%s: %w", key, service, err)
	}
	if c.State != nil && c.State.Running {
		return r.status(c), nil
	}
	if err := r.cli.ContainerStart(ctx, c.ID, container.StartOptions{}); err != nil {
		return runtime.ServiceStatus{}, fmt.Errorf("start %s/%s: container %s: %w", key, service, c.Name, err)
	}
	c, err = r.cli.ContainerInspect(ctx, c.ID)
	if err != nil {
		return runtime.ServiceStatus{}, fmt.Errorf("start %s/%s: inspect after start: %w", key, service, err)
	}
	st := r.status(c)
	r.log.Info("started container", "instance", key.String(), "service", service, "container", c.Name, "ports", len(st.Ports))
	return st, nil
}

// Wait blocks until the service's container is not running and returns
// its exit code. It works on containers an earlier process created: the
// engine keeps the state.
func (r *Runtime) Wait(ctx context.Context, key runtime.Key, service string) (int, error) {
	c, err := r.inspectService(ctx, key, service)
	if err != nil {
		return -1, fmt.Errorf("wait %s/%s: %w", key, service, err)
	}
	if c.State != nil && c.State.Status == container.StateCreated {
		return -1, nil // never started
	}
	// ContainerWait's goroutine is the client's; it ends with ctx or the
	// engine's answer.
	waitC, errC := r.cli.ContainerWait(ctx, c.ID, container.WaitConditionNotRunning)
	select {
	case res := <-waitC:
		if res.Error != nil && res.Error.Message != "" {
			return -1, fmt.Errorf("wait %s/%s: engine: %s", key, service, res.Error.Message)
		}
		return int(res.StatusCode), nil
	case err := <-errC:
		if cerrdefs.IsNotFound(err) {
			return -1, fmt.Errorf("wait %s/%s: container removed: %w", key, service, runtime.ErrNotFound)
		}
		return -1, fmt.Errorf("wait %s/%s: %w", key, service, err)
	}
}

// StopService stops the service's container: SIGTERM (or the image's stop
// signal), then SIGKILL once grace has passed. The engine counts grace in
// whole seconds, so it is rounded up; 0 means DefaultStopGrace.
func (r *Runtime) StopService(ctx context.Context, key runtime.Key, service string, grace time.Duration) error {
	c, err := r.inspectService(ctx, key, service)
	if err != nil {
		return fmt.Errorf("stop %s/%s: %w", key, service, err)
	}
	if c.State == nil || !c.State.Running {
		return nil
	}
	secs := graceSeconds(grace)
	if err := r.cli.ContainerStop(ctx, c.ID, container.StopOptions{Timeout: &secs}); err != nil && !cerrdefs.IsNotFound(err) {
		return fmt.Errorf("stop %s/%s: container %s: %w", key, service, c.Name, err)
	}
	r.log.Info("stopped container", "instance", key.String(), "service", service, "container", c.Name, "grace_s", secs)
	return nil
}

func graceSeconds(grace time.Duration) int {
	if grace <= 0 {
		grace = DefaultStopGrace
	}
	return int(math.Ceil(grace.Seconds()))
}

// Remove force-removes every container of the instance (and their anonymous
// volumes). The job's named volumes are not removed: they belong to the job,
// which may have other instances on this node; see RemoveJobVolumes.
func (r *Runtime) Remove(ctx context.Context, key runtime.Key) error {
	cs, err := r.instanceContainers(ctx, key)
	if err != nil {
		return fmt.Errorf("remove %s: %w", key, err)
	}
	for _, c := range cs {
		if err := r.cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true, RemoveVolumes: true}); err != nil && !cerrdefs.IsNotFound(err) {
			return fmt.Errorf("remove %s: container %s: %w", key, firstName(c), err)
		}
		r.log.Info("removed container", "instance", key.String(), "container", firstName(c))
	}
	return nil
}

// Logs returns the last lines the service's container wrote (stdout and
// stderr interleaved), at most tail lines and 64 KiB.
func (r *Runtime) Logs(ctx context.Context, key runtime.Key, service string, tail int) (string, error) {
	c, err := r.inspectService(ctx, key, service)
	if err != nil {
		return "", fmt.Errorf("logs %s/%s: %w", key, service, err)
	}
	rc, err := r.cli.ContainerLogs(ctx, c.ID, container.LogsOptions{
		ShowStdout: true, ShowStderr: true, Tail: strconv.Itoa(max(tail, 1)),
	})
	if err != nil {
		return "", fmt.Errorf("logs %s/%s: %w", key, service, err)
	}
	defer rc.Close()
	var buf limitedBuffer
	buf.max = 64 << 10
	if c.Config != nil && c.Config.Tty {
		_, err = io.Copy(&buf, rc)
	} else {
		_, err = stdcopy.StdCopy(&buf, &buf, rc)
	}
	if err != nil {
		return buf.String(), fmt.Errorf("logs %s/%s: %w", key, service, err)
	}
	return buf.String(), nil
}

// limitedBuffer keeps the last max bytes written to it.
type limitedBuffer struct {
	b   []byte
	max int
}

func (l *limitedBuffer) Write(p []byte) (int, error) {
	l.b = append(l.b, p...)
	if len(l.b) > l.max {
		l.b = l.b[len(l.b)-l.max:]
	}
	return len(p), nil
}

func (l *limitedBuffer) String() string { return string(l.b) }
