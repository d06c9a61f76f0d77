// Package cloudsim is test equipment: local endpoints that speak the
// clouds' own wire protocols (ec2: the EC2 Query API; oci: the OCI REST
// API with request signatures), so that the aws and oci providers are
// driven through their official SDKs exactly as against the clouds, in
// tests, in CI and in `norsk-manager dev --clouds local`. Nothing in the
// Manager's code path knows them: the SDKs are pointed at them by their
// own endpoint settings.
//
// Their instances are real machines of a sort: each boots the worker from
// its user data (providers.UserData), through a Runner — in this process
// (InProcess, for tests), as a host process (Process: `norsk-manager
// cloud-instance`), or as a Docker container of an image built FROM
// scratch from the static norsk-ctl binary (Docker). Terminating an
// instance stops its worker and removes what the worker ran, as ending a
// machine would.
package cloudsim

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/norsk-go/norsk-manager/internal/providers"
	"github.com/norsk-go/norsk-manager/internal/runtime"
	"github.com/norsk-go/norsk-manager/internal/runtime/docker"
	"github.com/norsk-go/norsk-manager/internal/runtime/process"
	"github.com/norsk-go/norsk-manager/internal/worker"
)

// Runner boots the machines of simulated instances.
type Runner interface {
	// Boot starts instance id's machine, whose worker boots from userData.
	Boot(id string, userData []byte) (Machine, error)
}

// Machine is a running instance's machine.
type Machine interface {
	// Stop ends the machine: its worker, and every job instance the worker
	// ran (an instance termination). It is idempotent.
	Stop(ctx context.Context) error
}

// nodeOf is the node id a machine's user data names (its worker's node).
func nodeOf(userData []byte) (providers.UserData, error) {
	ud, err := providers.DecodeUserData(userData)
	if err != nil {
		return ud, fmt.Errorf("cloudsim: the instance's user data boots no worker: %w", err)
	}
	return ud, nil
}

// InProcess runs each instance's worker as an agent in this process, with
// the process runtime (tests): fast, and nothing to build.
type InProcess struct {
	// Dir holds each machine's disk (Dir/<instance id>).
	Dir string
	// Worker is the template of the workers' configuration (ManagerURL,
	// Token, TLSCAHash, DataDir and Listen come from the instance).
	Worker worker.Config
	Logger *slog.Logger
}

// Boot starts the worker agent.
func (r *InProcess) Boot(id string, userData []byte) (Machine, error) {
	ud, err := nodeOf(userData)
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(r.Dir, id)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	log := r.Logger
	if log == nil {
		log = slog.Default()
	}
	wc := r.Worker
	wc.ManagerURL, wc.Token, wc.TLSCAHash, wc.DataDir = strings.Join(ud.ManagerURLs, ","), ud.Token, ud.CAHash, filepath.Join(dir, "worker")
	if wc.Listen == "" {
		wc.Listen = "127.0.0.1:0"
	}
	if wc.Runtime == "" {
		wc.Runtime = "process"
	}
	wc.Logger = log.With("instance", id, "node", ud.NodeID)
	a, err := worker.New(wc)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &agentMachine{nodeID: ud.NodeID, dir: wc.DataDir, runtimeKind: wc.Runtime, rt: wc.RuntimeImpl, commandDir: wc.CommandDir,
		cancel: cancel, done: make(chan struct{}), log: wc.Logger}
	go func() {
		defer close(m.done)
		err := a.Run(ctx)
		if ctx.Err() == nil {
			wc.Logger.Info("cloudsim: the instance's worker ended", "err", err)
		}
	}()
	return m, nil
}

type agentMachine struct {
	nodeID, dir, runtimeKind, commandDir string
	rt                                   runtime.Runtime
	cancel                               context.CancelFunc
	done                                 chan struct{}
	log                                  *slog.Logger
	once                                 sync.Once
}

