package devmode

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/norsk-go/norsk-manager/internal/worker"
)

// workerProc is a dev worker running as a process of its own (the hidden
// `norsk-manager dev-worker` command), so that an operator can lose a node
// by killing it. A worker an earlier dev left running over the same data
// directory (dev was killed, its workers were not) is kept instead: dev
// never starts a second worker over a live one (decision 0027).
type workerProc struct {
	exec, name, dir, url, runtime string
	// args are added to the worker's command line (its logging flags).
	args []string
	// token is the first registration's; the worker keeps its identity in
	// dir afterwards.
	token  string
	reboot time.Duration
	log    *slog.Logger

	mu  sync.Mutex
	cmd *exec.Cmd
	// adopted: the worker is one an earlier dev started, found live by its
	// data directory's lock; adoptedPID is the pid its lock file names (0
	// when unknown).
	adopted    bool
	adoptedPID int
}

func (p *workerProc) pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.adopted {
		return p.adoptedPID
	}
	if p.cmd == nil || p.cmd.Process == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// begin keeps the live worker that holds the data directory, if there is
// one, and starts the worker's process otherwise.
func (p *workerProc) begin() error {
	pid, held, err := worker.LockHolder(p.dir)
	if err != nil {
		return fmt.Errorf("%s: %w", p.name, err)
	}
	p.mu.Lock()
	p.adopted, p.adoptedPID = held, pid
	p.mu.Unlock()
	if held {
		p.log.Warn("dev: a worker from an earlier run still runs over this worker's data directory; keeping it, not starting a second",
			"worker", p.name, "pid", pid, "dir", p.dir)
		return nil
	}
	return p.start()
}

// start starts the worker's process.
func (p *workerProc) start() error {
	cmd := exec.Command(p.exec, append([]string{"dev-worker", "--manager-url", p.url, "--data-dir", p.dir, "--runtime", p.runtime, "--name", p.name}, p.args...)...)
	cmd.Env = os.Environ()
	if p.token != "" {
		cmd.Env = append(cmd.Env, "NORSK_WORKER_TOKEN="+p.token)
		p.token = ""
	}
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	// A process group of its own: a Ctrl-C in dev's terminal goes to dev's
	// group only, and dev stops its workers in order (after an ephemeral
	// run's instances) rather than each dying of the same SIGINT.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", p.name, err)
	}
	p.mu.Lock()
	p.cmd = cmd
	p.mu.Unlock()
	return nil
}

// supervise waits for the worker (its own process, or the one it kept);
// one that dies while dev runs is started again after the reboot delay,
// but never once running has ended (dev is stopping). When ctx ends the
// worker is stopped (SIGTERM, then SIGKILL after 10 s): its instances keep
// running, as they do when a worker stops. running ends before ctx (dev
// stops its ephemeral run's instances in between).
func (p *workerProc) supervise(ctx, running context.Context) {
	for {
		p.mu.Lock()
		cmd, adopted, adoptedPID := p.cmd, p.adopted, p.adoptedPID
		p.mu.Unlock()
		if adopted {
			if !keepAdopted(ctx, p.dir, adoptedPID, p.name, p.log) {
				return
			}
			p.log.Warn("dev: the worker kept from an earlier run exited; it is started again like a rebooted node", "worker", p.name, "pid", adoptedPID, "in", p.reboot)
		} else {
			stopped, err := waitOrStop(ctx, cmd)
			if stopped {
				return
			}
			p.log.Warn("dev: a worker process exited; it is started again like a rebooted node", "worker", p.name, "err", err, "in", p.reboot)
		}
		select {
		case <-ctx.Done():
			return
		case <-running.Done():
			p.log.Info("dev: stopping; the worker is not started again", "worker", p.name)
			return
		case <-time.After(p.reboot):
		}
		if err := p.begin(); err != nil {
			p.log.Error("dev: cannot start the worker again", "worker", p.name, "err", err)
			return
		}
		p.log.Info("dev: worker started again", "worker", p.name, "pid", p.pid())
	}
}

// lockPoll is how often dev looks whether a worker it kept still holds its
// data directory.
const lockPoll = 250 * time.Millisecond

// keepAdopted supervises a worker an earlier dev left running over dir (it
// is not dev's child, so its data directory's lock tells when it is gone):
// it returns true once the worker has exited, and false when ctx ends
// first — then the worker is stopped like dev's own (SIGTERM, then SIGKILL
// after 10 s), unless its pid is not known (or is this process's).
func keepAdopted(ctx context.Context, dir string, pid int, name string, log *slog.Logger) bool {
	held := func() bool {
		_, h, err := worker.LockHolder(dir)
		if err != nil {
			log.Warn("dev: cannot look at a kept worker's data directory lock", "worker", name, "err", err)
			return true
		}
		return h
	}
	t := time.NewTicker(lockPoll)
	defer t.Stop()
	for ctx.Err() == nil {
		select {
		case <-t.C:
			if !held() {
				return true
			}
		case <-ctx.Done():
		}
	}
	if pid <= 0 || pid == os.Getpid() {
		log.Warn("dev: leaving a worker kept from an earlier run running: its pid is not known", "worker", name, "dir", dir)
		return false
	}
	proc, err := os.FindProcess(pid)
	if err != nil {
		return false
	}
	_ = proc.Signal(syscall.SIGTERM)
	deadline := time.Now().Add(10 * time.Second)
	for held() {
		if time.Now().After(deadline) {
			_ = proc.Signal(syscall.SIGKILL)
			deadline = time.Now().Add(5 * time.Second)
			for held() && time.Now().Before(deadline) {
				time.Sleep(lockPoll)
			}
			break
		}
		time.Sleep(lockPoll)
	}
	return false
}

// waitOrStop waits for cmd to exit (its error) or for ctx to end; then it
// stops cmd — SIGTERM, SIGKILL after ten seconds — and reports stopped.
func waitOrStop(ctx context.Context, cmd *exec.Cmd) (stopped bool, err error) {
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		return false, err
	case <-ctx.Done():
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
	}
	return true, nil
}
