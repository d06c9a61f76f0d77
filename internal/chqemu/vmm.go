package chqemu

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/norsk-go/norsk-manager/internal/chapi"
)

// Version is what vmm.ping answers as the VMM's version (its build
// version is QEMU's own, from `qemu-system-x86_64 --version`).
const Version = "v48.0-norsk-qemu-microvm"

// GuestWorkerPort is the guest's port the user-mode network forwards a
// host loopback port to: where the guest's worker serves its
// NodeController stream (providers.UserData's default listen port).
const GuestWorkerPort = 6791

// HostFwdParam is the kernel command line parameter naming the host
// address forwarded to GuestWorkerPort (user-mode network only).
const HostFwdParam = "norsk.hostfwd"

// QEMU's accelerators.
const (
	AccelKVM = "kvm"
	AccelTCG = "tcg"
)

// Options configure a VMM.
type Options struct {
	// APISocket is the Unix socket the API is served on (a stale socket
	// file is replaced). QEMU's QMP socket and log go beside it.
	APISocket string
	// QEMU is the emulator binary (default qemu-system-x86_64 on PATH).
	QEMU string
	// Accel is QEMU's accelerator: AccelKVM (the default) or AccelTCG
	// (emulation, several times slower: for a machine whose /dev/kvm
	// cannot run the guest's kernel, see Usable).
	Accel  string
	Logger *slog.Logger
}

// VMM is one VMM holding at most one VM, as one cloud-hypervisor process
// does; the VM, once booted, is one QEMU process. Its methods are safe for
// concurrent use.
type VMM struct {
	opts  Options
	log   *slog.Logger
	api   *chapi.Server
	build string

	mu     sync.Mutex
	cfg    *chapi.VmConfig
	state  chapi.VmState
	qemu   *exec.Cmd
	exited chan struct{} // closed when the QEMU process has exited
	closed bool
}

// Start serves the API on opts.APISocket until Close or a PUT
// /vmm.shutdown.
func Start(opts Options) (*VMM, error) {
	if opts.QEMU == "" {
		opts.QEMU = "qemu-system-x86_64"
	}
	switch opts.Accel {
	case "":
		opts.Accel = AccelKVM
	case AccelKVM, AccelTCG:
	default:
		return nil, fmt.Errorf("chqemu: accelerator %q: want %s or %s", opts.Accel, AccelKVM, AccelTCG)
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	qemu, err := exec.LookPath(opts.QEMU)
	if err != nil {
		return nil, fmt.Errorf("chqemu: the emulator: %w", err)
	}
	opts.QEMU = qemu
	build := "qemu"
	if out, err := exec.Command(qemu, "--version").Output(); err == nil {
		build, _, _ = strings.Cut(strings.TrimSpace(string(out)), "\n")
	}
	v := &VMM{opts: opts, log: opts.Logger.With("component", "chqemu", "socket", opts.APISocket), build: build}
	if v.api, err = chapi.Listen(opts.APISocket, api{v}, v.log); err != nil {
		return nil, fmt.Errorf("chqemu: %w", err)
	}
	return v, nil
}

// Done is closed once the API server has ended.
func (v *VMM) Done() <-chan struct{} { return v.api.Done() }

// Close ends the VM's QEMU process and the API server; the socket file is
// removed.
func (v *VMM) Close() error {
	v.mu.Lock()
	if v.closed {
		v.mu.Unlock()
		<-v.api.Done()
		return nil
	}
	v.closed = true
	v.stopQEMU()
	v.mu.Unlock()
	return v.api.Shutdown()
}

// Run serves until ctx ends or a PUT /vmm.shutdown: the program form's
// main loop. The VM's QEMU process ends with it.
func Run(ctx context.Context, opts Options) error {
	v, err := Start(opts)
	if err != nil {
		return err
	}
	select {
	case <-ctx.Done():
	case <-v.Done():
	}
	return v.Close()
}

func (v *VMM) qmpSocket() string { return filepath.Join(filepath.Dir(v.opts.APISocket), "qmp.sock") }
func (v *VMM) qemuLog() string   { return filepath.Join(filepath.Dir(v.opts.APISocket), "qemu.log") }

// api is v's side of chapi.Handler.
type api struct{ v *VMM }

func (a api) Ping() chapi.VmmPingResponse {
	return chapi.VmmPingResponse{BuildVersion: a.v.build, Version: Version, PID: int64(os.Getpid())}
}
func (a api) ShutdownVMM()                                      { _ = a.v.Close() }
func (a api) Create(w http.ResponseWriter, r *http.Request)     { a.v.create(w, r) }
func (a api) Boot(w http.ResponseWriter, r *http.Request)       { a.v.boot(r.Context(), w) }
func (a api) Info(w http.ResponseWriter, r *http.Request)       { a.v.info(r.Context(), w) }
func (a api) ShutdownVM(w http.ResponseWriter, _ *http.Request) { a.v.shutdown(w) }
func (a api) Delete(w http.ResponseWriter, _ *http.Request) {
	a.v.mu.Lock()
	a.v.stopQEMU()
	a.v.cfg, a.v.state = nil, ""
	a.v.mu.Unlock()
	chapi.Write(w, http.StatusNoContent, nil)
}

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
	if cfg.Payload.Kernel == "" {
		chapi.WriteError(w, http.StatusBadRequest, "Error from API", "The VM could not be created", "Error validating configuration: this VMM boots a kernel (payload.kernel), not firmware")
		return
	}
	if len(cfg.Devices) > 0 {
		chapi.WriteError(w, http.StatusBadRequest, "Error from API", "The VM could not be created", "Error validating configuration: VFIO devices are not supported by the QEMU microvm backend")
		return
	}
	if cfg.Cpus == nil {
		cfg.Cpus = &chapi.CpusConfig{BootVcpus: 1, MaxVcpus: 1}
	}
	if cfg.Memory == nil {
		cfg.Memory = &chapi.MemoryConfig{Size: 512 << 20}
	}
	v.cfg, v.state = &cfg, chapi.VmCreated
	v.log.Info("chqemu: VM created", "vcpus", cfg.Cpus.BootVcpus, "memory", cfg.Memory.Size, "disks", len(cfg.Disks))
	chapi.Write(w, http.StatusNoContent, nil)
}