func (m *agentMachine) Stop(ctx context.Context) error {
	m.once.Do(func() {
		m.cancel()
		select {
		case <-m.done:
		case <-ctx.Done():
		}
		removeInstances(ctx, m.nodeID, m.dir, m.runtimeKind, m.rt, m.commandDir, m.log)
	})
	return nil
}

// Process runs each instance's worker as a host process: Exec with Args
// (`norsk-manager cloud-instance`), the user-data file, the machine's
// directory and the runtime appended.
type Process struct {
	Exec string
	Args []string
	// Dir holds each machine's disk.
	Dir string
	// Runtime is the workers' runtime ("process" or "docker").
	Runtime string
	Logger  *slog.Logger
}

// Boot starts the worker's process.
func (r *Process) Boot(id string, userData []byte) (Machine, error) {
	ud, err := nodeOf(userData)
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(r.Dir, id)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	udFile := filepath.Join(dir, "user-data.txt")
	if err := os.WriteFile(udFile, userData, 0o600); err != nil {
		return nil, err
	}
	rt := r.Runtime
	if rt == "" {
		rt = "process"
	}
	args := append(append([]string(nil), r.Args...), "--user-data", udFile, "--data-dir", filepath.Join(dir, "worker"), "--runtime", rt)
	cmd := exec.Command(r.Exec, args...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("cloudsim: start instance %s: %w", id, err)
	}
	log := r.Logger
	if log == nil {
		log = slog.Default()
	}
	m := &procMachine{cmd: cmd, nodeID: ud.NodeID, dir: filepath.Join(dir, "worker"), runtimeKind: rt, done: make(chan struct{}), log: log.With("instance", id)}
	go func() {
		_ = cmd.Wait()
		close(m.done)
	}()
	return m, nil
}

type procMachine struct {
	cmd                      *exec.Cmd
	nodeID, dir, runtimeKind string
	done                     chan struct{}
	log                      *slog.Logger
	once                     sync.Once
}

func (m *procMachine) Stop(ctx context.Context) error {
	m.once.Do(func() {
		_ = m.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-m.done:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(-m.cmd.Process.Pid, syscall.SIGKILL)
			<-m.done
		case <-ctx.Done():
			_ = syscall.Kill(-m.cmd.Process.Pid, syscall.SIGKILL)
		}
		removeInstances(ctx, m.nodeID, m.dir, m.runtimeKind, nil, "", m.log)
	})
	return nil
}

// removeInstances removes every job instance a node's worker ran, through
// the runtime it ran them with: a terminated machine leaves nothing.
func removeInstances(ctx context.Context, nodeID, dir, kind string, rt runtime.Runtime, commandDir string, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	if rt == nil {
		var err error
		switch kind {
		case "docker":
			var d *docker.Runtime
			d, err = docker.New(ctx, docker.Config{NodeID: nodeID, Logger: log})
			if err == nil {
				defer d.Close()
				rt = d
			}
		default:
			pdir := filepath.Join(dir, "process")
			if _, statErr := os.Stat(pdir); statErr != nil {
				return // the worker never ran anything
			}
			var p *process.Runtime
			p, err = process.New(process.Config{NodeID: nodeID, Dir: pdir, Logger: log, CommandDir: commandDir})
			if err == nil {
				defer p.Close()
				rt = p
			}
		}
		if err != nil {
			log.Warn("cloudsim: cannot open the machine's runtime; its job instances may still run", "err", err)
			return
		}
	}
	list, err := rt.List(ctx)
	if err != nil {
		log.Warn("cloudsim: cannot list the machine's job instances", "err", err)
		return
	}
	seen := map[runtime.Key]bool{}
	for _, s := range list {
		if seen[s.Key] {
			continue
		}
		seen[s.Key] = true
		if err := rt.Remove(ctx, s.Key); err != nil && !errors.Is(err, context.Canceled) {
			log.Warn("cloudsim: remove a job instance", "instance", s.Key.String(), "err", err)
		}
	}
}
