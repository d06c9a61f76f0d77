package process

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/norsk-go/norsk-manager/internal/runtime"
)

// StartService starts a prepared (or exited) service's process in a session
// of its own and records its pid and start time.
func (r *Runtime) StartService(ctx context.Context, key runtime.Key, service string) (runtime.ServiceStatus, error) {
	unlock, err := r.lockInstance(key, false)
	if errors.Is(err, fs.ErrNotExist) {
		return runtime.ServiceStatus{}, fmt.Errorf("start %s/%s: %w", key, service, runtime.ErrNotFound)
	}
	if err != nil {
		return runtime.ServiceStatus{}, fmt.Errorf("start %s/%s: %w", key, service, err)
	}
	defer unlock()

	path := r.statePath(key, service)
	st, err := r.loadService(key, service)
	if err != nil {
		return runtime.ServiceStatus{}, fmt.Errorf("start %s/%s: %w", key, service, err)
	}
	if p := st.Process; p != nil && alive(p.PID, p.StartTicks) {
		return r.status(st), nil
	}
	if len(st.Argv) == 0 {
		return runtime.ServiceStatus{}, fmt.Errorf("start %s/%s: state file has no command: %w", key, service, runtime.ErrInvalidSpec)
	}

	if err := r.portsAtStart(key, st); err != nil {
		return runtime.ServiceStatus{}, fmt.Errorf("start %s/%s: host ports: %w", key, service, err)
	}

	logf, err := os.OpenFile(filepath.Join(r.instanceDir(key), service+".log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return runtime.ServiceStatus{}, fmt.Errorf("start %s/%s: log file: %w", key, service, err)
	}
	env := make([]string, 0, len(st.Env)+2)
	for _, k := range []string{"PATH", "HOME"} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	env = append(env, st.Env...)
	cmd := &exec.Cmd{
		Path:   st.Argv[0],
		Args:   st.Argv,
		Env:    env,
		Dir:    st.WorkDir,
		Stdout: logf,
		Stderr: logf,
		// A session of its own: the process outlives the worker, and its
		// group can be signalled as one.
		SysProcAttr: &syscall.SysProcAttr{Setsid: true},
	}
	err = cmd.Start()
	_ = logf.Close() // the child holds its own descriptor
	if err != nil {
		return runtime.ServiceStatus{}, fmt.Errorf("start %s/%s: %s: %w", key, service, st.Argv[0], err)
	}
	pid := cmd.Process.Pid
	// The child cannot be reaped before reap runs, so its /proc entry is
	// there (if only as a zombie).
	ps, err := readProcStat(pid)
	if err != nil {
		r.log.Warn("cannot read the start time of a started process", "instance", key.String(), "service", service, "pid", pid, "err", err)
	}
	c := &child{pid: pid, ticks: ps.startTicks, exited: make(chan struct{}), recorded: make(chan struct{})}
	r.mu.Lock()
	r.children[path] = c
	r.mu.Unlock()
	go r.reap(key, path, cmd, c)

	st.Process = &processState{PID: pid, StartTicks: ps.startTicks, StartedAt: time.Now().UTC()}
	if err := saveState(path, st); err != nil {
		// A process nobody could find again must not run.
		_ = syscall.Kill(-pid, syscall.SIGKILL) // our unreaped child: the pid is still its own
		return runtime.ServiceStatus{}, fmt.Errorf("start %s/%s: %w", key, service, err)
	}
	r.log.Info("started process", "instance", key.String(), "service", service, "pid", pid, "argv", st.Argv)
	// A process that exited already shows as not running; Wait returns
	// its exit code.
	return r.status(st), nil
}

// reap waits for a process this runtime started, records its exit code in
// the state file (unless the file now names another process), and then
// forgets it. It runs once per started process and ends when the process
// exits.
func (r *Runtime) reap(key runtime.Key, path string, cmd *exec.Cmd, c *child) {
	_ = cmd.Wait() // the exit status is in cmd.ProcessState
	c.code = exitCode(cmd.ProcessState)
	close(c.exited)
	defer close(c.recorded)
	defer func() {
		r.mu.Lock()
		if r.children[path] == c {
			delete(r.children, path)
		}
		r.mu.Unlock()
	}()
	r.log.Info("process exited", "instance", key.String(), "pid", c.pid, "exit_code", c.code, "file", filepath.Base(path))

	unlock, err := r.lockInstance(key, false)
	if err != nil {
		return // the instance was removed
	}
	defer unlock()
	st, err := loadState(path)
	if err != nil || st.Process == nil || st.Process.PID != c.pid || st.Process.StartTicks != c.ticks {
		return // removed, or prepared or started anew since
	}
	code := c.code
	st.Process.ExitCode = &code
	st.Process.ExitedAt = time.Now().UTC()
	if err := saveState(path, st); err != nil {
		r.log.Warn("cannot record an exit code", "path", path, "err", err)
	}
}

// child returns the process this runtime started for a state file, if it
// is the one p names.
func (r *Runtime) child(path string, p *processState) *child {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.children[path]
	if c == nil || c.pid != p.PID || c.ticks != p.StartTicks {
		return nil
	}
	return c
}

// Wait blocks until the service's process is not running and returns its
// exit code: known for a process this runtime started; for an adopted one
// only if a state file recorded it, else -1.
func (r *Runtime) Wait(ctx context.Context, key runtime.Key, service string) (int, error) {
	path := r.statePath(key, service)
	st, err := r.loadService(key, service)
	if err != nil {
		return -1, fmt.Errorf("wait %s/%s: %w", key, service, err)
	}
	p := st.Process
	if p == nil {
		return -1, nil // never started
	}
	if c := r.child(path, p); c != nil {
		select {
		case <-c.recorded:
			return c.code, nil
		case <-ctx.Done():
			return -1, fmt.Errorf("wait %s/%s: %w", key, service, ctx.Err())
		}
	}
	if err := r.waitDead(ctx, path, p); err != nil {
		return -1, fmt.Errorf("wait %s/%s: %w", key, service, err)
	}
	return r.recordedExit(ctx, path, p), nil
}

// recordedExit returns the exit code a state file recorded for p, or -1.
// A process another runtime started (a predecessor in this same process,
// say) is recorded by that runtime just after it is reaped, so the file is
// read a second time, one poll interval later, before giving up.
func (r *Runtime) recordedExit(ctx context.Context, path string, p *processState) int {
	read := func() (int, bool) {
		st, err := loadState(path)
		if err != nil || st.Process == nil || st.Process.PID != p.PID || st.Process.StartTicks != p.StartTicks {
			return -1, true // gone or superseded: nothing will be recorded
		}
		if st.Process.ExitCode != nil {
			return *st.Process.ExitCode, true
		}
		return -1, false
	}
	if code, ok := read(); ok {
		return code
	}
	t := time.NewTimer(pollInterval)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		return -1
	}
	code, _ := read()
	return code
}