// freeLoopbackPort picks a free TCP port on 127.0.0.1 for QEMU to forward.
// Another process could take it before QEMU binds it; QEMU then fails to
// start and vm.boot says so.
func freeLoopbackPort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// withParam adds a kernel parameter to cmdline, before a " -- " that
// starts init's own arguments.
func withParam(cmdline, param string) string {
	if before, after, ok := strings.Cut(cmdline, " -- "); ok {
		return strings.TrimSpace(before) + " " + param + " -- " + after
	}
	return strings.TrimSpace(cmdline + " " + param)
}

// Args is QEMU's command line for cfg: the microvm machine under KVM
// (or TCG emulation, accel), the payload, each disk as a virtio-blk device with its
// serial, each net as a virtio-net device (a tap, or the user-mode network
// forwarding hostPort on 127.0.0.1 to GuestWorkerPort when cfg has none),
// the serial port and the QMP socket. Under TCG the machine gets the
// emulated PIT and PIC (without them the guest kernel finds no timer).
// tscKHz is the host's TSC rate (0 = unknown).
func Args(cfg chapi.VmConfig, qmpSocket string, hostPort int, accel string, tscKHz int) []string {
	machine := "microvm,x-option-roms=off,rtc=on,isa-serial=on"
	if accel == AccelTCG {
		machine += ",pit=on,pic=on"
	}
	args := []string{"-M", machine, "-nodefaults", "-no-user-config", "-nographic", "-no-reboot"}
	if accel == AccelTCG {
		args = append(args, "-accel", "tcg", "-cpu", "max")
	} else {
		args = append(args, "-enable-kvm", "-cpu", "host")
	}
	args = append(args,
		"-smp", strconv.Itoa(cfg.Cpus.BootVcpus),
		"-m", strconv.FormatInt(cfg.Memory.Size>>20, 10)+"M",
		"-kernel", cfg.Payload.Kernel)
	cmdline := cfg.Payload.Cmdline
	if cfg.Payload.Initramfs != "" {
		args = append(args, "-initrd", cfg.Payload.Initramfs)
	}
	for i, d := range cfg.Disks {
		id := fmt.Sprintf("disk%d", i)
		drive := "id=" + id + ",if=none,format=raw,file=" + qemuEscape(d.Path)
		if d.Readonly {
			drive += ",readonly=on"
		}
		dev := "virtio-blk-device,drive=" + id
		if d.Serial != "" {
			dev += ",serial=" + qemuEscape(d.Serial)
		}
		args = append(args, "-drive", drive, "-device", dev)
	}
	if len(cfg.Net) == 0 {
		args = append(args, "-netdev", fmt.Sprintf("user,id=net0,hostfwd=tcp:127.0.0.1:%d-:%d", hostPort, GuestWorkerPort),
			"-device", "virtio-net-device,netdev=net0")
		cmdline = withParam(cmdline, fmt.Sprintf("%s=127.0.0.1:%d", HostFwdParam, hostPort))
	}
	for i, n := range cfg.Net {
		id := fmt.Sprintf("net%d", i)
		args = append(args, "-netdev", "tap,id="+id+",ifname="+qemuEscape(n.Tap)+",script=no,downscript=no")
		dev := "virtio-net-device,netdev=" + id
		if n.Mac != "" {
			dev += ",mac=" + n.Mac
		}
		args = append(args, "-device", dev)
	}
	if accel == AccelTCG && tscKHz > 0 {
		// Under TCG the guest's TSC runs at the host's rate, and the
		// kernel's calibration of it against the emulated PIT fails when
		// the host is busy (then it finds no clocksource and hangs): give
		// it the rate.
		cmdline = withParam(cmdline, fmt.Sprintf("tsc_early_khz=%d", tscKHz))
	}
	args = append(args, "-append", cmdline)
	switch {
	case cfg.Serial != nil && strings.EqualFold(cfg.Serial.Mode, "File") && cfg.Serial.File != "":
		args = append(args, "-serial", "file:"+cfg.Serial.File)
	default:
		args = append(args, "-serial", "null")
	}
	args = append(args, "-qmp", "unix:"+qemuEscape(qmpSocket)+",server=on,wait=off")
	return args
}

