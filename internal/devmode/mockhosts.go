package devmode

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/norsk-go/norsk-manager/internal/buildinfo"
	"github.com/norsk-go/norsk-manager/internal/providers/mock/mockhost"
	"github.com/norsk-go/norsk-manager/internal/worker"
)

// MockHostReboot is how long after a mock host process dies dev starts a
// fresh one on the same address (a machine replaced by an empty one).
const MockHostReboot = 3 * time.Second

// mockHosts are dev's mock hosts: in this process, or — with WorkerExec —
// each a process of its own (the hidden dev-mock-host command), so that
// killing one (kill -9 <pid>) loses its node as a vanished machine would.
type mockHosts struct {
	inproc []*mockhost.Host
	procs  []*hostProc
	wg     sync.WaitGroup
}

// startMockHosts starts n mock hosts, their state under dir/mock-hosts;
// process ones are supervised until ctx ends.
func startMockHosts(ctx context.Context, dir string, n int, rt string, o Options, log *slog.Logger) (*mockHosts, error) {
	m := &mockHosts{}
	for i := range n {
		name := fmt.Sprintf("mock-host-%d", i+1)
		hdir := filepath.Join(dir, "mock-hosts", name)
		if o.WorkerExec == "" {
			h, err := mockhost.Start(mockhost.Config{
				DataDir: hdir,
				Logger:  o.Logger.With("host", name),
				Worker:  worker.Config{Runtime: rt, Version: buildinfo.Version},
			})
			if err != nil {
				return m, fmt.Errorf("mock host %s: %w", name, err)
			}
			m.inproc = append(m.inproc, h)
			continue
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return m, fmt.Errorf("mock host %s: %w", name, err)
		}
		p := &hostProc{exec: o.WorkerExec, args: o.WorkerArgs, name: name, dir: hdir, runtime: rt, ln: ln.(*net.TCPListener), log: log}
		if err := p.start(); err != nil {
			_ = ln.Close()
			return m, err
		}
		m.procs = append(m.procs, p)
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			p.supervise(ctx)
		}()
	}
	return m, nil
}

func (m *mockHosts) len() int { return len(m.inproc) + len(m.procs) }

// urls are the hosts' URLs, as the mock provider's hosts list names them.
func (m *mockHosts) urls() []string {
	var out []string
	for _, h := range m.inproc {
		out = append(out, h.URL())
	}
	for _, p := range m.procs {
		out = append(out, p.url())
	}
	return out
}

// close stops the in-process hosts and waits for the process ones, which
// stop when the ctx startMockHosts was given ends. Their workers' instances
// keep running, as a worker's do when it stops.
func (m *mockHosts) close() {
	for _, h := range m.inproc {
		_ = h.Close()
	}
	m.wg.Wait()
}

// banner says which process each host is, when they are processes.
func (m *mockHosts) banner() string {
	if len(m.procs) == 0 {
		return ""
	}
	var s []string
	for _, p := range m.procs {
		s = append(s, fmt.Sprintf("%s pid %d at %s", p.name, p.pid(), p.url()))
	}
	return fmt.Sprintf(`Each mock host is a process of its own (%s).
Lose a node as a vanished machine would — kill -9 the pid of the host that
'norsk-ctl node get <node>' names (Provider: mock (<url>)) — and watch its
jobs come back elsewhere; a fresh, empty host takes the address %s later.
`, strings.Join(s, ", "), MockHostReboot)
}

// hostProc is one mock host run as a process. Dev holds its listener for
// the whole run and hands each incarnation a copy, so the address the
// Manager's mock provider knows stays the host's across restarts.
type hostProc struct {
	exec, name, dir, runtime string
	args                     []string
	ln                       *net.TCPListener
	log                      *slog.Logger

	mu  sync.Mutex
	cmd *exec.Cmd
}

func (p *hostProc) url() string { return "http://" + p.ln.Addr().String() }

func (p *hostProc) pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// start starts an incarnation of the host on the held listener (fd 3).
func (p *hostProc) start() error {
	f, err := p.ln.File()
	if err != nil {
		return fmt.Errorf("mock host %s: %w", p.name, err)
	}
	defer f.Close()
	cmd := exec.Command(p.exec, append([]string{"dev-mock-host", "--listen-fd", "3", "--data-dir", p.dir, "--runtime", p.runtime, "--name", p.name}, p.args...)...)
	cmd.ExtraFiles = []*os.File{f}
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	// Its own process group, as dev's workers: dev stops it in order.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start mock host %s: %w", p.name, err)
	}
	p.mu.Lock()
	p.cmd = cmd
	p.mu.Unlock()
	return nil
}

// supervise waits for the host; one that dies while dev runs is replaced
// by a fresh one after MockHostReboot (it starts empty: it removes what
// the dead one ran). When ctx ends the host is stopped (SIGTERM, then
// SIGKILL after 10 s) and its listener closed.
func (p *hostProc) supervise(ctx context.Context) {
	defer p.ln.Close()
	for {
		p.mu.Lock()
		cmd := p.cmd
		p.mu.Unlock()
		stopped, err := waitOrStop(ctx, cmd)
		if stopped {
			return
		}
		p.log.Warn("dev: a mock host died, and its node with it; a fresh, empty host takes its address", "host", p.name, "err", err, "in", MockHostReboot)
		select {
		case <-ctx.Done():
			return
		case <-time.After(MockHostReboot):
		}
		if err := p.start(); err != nil {
			p.log.Error("dev: cannot start the mock host again", "host", p.name, "err", err)
			return
		}
		p.log.Info("dev: mock host started again", "host", p.name, "pid", p.pid())
	}
}
