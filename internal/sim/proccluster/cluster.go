package proccluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/norsk-go/norsk-manager/internal/auth"
	"github.com/norsk-go/norsk-manager/internal/sim"
)

// Options configure a cluster.
type Options struct {
	// Dir holds the members' data directories and logs (required).
	Dir string
	// Members is how many members (default 3).
	Members int
	// Exe is the executable whose "member" subcommand runs MemberMain
	// (default: this process's own).
	Exe string
	// HeartbeatInterval and LostGrace configure the members (0: the
	// Manager's defaults).
	HeartbeatInterval, LostGrace time.Duration
	// RaftTimeout sets the members' raft heartbeat and election timeouts
	// (0: the Manager's defaults, 500 ms).
	RaftTimeout time.Duration
	// LogLevel is the members' log level (default warn); their logs go to
	// <Dir>/<name>.log.
	LogLevel string
}

// Cluster is a running cluster of member processes.
type Cluster struct {
	token   string
	members []*member
	hc      *http.Client
}

type member struct {
	name             string
	dir              string
	api, raft, stats string
	args             []string
	exe              string
	log              *os.File

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
	// revived: the goroutine that starts a killed member again has ended.
	revived chan struct{}
}

var _ sim.Cluster = (*Cluster)(nil)

// Start starts the member processes and returns once a primary is ready.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	if opts.Members <= 0 {
		opts.Members = 3
	}
	if opts.Exe == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("proccluster: %w", err)
		}
		opts.Exe = exe
	}
	if opts.LogLevel == "" {
		opts.LogLevel = "warn"
	}
	var sb [16]byte
	_, _ = rand.Read(sb[:])
	c := &Cluster{token: auth.NewToken(), hc: &http.Client{Timeout: 2 * time.Minute}}
	var peers []string
	for i := range opts.Members {
		m := &member{name: fmt.Sprintf("m%d", i+1), exe: opts.Exe}
		m.dir = filepath.Join(opts.Dir, m.name)
		var err error
		if m.api, err = freeAddr(); err != nil {
			return nil, err
		}
		if m.raft, err = freeAddr(); err != nil {
			return nil, err
		}
		if m.stats, err = freeAddr(); err != nil {
			return nil, err
		}
		peers = append(peers, m.name+"="+m.raft+"="+m.api)
		c.members = append(c.members, m)
	}
	for _, m := range c.members {
		if err := os.MkdirAll(m.dir, 0o700); err != nil {
			return nil, fmt.Errorf("proccluster: %w", err)
		}
		f, err := os.OpenFile(filepath.Join(opts.Dir, m.name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			return nil, fmt.Errorf("proccluster: %w", err)
		}
		m.log = f
		m.args = []string{"member", "-name", m.name, "-dir", m.dir, "-api", m.api, "-raft", m.raft, "-stats", m.stats,
			"-peers", strings.Join(peers, ","), "-token", c.token, "-secret", hex.EncodeToString(sb[:]),
			"-heartbeat", opts.HeartbeatInterval.String(), "-lost-grace", opts.LostGrace.String(), "-log-level", opts.LogLevel,
			"-raft-timeout", opts.RaftTimeout.String()}
		if err := m.start(); err != nil {
			_ = c.Close()
			return nil, err
		}
	}
	return c, nil
}

// freeAddr is a loopback address whose port is free now, drawn below the
// kernel's ephemeral range so that the Manager's own outgoing connections
// (thousands, to the simulated nodes) do not take it first.
func freeAddr() (string, error) {
	var last error
	for range 200 {
		a := fmt.Sprintf("127.0.0.1:%d", 20000+mrand.IntN(12000))
		ln, err := net.Listen("tcp", a)
		if err == nil {
			_ = ln.Close()
			return a, nil
		}
		last = err
	}
	return "", fmt.Errorf("proccluster: no free port: %w", last)
}