// hostTSCKHz is the host's TSC rate in kHz, as the host kernel reports
// its CPU clock ("cpu MHz" in /proc/cpuinfo; with a constant TSC that is
// the TSC's rate), or 0.
func hostTSCKHz() int {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return 0
	}
	return parseCPUMHz(string(b))
}

func parseCPUMHz(cpuinfo string) int {
	for _, line := range strings.Split(cpuinfo, "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok || strings.TrimSpace(k) != "cpu MHz" {
			continue
		}
		mhz, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil || mhz <= 0 {
			return 0
		}
		return int(mhz * 1000)
	}
	return 0
}

// qemuEscape doubles commas, QEMU's option separator.
func qemuEscape(s string) string { return strings.ReplaceAll(s, ",", ",,") }

func (v *VMM) boot(ctx context.Context, w http.ResponseWriter) {
	v.mu.Lock()
	defer v.mu.Unlock()
	switch {
	case v.cfg == nil:
		chapi.WriteError(w, http.StatusNotFound, "Error from API", "The VM could not boot", "The VM is not created")
		return
	case v.running():
		chapi.WriteError(w, http.StatusInternalServerError, "Error from API", "The VM could not boot", "The VM is already running")
		return
	}
	port := 0
	if len(v.cfg.Net) == 0 {
		p, err := freeLoopbackPort()
		if err != nil {
			chapi.WriteError(w, http.StatusInternalServerError, "Error from API", "The VM could not boot", err.Error())
			return
		}
		port = p
	}
	_ = os.Remove(v.qmpSocket())
	logf, err := os.OpenFile(v.qemuLog(), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		chapi.WriteError(w, http.StatusInternalServerError, "Error from API", "The VM could not boot", err.Error())
		return
	}
	args := Args(*v.cfg, v.qmpSocket(), port, v.opts.Accel, hostTSCKHz())
	cmd := exec.Command(v.opts.QEMU, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		chapi.WriteError(w, http.StatusInternalServerError, "Error from API", "The VM could not boot", err.Error())
		return
	}
	_ = logf.Close()
	exited := make(chan struct{})
	go func() { // owned: ends when QEMU exits, which stopQEMU ensures
		_ = cmd.Wait()
		close(exited)
	}()
	v.qemu, v.exited = cmd, exited
	v.log.Info("chqemu: QEMU started", "accel", v.opts.Accel, "pid", cmd.Process.Pid, "hostfwd", port, "args", strings.Join(args, " "))
	// QEMU is up once its QMP socket answers.
	deadline := time.Now().Add(15 * time.Second)
	for {
		qctx, cancel := context.WithTimeout(ctx, time.Second)
		var st qmpStatus
		err := qmpCall(qctx, v.qmpSocket(), "query-status", &st)
		cancel()
		if err == nil {
			break
		}
		select {
		case <-exited:
			msg := tail(v.qemuLog())
			v.qemu, v.exited = nil, nil
			chapi.WriteError(w, http.StatusInternalServerError, "Error from API", "The VM could not boot", "QEMU exited: "+msg)
			return
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			v.stopQEMU()
			chapi.WriteError(w, http.StatusInternalServerError, "Error from API", "The VM could not boot", "QEMU's QMP socket did not answer: "+err.Error())
			return
		}
	}
	v.state = chapi.VmRunning
	chapi.Write(w, http.StatusNoContent, nil)
}

