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
)

// workerProc is a dev worker running as a process of its own (the hidden
// `norsk-manager dev-worker` command), so that an operator can lose a node
// by killing it.
type workerProc struct {
	exec, name, dir, url, runtime string
	// token is the first registration's; the worker keeps its identity in
	// dir afterwards.
	token  string
	reboot time.Duration
	log    *slog.Logger

	mu  sync.Mutex
	cmd *exec.Cmd
}

func (p *workerProc) pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// start starts the worker's process.
func (p *workerProc) start() error {
	cmd := exec.Command(p.exec, "dev-worker", "--manager-url", p.url, "--data-dir", p.dir, "--runtime", p.runtime, "--name", p.name)
	cmd.Env = os.Environ()
	if p.token != "" {
		cmd.Env = append(cmd.Env, "NORSK_WORKER_TOKEN="+p.token)
		p.token = ""
	}
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", p.name, err)
	}
	p.mu.Lock()
	p.cmd = cmd
	p.mu.Unlock()
	return nil
}

// supervise waits for the worker; one that dies while dev runs is started
// again after the reboot delay. When ctx ends the worker is stopped
// (SIGTERM, then SIGKILL after 10 s): its instances keep running, as they
// do when a worker stops.
func (p *workerProc) supervise(ctx context.Context) {
	for {
		p.mu.Lock()
		cmd := p.cmd
		p.mu.Unlock()
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		select {
		case <-ctx.Done():
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-exited:
			case <-time.After(10 * time.Second):
				_ = cmd.Process.Kill()
				<-exited
			}
			return
		case err := <-exited:
			p.log.Warn("dev: a worker process exited; it is started again like a rebooted node", "worker", p.name, "err", err, "in", p.reboot)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(p.reboot):
		}
		if err := p.start(); err != nil {
			p.log.Error("dev: cannot start the worker again", "worker", p.name, "err", err)
			return
		}
		p.log.Info("dev: worker started again", "worker", p.name, "pid", p.pid())
	}
}