func (m *member) start() error {
	cmd := exec.Command(m.exe, m.args...)
	cmd.Stdout, cmd.Stderr = m.log, m.log
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("proccluster: start member %s: %w", m.name, err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	m.mu.Lock()
	m.cmd, m.exited = cmd, exited
	m.mu.Unlock()
	return nil
}

// Members are the members' names and API URLs.
func (c *Cluster) Members() []sim.Member {
	out := make([]sim.Member, 0, len(c.members))
	for _, m := range c.members {
		out = append(out, sim.Member{Name: m.name, URL: "http://" + m.api})
	}
	return out
}

// Token is the cluster's admin token.
func (c *Cluster) Token() string { return c.token }

func (c *Cluster) member(name string) (*member, error) {
	for _, m := range c.members {
		if m.name == name {
			return m, nil
		}
	}
	return nil, fmt.Errorf("proccluster: no member %q", name)
}

// Stats asks a member process for its heap (after a forced collection) and
// CPU time.
func (c *Cluster) Stats(ctx context.Context, name string) (sim.ProcessStats, error) {
	m, err := c.member(name)
	if err != nil {
		return sim.ProcessStats{}, err
	}
	var r statsReply
	if err := c.get(ctx, "http://"+m.stats+"/stats", func(b io.Reader) error { return json.NewDecoder(b).Decode(&r) }); err != nil {
		return sim.ProcessStats{}, fmt.Errorf("proccluster: stats of %s: %w", name, err)
	}
	return sim.ProcessStats{HeapBytes: r.HeapBytes, CPU: time.Duration(r.CPUNanos), Goroutines: r.Goroutines}, nil
}

// CPUProfile writes a member's CPU profile over d to w.
func (c *Cluster) CPUProfile(ctx context.Context, name string, d time.Duration, w io.Writer) error {
	m, err := c.member(name)
	if err != nil {
		return err
	}
	url := fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", m.stats, max(1, int(d.Seconds())))
	// The member answers once the profile is over: the call's time limit
	// is the profile's length and a minute more, not the client's.
	hc := *c.hc
	hc.Timeout = d + time.Minute
	return get(ctx, &hc, url, func(b io.Reader) error { _, err := io.Copy(w, b); return err })
}

func (c *Cluster) get(ctx context.Context, url string, read func(io.Reader) error) error {
	return get(ctx, c.hc, url, read)
}

// get reads url's body with read, through hc.
func get(ctx context.Context, hc *http.Client, url string, read func(io.Reader) error) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return read(resp.Body)
}

// Kill sends the member SIGKILL and waits for it to exit; once revive is
// closed it starts it again on its data directory.
func (c *Cluster) Kill(ctx context.Context, name string, revive <-chan struct{}) error {
	m, err := c.member(name)
	if err != nil {
		return err
	}
	m.mu.Lock()
	cmd, exited := m.cmd, m.exited
	m.mu.Unlock()
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		return fmt.Errorf("proccluster: kill %s: %w", name, err)
	}
	select {
	case <-exited:
	case <-ctx.Done():
		return ctx.Err()
	}
	done := make(chan struct{})
	m.mu.Lock()
	m.revived = done
	m.mu.Unlock()
	go func() {
		defer close(done)
		select {
		case <-revive:
		case <-ctx.Done():
			return
		}
		if err := m.start(); err != nil {
			fmt.Fprintf(m.log, "proccluster: restart: %v\n", err)
		}
	}()
	return nil
}

// Close stops every member (SIGTERM, then SIGKILL after 30 s).
func (c *Cluster) Close() error {
	var errs []error
	for _, m := range c.members {
		m.mu.Lock()
		revived := m.revived
		m.mu.Unlock()
		if revived != nil {
			<-revived
		}
		m.mu.Lock()
		cmd, exited := m.cmd, m.exited
		m.mu.Unlock()
		if cmd == nil {
			continue
		}
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
			errs = append(errs, fmt.Errorf("proccluster: member %s did not stop in 30 s", m.name))
		}
		if m.log != nil {
			_ = m.log.Close()
		}
	}
	return errors.Join(errs...)
}
