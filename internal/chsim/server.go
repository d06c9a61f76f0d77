package chsim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/norsk-go/norsk-manager/internal/chapi"
	"github.com/norsk-go/norsk-manager/internal/cloudsim"
)

// Version is what vmm.ping answers as the VMM's version.
const Version = "v48.0-norsk-chsim"

// Options configure a VMM.
type Options struct {
	// APISocket is the Unix socket the API is served on (created; a stale
	// socket file is replaced).
	APISocket string
	// Runner boots the VM's worker.
	Runner cloudsim.Runner
	// ID names the VM to the runner ("" = the socket's directory's name).
	ID     string
	Logger *slog.Logger
}

// VMM is one local VMM holding at most one VM, as one cloud-hypervisor
// process does. Its methods are safe for concurrent use.
type VMM struct {
	opts Options
	log  *slog.Logger
	api  *chapi.Server

	mu      sync.Mutex
	cfg     *chapi.VmConfig
	state   chapi.VmState
	machine cloudsim.Machine
	closed  bool
}

// Start serves the API on opts.APISocket until Close or a PUT
// /vmm.shutdown.
func Start(opts Options) (*VMM, error) {
	if opts.Runner == nil {
		return nil, errors.New("chsim: no runner")
	}
	if opts.ID == "" {
		opts.ID = filepath.Base(filepath.Dir(opts.APISocket))
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	v := &VMM{opts: opts, log: opts.Logger.With("component", "chsim", "vm", opts.ID)}
	var err error
	if v.api, err = chapi.Listen(opts.APISocket, api{v}, v.log); err != nil {
		return nil, fmt.Errorf("chsim: %w", err)
	}
	return v, nil
}

// Done is closed once the VMM has shut down.
func (v *VMM) Done() <-chan struct{} { return v.api.Done() }

// Close shuts the VM down (its worker stops) and ends the API server; the
// socket file is removed.
func (v *VMM) Close() error {
	v.mu.Lock()
	if v.closed {
		v.mu.Unlock()
		<-v.api.Done()
		return nil
	}
	v.closed = true
	m := v.machine
	v.machine = nil
	v.mu.Unlock()
	if m != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		_ = m.Stop(ctx)
		cancel()
	}
	return v.api.Shutdown()
}

// api is v's side of chapi.Handler.
type api struct{ v *VMM }

func (a api) Ping() chapi.VmmPingResponse {
	return chapi.VmmPingResponse{BuildVersion: Version, Version: Version, PID: int64(os.Getpid())}
}
func (a api) ShutdownVMM()                                      { _ = a.v.Close() }
func (a api) Create(w http.ResponseWriter, r *http.Request)     { a.v.create(w, r) }
func (a api) Boot(w http.ResponseWriter, _ *http.Request)       { a.v.boot(w) }
func (a api) Info(w http.ResponseWriter, _ *http.Request)       { a.v.info(w) }
func (a api) ShutdownVM(w http.ResponseWriter, _ *http.Request) { a.v.shutdown(w) }
func (a api) Delete(w http.ResponseWriter, _ *http.Request)     { a.v.delete(w) }