// tail is the end of a log file, for an error message.
func tail(file string) string {
	b, _ := os.ReadFile(file)
	b = bytes.TrimSpace(b)
	if len(b) > 600 {
		b = b[len(b)-600:]
	}
	return string(b)
}

// running reports whether the QEMU process lives (v.mu held).
func (v *VMM) running() bool {
	if v.exited == nil {
		return false
	}
	select {
	case <-v.exited:
		return false
	default:
		return true
	}
}

// stopQEMU ends the QEMU process: QMP quit, then a kill if it has not
// exited within 10 seconds (v.mu held).
func (v *VMM) stopQEMU() {
	if v.qemu == nil {
		return
	}
	if v.running() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := qmpCall(ctx, v.qmpSocket(), "quit", nil); err != nil {
			v.log.Debug("chqemu: qmp quit", "err", err)
		}
		cancel()
		select {
		case <-v.exited:
		case <-time.After(10 * time.Second):
			v.log.Warn("chqemu: QEMU did not quit; killing it", "pid", v.qemu.Process.Pid)
			_ = v.qemu.Process.Kill()
			<-v.exited
		}
	}
	v.qemu, v.exited = nil, nil
	_ = os.Remove(v.qmpSocket())
	v.log.Info("chqemu: QEMU ended")
}

func (v *VMM) info(ctx context.Context, w http.ResponseWriter) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.cfg == nil {
		chapi.WriteError(w, http.StatusNotFound, "Error from API", "The VM information could not be retrieved", "The VM is not created")
		return
	}
	state := v.state
	if state == chapi.VmRunning || state == chapi.VmPaused {
		if !v.running() {
			state = chapi.VmShutdown // the guest powered off, or QEMU died
		} else {
			qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			var st qmpStatus
			err := qmpCall(qctx, v.qmpSocket(), "query-status", &st)
			cancel()
			if err != nil {
				chapi.WriteError(w, http.StatusInternalServerError, "Error from API", "The VM information could not be retrieved", err.Error())
				return
			}
			state = stateOf(st)
		}
		v.state = state
	}
	b, _ := json.Marshal(chapi.VmInfo{Config: *v.cfg, State: state, MemoryActualSize: v.cfg.Memory.Size})
	chapi.Write(w, http.StatusOK, b)
}

// stateOf maps QEMU's run state to Cloud Hypervisor's VmState.
func stateOf(st qmpStatus) chapi.VmState {
	switch st.Status {
	case "running":
		return chapi.VmRunning
	case "paused", "suspended", "save-vm", "restore-vm", "debug", "watchdog":
		return chapi.VmPaused
	case "prelaunch", "inmigrate":
		return chapi.VmCreated
	case "shutdown", "guest-panicked", "internal-error", "io-error":
		return chapi.VmShutdown
	}
	if st.Running {
		return chapi.VmRunning
	}
	return chapi.VmPaused
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
	v.stopQEMU()
	v.state = chapi.VmShutdown
	v.log.Info("chqemu: VM shut down")
	chapi.Write(w, http.StatusNoContent, nil)
}