// waitDead blocks until process p no longer runs, or ctx ends. It does not
// need the instance lock (and callers may hold it): for a child it waits for
// the reap, for any other process it polls /proc.
func (r *Runtime) waitDead(ctx context.Context, path string, p *processState) error {
	if c := r.child(path, p); c != nil {
		select {
		case <-c.exited:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	t := time.NewTicker(pollInterval)
	defer t.Stop()
	for alive(p.PID, p.StartTicks) {
		select {
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// StopService sends SIGTERM to the service's process group, and SIGKILL
// once grace (0: DefaultStopGrace) has passed. It returns once the process
// no longer runs; what else remained of its group is killed then.
func (r *Runtime) StopService(ctx context.Context, key runtime.Key, service string, grace time.Duration) error {
	path := r.statePath(key, service)
	st, err := r.loadService(key, service)
	if err != nil {
		return fmt.Errorf("stop %s/%s: %w", key, service, err)
	}
	p := st.Process
	if p == nil || !alive(p.PID, p.StartTicks) {
		return nil
	}
	if grace <= 0 {
		grace = DefaultStopGrace
	}
	r.log.Info("stopping process", "instance", key.String(), "service", service, "pid", p.PID, "grace", grace)
	if err := signalService(p, syscall.SIGTERM); err != nil {
		return fmt.Errorf("stop %s/%s: SIGTERM pid %d: %w", key, service, p.PID, err)
	}
	gctx, cancel := context.WithTimeout(ctx, grace)
	err = r.waitDead(gctx, path, p)
	cancel()
	if err == nil {
		killLeftovers(p.PID)
		return nil
	}
	if ctx.Err() != nil {
		return fmt.Errorf("stop %s/%s: %w", key, service, ctx.Err())
	}
	r.log.Info("grace passed, killing process", "instance", key.String(), "service", service, "pid", p.PID)
	if err := signalService(p, syscall.SIGKILL); err != nil {
		return fmt.Errorf("stop %s/%s: SIGKILL pid %d: %w", key, service, p.PID, err)
	}
	if err := r.waitDead(ctx, path, p); err != nil {
		return fmt.Errorf("stop %s/%s: %w", key, service, err)
	}
	killLeftovers(p.PID)
	return nil
}

// Remove kills every process of the instance and deletes its directory
// (state files and logs). The job's volume directories are kept: they belong
// to the job; see RemoveJobVolumes.
func (r *Runtime) Remove(ctx context.Context, key runtime.Key) error {
	unlock, err := r.lockInstance(key, false)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("remove %s: %w", key, err)
	}
	defer unlock()
	states, err := r.instanceStates(key)
	if err != nil {
		return fmt.Errorf("remove %s: %w", key, err)
	}
	if f := r.foreign(states); f != nil {
		// Not this runtime's: absent, as far as it is concerned.
		r.log.Warn("not removing an instance directory of another node or cluster", "instance", key.String(),
			"dir", r.instanceDir(key), "node", f.NodeID, "cluster", f.ClusterID)
		return nil
	}
	for _, st := range states {
		if err := r.kill(ctx, key, st); err != nil {
			return fmt.Errorf("remove %s: service %s: %w", key, st.Service, err)
		}
	}
	if err := os.RemoveAll(r.instanceDir(key)); err != nil {
		return fmt.Errorf("remove %s: %w", key, err)
	}
	r.log.Info("removed instance", "instance", key.String(), "services", len(states))
	return nil
}

// RemoveJobVolumes deletes the directories of a job's named volumes. Remove
// keeps them because they belong to the job; call this when the job is gone
// from the node.
func (r *Runtime) RemoveJobVolumes(ctx context.Context, jobID string) error {
	if err := os.RemoveAll(r.jobVolumesDir(jobID)); err != nil {
		return fmt.Errorf("remove volumes of job %s: %w", jobID, err)
	}
	return nil
}

// loadService reads a service's state file; a missing one (or one of
// another key) is runtime.ErrNotFound.
func (r *Runtime) loadService(key runtime.Key, service string) (*serviceState, error) {
	if !validName(service) {
		return nil, fmt.Errorf("service %q: %w", service, runtime.ErrNotFound)
	}
	st, err := loadState(r.statePath(key, service))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("service %s/%s on node %s: %w", key, service, r.nodeID, runtime.ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	if st.JobID != key.JobID || st.Role != key.Role || st.Service != service {
		return nil, fmt.Errorf("service %s/%s: state file names %s/%s/%s: %w", key, service, st.JobID, st.Role, st.Service, runtime.ErrNotFound)
	}
	if !r.mine(st) {
		return nil, fmt.Errorf("service %s/%s: state file is of node %s in cluster %q, not this runtime's: %w", key, service, st.NodeID, st.ClusterID, runtime.ErrNotFound)
	}
	return st, nil
}

// Logs returns the last lines of the service's log file (stdout and stderr),
// at most tail lines and 64 KiB.
func (r *Runtime) Logs(ctx context.Context, key runtime.Key, service string, tail int) (string, error) {
	if _, err := r.loadService(key, service); err != nil {
		return "", fmt.Errorf("logs %s/%s: %w", key, service, err)
	}
	f, err := os.Open(filepath.Join(r.instanceDir(key), service+".log"))
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil // never started
	}
	if err != nil {
		return "", fmt.Errorf("logs %s/%s: %w", key, service, err)
	}
	defer f.Close()
	const max = 64 << 10
	fi, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("logs %s/%s: %w", key, service, err)
	}
	off := fi.Size() - max
	if off < 0 {
		off = 0
	}
	buf := make([]byte, fi.Size()-off)
	if _, err := f.ReadAt(buf, off); err != nil && !errors.Is(err, io.EOF) {
		return "", fmt.Errorf("logs %s/%s: %w", key, service, err)
	}
	return runtime.TailLines(string(buf), tail), nil
}