func (v *VMM) create(w http.ResponseWriter, r *http.Request) {
	cfg, ok := chapi.ReadVmConfig(w, r)
	if !ok {
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.cfg != nil {
		chapi.WriteCreateRefused(w, nil)
		return
	}
	if err := cfg.Validate(); err != nil {
		chapi.WriteCreateRefused(w, err)
		return
	}
	if cfg.Cpus == nil {
		cfg.Cpus = &chapi.CpusConfig{BootVcpus: 1, MaxVcpus: 1}
	}
	if cfg.Memory == nil {
		cfg.Memory = &chapi.MemoryConfig{Size: 512 << 20}
	}
	v.cfg, v.state = &cfg, chapi.VmCreated
	v.log.Info("chsim: VM created", "vcpus", cfg.Cpus.BootVcpus, "memory", cfg.Memory.Size, "disks", len(cfg.Disks))
	chapi.Write(w, http.StatusNoContent, nil)
}

func (v *VMM) boot(w http.ResponseWriter) {
	v.mu.Lock()
	defer v.mu.Unlock()
	switch {
	case v.cfg == nil:
		chapi.WriteError(w, http.StatusNotFound, "Error from API", "The VM could not boot", "The VM is not created")
		return
	case v.state == chapi.VmRunning:
		chapi.WriteError(w, http.StatusInternalServerError, "Error from API", "The VM could not boot", "The VM is already running")
		return
	}
	// The guest's first boot: the root disk must be readable, and the
	// worker boots from the first-boot disk (the second).
	if len(v.cfg.Disks) < 2 {
		chapi.WriteError(w, http.StatusInternalServerError, "Error from API", "The VM could not boot", "The guest found no first-boot disk (the VM's second disk)")
		return
	}
	if _, err := os.Stat(v.cfg.Disks[0].Path); err != nil {
		chapi.WriteError(w, http.StatusInternalServerError, "Error from API", "The VM could not boot", err.Error())
		return
	}
	raw, err := os.ReadFile(v.cfg.Disks[1].Path)
	if err != nil {
		chapi.WriteError(w, http.StatusInternalServerError, "Error from API", "The VM could not boot", err.Error())
		return
	}
	m, err := v.opts.Runner.Boot(v.opts.ID, chapi.FirstBootData(raw))
	if err != nil {
		chapi.WriteError(w, http.StatusInternalServerError, "Error from API", "The VM could not boot", err.Error())
		return
	}
	v.machine, v.state = m, chapi.VmRunning
	v.log.Info("chsim: VM booted")
	chapi.Write(w, http.StatusNoContent, nil)
}

func (v *VMM) info(w http.ResponseWriter) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.cfg == nil {
		chapi.WriteError(w, http.StatusNotFound, "Error from API", "The VM information could not be retrieved", "The VM is not created")
		return
	}
	b, _ := json.Marshal(chapi.VmInfo{Config: *v.cfg, State: v.state, MemoryActualSize: v.cfg.Memory.Size})
	chapi.Write(w, http.StatusOK, b)
}

// stopMachine ends the guest (v.mu held).
func (v *VMM) stopMachine() {
	if v.machine == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := v.machine.Stop(ctx); err != nil {
		v.log.Warn("chsim: stop the guest", "err", err)
	}
	v.machine = nil
}

func (v *VMM) shutdown(w http.ResponseWriter) {
	v.mu.Lock()
	defer v.mu.Unlock()
	switch {
	case v.cfg == nil:
		chapi.WriteError(w, http.StatusNotFound, "Error from API", "The VM could not shut down", "The VM is not created")
		return
	case v.state != chapi.VmRunning && v.state != chapi.VmPaused:
		chapi.WriteError(w, http.StatusInternalServerError, "Error from API", "The VM could not shut down", "The VM is not booted")
		return
	}
	v.stopMachine()
	v.state = chapi.VmShutdown
	v.log.Info("chsim: VM shut down")
	chapi.Write(w, http.StatusNoContent, nil)
}

func (v *VMM) delete(w http.ResponseWriter) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.stopMachine()
	v.cfg, v.state = nil, ""
	chapi.Write(w, http.StatusNoContent, nil)
}

// Run serves until ctx ends (the VM is shut down then) or a PUT
// /vmm.shutdown: the program form's main loop.
func Run(ctx context.Context, opts Options) error {
	v, err := Start(opts)
	if err != nil {
		return err
	}
	select {
	case <-ctx.Done():
		return v.Close()
	case <-v.Done():
		return v.Close()
	}
}

// Launcher starts local VMMs in this process (tests, dev without a VMM
// binary): it has the host agent's Launcher method. Each VMM lives until
// its vmm.shutdown or Close, independent of the agent that launched it, as
// a VMM process outlives its agent.
type Launcher struct {
	Runner cloudsim.Runner
	Logger *slog.Logger

	mu   sync.Mutex
	vmms map[string]*VMM
}

// Launch starts a VMM serving on apiSocket.
func (l *Launcher) Launch(_ context.Context, vmID, apiSocket string) error {
	v, err := Start(Options{APISocket: apiSocket, Runner: l.Runner, ID: vmID, Logger: l.Logger})
	if err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.vmms == nil {
		l.vmms = map[string]*VMM{}
	}
	l.vmms[apiSocket] = v
	return nil
}

// Running counts the VMMs still serving.
func (l *Launcher) Running() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, v := range l.vmms {
		select {
		case <-v.Done():
		default:
			n++
		}
	}
	return n
}

// Close ends every VMM (their VMs' workers stop).
func (l *Launcher) Close() {
	l.mu.Lock()
	vs := l.vmms
	l.vmms = nil
	l.mu.Unlock()
	for _, v := range vs {
		_ = v.Close()
	}
}
