package hostagent

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1/managerv1connect"
	"github.com/norsk-go/norsk-manager/internal/chapi"
	"github.com/norsk-go/norsk-manager/internal/pki"
	"github.com/norsk-go/norsk-manager/internal/providers"
)

// Files of a VM's directory.
const (
	recordFile = "vm.json"
	socketFile = "api.sock"
	rootDisk   = "rootfs.img"
	bootDisk   = "first-boot.img"
)

// StateLost is a VM whose VMM no longer answers on its API socket.
const StateLost = "Lost"

// record is a VM's record, kept beside its disks (vm.json): what the agent
// accounts for.
type record struct {
	ID          string            `json:"id"`
	NodeID      string            `json:"nodeId"`
	ClusterID   string            `json:"clusterId"`
	ClientToken string            `json:"clientToken"`
	Shape       string            `json:"shape"`
	Image       string            `json:"image"`
	Tags        map[string]string `json:"tags,omitempty"`
	CreatedAt   time.Time         `json:"createdAt"`
	Tap         string            `json:"tap,omitempty"`
	MAC         string            `json:"mac,omitempty"`
	VCPUs       uint32            `json:"vcpus"`
	MemoryBytes uint64            `json:"memoryBytes"`
	GPUs        []string          `json:"gpus,omitempty"`
}

// Agent is a running host agent. Its methods are safe for concurrent use.
type Agent struct {
	cfg Config
	log *slog.Logger
	ln  net.Listener
	srv *http.Server
	// served is the agent's TLS identity (Dir/tls): TLS with the Manager's
	// client certificate required while it holds a certificate.
	served *pki.Served
	// metricsSrv serves /metrics alone on MetricsListen (nil: none), at
	// metricsAddr.
	metricsSrv  *http.Server
	metricsAddr string
	// stopRenew ends the certificate renewal loop (nil: none runs).
	stopRenew context.CancelFunc
	wg        sync.WaitGroup

	// mu serialises creates and deletes (capacity is counted under it) and
	// guards vms.
	mu  sync.Mutex
	vms map[string]*record
	// unaccounted are API sockets found with no record beside them.
	unaccounted []string
	metrics     *metrics
}

// Start finds the VMs of an earlier run in cfg.Dir, then serves the
// HostAgent service on cfg.Listen until Close.
func Start(cfg Config) (*Agent, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(cfg.Dir, "vms"), 0o700); err != nil {
		return nil, fmt.Errorf("host-agent: %w", err)
	}
	a := &Agent{cfg: cfg, log: cfg.Logger.With("component", "host-agent", "host", cfg.Name), vms: map[string]*record{}}
	if err := a.recover(context.Background()); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("host-agent: %w", err)
	}
	a.ln = ln
	tlsDir := filepath.Join(cfg.Dir, tlsDirName)
	if a.served, err = pki.LoadServed(tlsDir, tlsName, "norsk-host "+cfg.Name, func(msg string, err error) {
		a.log.Warn("host-agent: "+msg, "dir", tlsDir, "err", err)
	}); err != nil {
		_ = ln.Close()
		return nil, fmt.Errorf("host-agent: %w", err)
	}
	if err := a.checkPlaintext(); err != nil {
		_ = ln.Close()
		return nil, err
	}
	rctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	a.cfg.Token, err = a.secret(rctx, ln.Addr().String())
	cancel()
	if err != nil {
		_ = ln.Close()
		return nil, err
	}
	if !a.served.Serving() && !onLoopback(ln.Addr()) {
		a.log.Warn("host-agent: SERVING CLEARTEXT HTTP OFF LOOPBACK: the host secret and the VMs' first-boot data (registration tokens) travel unencrypted; register with an https Manager to get mutual TLS", "listen", ln.Addr().String())
	}
	mux := http.NewServeMux()
	path, h := managerv1connect.NewHostAgentHandler(a)
	mux.Handle(path, a.auth(h))
	a.metrics = newMetrics(a)
	reg := prometheus.NewRegistry()
	reg.MustRegister(a.metrics)
	metricsH := promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	mux.Handle("/metrics", metricsH)
	if cfg.MetricsListen != "" {
		mln, err := net.Listen("tcp", cfg.MetricsListen)
		if err != nil {
			_ = ln.Close()
			return nil, fmt.Errorf("host-agent: metrics listener: %w", err)
		}
		mm := http.NewServeMux()
		mm.Handle("/metrics", metricsH)
		a.metricsSrv = &http.Server{Handler: mm, ReadHeaderTimeout: 10 * time.Second}
		a.metricsAddr = mln.Addr().String()
		a.wg.Add(1)
		go func() {
			defer a.wg.Done()
			if err := a.metricsSrv.Serve(mln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				a.log.Error("host-agent: metrics server ended", "err", err)
			}
		}()
	}
	a.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second,
		// Refused handshakes (a client without the Manager's certificate).
		ErrorLog: slog.NewLogLogger(a.log.Handler(), slog.LevelWarn)}
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		if err := a.srv.Serve(a.served.Listener(ln)); err != nil && !errors.Is(err, http.ErrServerClosed) {
			a.log.Error("host-agent: server ended", "err", err)
		}
	}()
	if r := a.cfg.Register; r != nil && r.https() && a.served.Serving() {
		ctx, cancel := context.WithCancel(context.Background())
		a.stopRenew = cancel
		a.wg.Add(1)
		go func() {
			defer a.wg.Done()
			a.renewTLS(ctx)
		}()
	} else if a.served.Serving() {
		a.log.Warn("host-agent: serving mutual TLS without the Managers' https URLs (--manager-url): the certificate is not renewed before it expires", "expires", a.served.Expires())
	}
	a.log.Info("host agent serving", "url", a.URL(), "vms", len(a.vms), "dir", cfg.Dir, "mutual_tls", a.served.Serving())
	return a, nil
}

// The agent's TLS material, in Dir/tls (pki.Served): host-key.pem,
// host.pem (the certificate the cluster CA signed) and ca.pem.
const (
	tlsDirName = "tls"
	tlsName    = "host"
)

// onLoopback reports whether addr is a loopback address.
func onLoopback(addr net.Addr) bool {
	tcp, ok := addr.(*net.TCPAddr)
	return ok && tcp.IP.IsLoopback()
}

// checkPlaintext refuses, before anything is registered, an agent that
// would serve cleartext off loopback: it has no certificate kept and will
// not get one (no registration with an https Manager), unless
// AllowPlaintext.
func (a *Agent) checkPlaintext() error {
	if a.served.Serving() || onLoopback(a.ln.Addr()) || a.cfg.AllowPlaintext {
		return nil
	}
	if r := a.cfg.Register; r != nil && r.Token != "" && r.https() {
		if _, err := os.Stat(filepath.Join(a.cfg.Dir, secretFile)); errors.Is(err, os.ErrNotExist) && a.cfg.Token == "" {
			return nil // the registration asks for a certificate
		}
	}
	return fmt.Errorf("host-agent: listening on %s, off loopback, with no certificate from the Manager: the agent serves mutual TLS there. Register it with an https Manager (--registration-token, --manager-url https://…), listen on loopback, or accept cleartext with --insecure-plaintext", a.ln.Addr())
}

// URL is where the agent serves: https://host:port while it serves mutual
// TLS, http://host:port otherwise.
func (a *Agent) URL() string {
	if a.served != nil && a.served.Serving() {
		return "https://" + a.ln.Addr().String()
	}
	return "http://" + a.ln.Addr().String()
}

// MetricsAddr is where /metrics is served alone ("" without
// MetricsListen).
func (a *Agent) MetricsAddr() string { return a.metricsAddr }

// Addr is the address the agent listens on.
func (a *Agent) Addr() string { return a.ln.Addr().String() }

// Close stops serving. The VMs keep running: they are the VMMs'.
func (a *Agent) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if a.stopRenew != nil {
		a.stopRenew()
	}
	err := a.srv.Shutdown(ctx)
	if a.metricsSrv != nil {
		err = errors.Join(err, a.metricsSrv.Shutdown(ctx))
	}
	a.wg.Wait()
	return err
}

func (a *Agent) auth(h http.Handler) http.Handler {
	want := []byte("Bearer " + a.cfg.Token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(`{"code":"unauthenticated","message":"the host agent needs its bearer token (the host secret)"}`))
			return
		}
		h.ServeHTTP(w, r)
	})
}

func (a *Agent) vmDir(id string) string         { return filepath.Join(a.cfg.Dir, "vms", id) }
func (a *Agent) socket(id string) string        { return filepath.Join(a.vmDir(id), socketFile) }
func (a *Agent) client(id string) *chapi.Client { return chapi.NewClient(a.socket(id)) }

// recover reads the VM records of an earlier run: every VM with a record
// is the agent's again (whatever its VMM answers); an API socket with no
// record is reported as unaccounted and left running.
func (a *Agent) recover(ctx context.Context) error {
	entries, err := os.ReadDir(filepath.Join(a.cfg.Dir, "vms"))
	if err != nil {
		return fmt.Errorf("host-agent: %w", err)
	}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		id := e.Name()
		b, err := os.ReadFile(filepath.Join(a.vmDir(id), recordFile))
		if err != nil {
			if _, serr := os.Stat(a.socket(id)); serr == nil {
				pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				_, perr := a.client(id).Ping(pctx)
				cancel()
				if perr == nil {
					a.unaccounted = append(a.unaccounted, a.socket(id))
					a.log.Warn("host-agent: a VMM answers on an API socket with no VM record beside it; leaving it running (remove it by hand once you know whose it is)",
						"socket", a.socket(id))
				}
			}
			continue
		}
		var r record
		if err := json.Unmarshal(b, &r); err != nil || r.ID != id {
			a.log.Warn("host-agent: unreadable VM record; leaving the VM alone", "dir", a.vmDir(id), "err", err)
			a.unaccounted = append(a.unaccounted, a.socket(id))
			continue
		}
		a.vms[id] = &r
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		info, err := a.client(id).Info(pctx)
		cancel()
		state := string(info.State)
		if err != nil {
			state = StateLost
		}
		a.log.Info("host-agent: found a VM of an earlier run", "vm", id, "node", r.NodeID, "state", state)
	}
	return nil
}

// state asks the VM's VMM its state (StateLost when it does not answer).
func (a *Agent) state(ctx context.Context, id string) string {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	info, err := a.client(id).Info(ctx)
	switch {
	case err == nil:
		return string(info.State)
	case chapi.IsNotFound(err):
		return string(chapi.VmShutdown) // the VMM runs with no VM
	}
	return StateLost
}

func (a *Agent) shape(name string) (Shape, bool) {
	for _, s := range a.cfg.Shapes {
		if s.Name == name {
			return s, true
		}
	}
	return Shape{}, false
}

// used is what the recorded VMs take (a.mu held).
func (a *Agent) used() (vcpus uint32, mem uint64, gpus map[string]bool) {
	gpus = map[string]bool{}
	for _, r := range a.vms {
		vcpus += r.VCPUs
		mem += r.MemoryBytes
		for _, g := range r.GPUs {
			gpus[g] = true
		}
	}
	return vcpus, mem, gpus
}

func (a *Agent) vmOf(ctx context.Context, r *record) *managerv1.MicroVm {
	return &managerv1.MicroVm{
		Id: r.ID, NodeId: r.NodeID, ClusterId: r.ClusterID, Shape: r.Shape, Image: r.Image, State: a.state(ctx, r.ID),
		ClientToken: r.ClientToken, Tags: r.Tags, CreatedAt: r.CreatedAt.UTC().Format(time.RFC3339), Tap: r.Tap, Mac: r.MAC,
		Vcpus: r.VCPUs, MemoryBytes: r.MemoryBytes, ApiSocket: a.socket(r.ID),
	}
}

// GetHost reports the host and its VMs.
func (a *Agent) GetHost(ctx context.Context, _ *connect.Request[managerv1.GetHostRequest]) (*connect.Response[managerv1.HostInfo], error) {
	a.mu.Lock()
	recs := make([]*record, 0, len(a.vms))
	for _, r := range a.vms {
		recs = append(recs, r)
	}
	uv, um, ug := a.used()
	unacc := append([]string(nil), a.unaccounted...)
	a.mu.Unlock()
	sort.Slice(recs, func(i, j int) bool { return recs[i].ID < recs[j].ID })
	out := &managerv1.HostInfo{Name: a.cfg.Name, Vcpus: a.cfg.VCPUs, MemoryBytes: a.cfg.MemoryBytes, Gpus: uint32(len(a.cfg.GPUDevices)),
		UsedVcpus: uv, UsedMemoryBytes: um, UsedGpus: uint32(len(ug)), Architecture: a.cfg.Architecture, Unaccounted: unacc}
	for _, s := range a.cfg.Shapes {
		out.Shapes = append(out.Shapes, &managerv1.HostShape{Name: s.Name, Vcpus: s.VCPUs, MemoryBytes: s.MemoryBytes, Gpus: s.GPUs})
	}
	for name := range a.cfg.Images {
		out.Images = append(out.Images, name)
	}
	sort.Strings(out.Images)
	for _, r := range recs {
		vm := a.vmOf(ctx, r)
		out.Vms = append(out.Vms, vm)
		if out.VmmVersion == "" && vm.State != StateLost {
			pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			if p, err := a.client(r.ID).Ping(pctx); err == nil {
				out.VmmVersion = p.Version
			}
			cancel()
		}
	}
	return connect.NewResponse(out), nil
}

// vmID is the VM id a client token names: a repeated create finds the VM
// the first made.
func vmID(clientToken string) string {
	sum := sha256.Sum256([]byte(clientToken))
	return "vm-" + hex.EncodeToString(sum[:6])
}

// CreateVm prepares, creates and boots a VM.
func (a *Agent) CreateVm(ctx context.Context, req *connect.Request[managerv1.CreateVmRequest]) (*connect.Response[managerv1.MicroVm], error) {
	m := req.Msg
	switch {
	case m.GetNodeId() == "":
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("nodeId: is required"))
	case m.GetClientToken() == "":
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("clientToken: is required"))
	}
	sh, ok := a.shape(m.GetShape())
	if !ok {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("shape: host %s offers no shape %q", a.cfg.Name, m.GetShape()))
	}
	img, ok := a.cfg.Images[m.GetImage()]
	if !ok {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("image: host %s has no base image %q", a.cfg.Name, m.GetImage()))
	}
	if _, err := providers.DecodeUserData(m.GetUserData()); err != nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("userData: %w", err))
	}
	id := vmID(m.GetClientToken())
	a.mu.Lock()
	defer a.mu.Unlock()
	if r, ok := a.vms[id]; ok {
		return connect.NewResponse(a.vmOf(ctx, r)), nil // the create repeated
	}
	for _, r := range a.vms {
		if r.NodeID == m.GetNodeId() && r.ClusterID == m.GetClusterId() {
			return nil, connect.NewError(connect.CodeAlreadyExists, fmt.Errorf("node %s already has VM %s (another client token)", r.NodeID, r.ID))
		}
	}
	uv, um, ug := a.used()
	if uv+sh.VCPUs > a.cfg.VCPUs || um+sh.MemoryBytes > a.cfg.MemoryBytes {
		a.metrics.creates.WithLabelValues("capacity").Inc()
		return nil, connect.NewError(connect.CodeResourceExhausted, fmt.Errorf("host %s is out of capacity for %s (%d vCPUs, %d MiB): %d of %d vCPUs and %d of %d MiB are in use",
			a.cfg.Name, sh.Name, sh.VCPUs, sh.MemoryBytes>>20, uv, a.cfg.VCPUs, um>>20, a.cfg.MemoryBytes>>20))
	}
	var gpus []string
	for _, g := range a.cfg.GPUDevices {
		if uint32(len(gpus)) == sh.GPUs {
			break
		}
		if !ug[g] {
			gpus = append(gpus, g)
		}
	}
	if uint32(len(gpus)) < sh.GPUs {
		a.metrics.creates.WithLabelValues("capacity").Inc()
		return nil, connect.NewError(connect.CodeResourceExhausted, fmt.Errorf("host %s is out of GPUs for %s: %d of %d are passed through to other VMs", a.cfg.Name, sh.Name, len(ug), len(a.cfg.GPUDevices)))
	}
	r := &record{ID: id, NodeID: m.GetNodeId(), ClusterID: m.GetClusterId(), ClientToken: m.GetClientToken(), Shape: sh.Name, Image: m.GetImage(),
		Tags: m.GetTags(), CreatedAt: a.cfg.Clock.Now().UTC(), VCPUs: sh.VCPUs, MemoryBytes: sh.MemoryBytes, GPUs: gpus}
	if a.cfg.Bridge != "" {
		r.Tap = "nt" + id[3:] // 14 characters: within IFNAMSIZ
		r.MAC = macOf(id)
	}
	if err := a.prepare(r, img, m.GetUserData()); err != nil {
		a.metrics.creates.WithLabelValues("failed").Inc()
		_ = os.RemoveAll(a.vmDir(id))
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("prepare VM %s: %w", id, err))
	}
	if err := a.boot(ctx, r); err != nil {
		a.metrics.creates.WithLabelValues("failed").Inc()
		a.destroy(context.WithoutCancel(ctx), id)
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("boot VM %s: %w", id, err))
	}
	a.vms[id] = r
	a.metrics.creates.WithLabelValues("ok").Inc()
	a.log.Info("host-agent: VM booted", "vm", id, "node", r.NodeID, "shape", r.Shape, "image", r.Image)
	return connect.NewResponse(a.vmOf(ctx, r)), nil
}

// macOf is a locally administered MAC derived from the VM id.
func macOf(id string) string {
	sum := sha256.Sum256([]byte(id))
	return fmt.Sprintf("52:54:00:%02x:%02x:%02x", sum[0], sum[1], sum[2])
}

// prepare makes the VM's directory: its record, root disk and first-boot
// disk.
func (a *Agent) prepare(r *record, image string, userData []byte) error {
	dir := a.vmDir(r.ID)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	cloned, err := cloneOrCopy(image, filepath.Join(dir, rootDisk))
	if err != nil {
		return err
	}
	a.log.Debug("host-agent: root disk made", "vm", r.ID, "cloned", cloned)
	if err := writeFirstBootDisk(filepath.Join(dir, bootDisk), userData); err != nil {
		return err
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, recordFile+".tmp")
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, recordFile))
}

// vmConfig is the VM's Cloud Hypervisor configuration.
func (a *Agent) vmConfig(r *record) chapi.VmConfig {
	dir := a.vmDir(r.ID)
	cfg := chapi.VmConfig{
		Cpus:    &chapi.CpusConfig{BootVcpus: int(r.VCPUs), MaxVcpus: int(r.VCPUs)},
		Memory:  &chapi.MemoryConfig{Size: int64(r.MemoryBytes)},
		Payload: &chapi.PayloadConfig{Kernel: a.cfg.Kernel, Cmdline: a.cfg.Cmdline, Initramfs: a.cfg.Initramfs, Firmware: a.cfg.Firmware},
		Disks: []chapi.DiskConfig{
			{Path: filepath.Join(dir, rootDisk), ID: "root"},
			{Path: filepath.Join(dir, bootDisk), ID: "first-boot", Readonly: true, Serial: "norsk-first-boot"},
		},
		Serial:  &chapi.ConsoleConfig{Mode: "File", File: filepath.Join(dir, "serial.log")},
		Console: &chapi.ConsoleConfig{Mode: "Off"},
	}
	if r.Tap != "" {
		cfg.Net = []chapi.NetConfig{{Tap: r.Tap, Mac: r.MAC, ID: "net0"}}
	}
	for i, g := range r.GPUs {
		cfg.Devices = append(cfg.Devices, chapi.DeviceConfig{Path: g, ID: fmt.Sprintf("gpu%d", i)})
	}
	return cfg
}

// boot spawns the VM's VMM and creates and boots the VM through its API.
func (a *Agent) boot(ctx context.Context, r *record) error {
	sock := a.socket(r.ID)
	if err := a.cfg.VMM.Launch(ctx, r.ID, sock); err != nil {
		return err
	}
	c := a.client(r.ID)
	deadline := a.cfg.Clock.Now().Add(startWait)
	for {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		_, err := c.Ping(pctx)
		cancel()
		if err == nil {
			break
		}
		if a.cfg.Clock.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("the VMM did not answer on %s: %w", sock, err)
		}
		t := a.cfg.Clock.NewTimer(50 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
		case <-t.C():
		}
	}
	if err := c.CreateVM(ctx, a.vmConfig(r)); err != nil {
		return err
	}
	if r.Tap != "" && a.cfg.Bridge != "" {
		// The VMM opened the tap on vm.create; it joins the host bridge.
		if out, err := exec.CommandContext(ctx, "ip", "link", "set", r.Tap, "master", a.cfg.Bridge, "up").CombinedOutput(); err != nil {
			return fmt.Errorf("attach %s to bridge %s: %v: %s", r.Tap, a.cfg.Bridge, err, out)
		}
	}
	return c.BootVM(ctx)
}

// destroy shuts the VM down, deletes it, ends its VMM and removes its
// directory (a.mu held or the VM not yet recorded).
func (a *Agent) destroy(ctx context.Context, id string) {
	c := a.client(id)
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := c.ShutdownVM(ctx); err != nil && !errors.Is(err, chapi.ErrUnreachable) {
		a.log.Debug("host-agent: vm.shutdown", "vm", id, "err", err) // not booted, or not created
	}
	if err := c.DeleteVM(ctx); err != nil && !errors.Is(err, chapi.ErrUnreachable) {
		a.log.Warn("host-agent: vm.delete", "vm", id, "err", err)
	}
	if err := c.ShutdownVMM(ctx); err != nil && !errors.Is(err, chapi.ErrUnreachable) {
		a.log.Warn("host-agent: vmm.shutdown", "vm", id, "err", err)
	}
	if err := os.RemoveAll(a.vmDir(id)); err != nil {
		a.log.Warn("host-agent: remove the VM's directory", "vm", id, "err", err)
	}
}

// DeleteVm ends a VM.
func (a *Agent) DeleteVm(ctx context.Context, req *connect.Request[managerv1.DeleteVmRequest]) (*connect.Response[managerv1.DeleteVmResponse], error) {
	id, node := req.Msg.GetId(), req.Msg.GetNodeId()
	if id == "" && node == "" {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("id: give the VM's id or its nodeId"))
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	var found []string
	for vid, r := range a.vms {
		if (id != "" && vid == id) || (id == "" && r.NodeID == node) {
			found = append(found, vid)
		}
	}
	for _, vid := range found {
		a.destroy(ctx, vid)
		a.log.Info("host-agent: VM deleted", "vm", vid, "node", a.vms[vid].NodeID)
		delete(a.vms, vid)
	}
	return connect.NewResponse(&managerv1.DeleteVmResponse{}), nil
}

// DeleteAll deletes every VM the agent accounts for (a host taken out of
// service; an ephemeral dev's end). VMMs it cannot account for are left.
// Each VM's directory goes even when its VMM does not answer.
func (a *Agent) DeleteAll(ctx context.Context) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for id := range a.vms {
		a.destroy(ctx, id)
		delete(a.vms, id)
	}
}

// SetVmTags merges tags onto a VM's record.
func (a *Agent) SetVmTags(ctx context.Context, req *connect.Request[managerv1.SetVmTagsRequest]) (*connect.Response[managerv1.MicroVm], error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	r, ok := a.vms[req.Msg.GetId()]
	if !ok {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("id: host %s has no VM %q", a.cfg.Name, req.Msg.GetId()))
	}
	next := *r
	next.Tags = map[string]string{}
	for k, v := range r.Tags {
		next.Tags[k] = v
	}
	for k, v := range req.Msg.GetTags() {
		next.Tags[k] = v
	}
	b, err := json.MarshalIndent(&next, "", "  ")
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, err)
	}
	tmp := filepath.Join(a.vmDir(r.ID), recordFile+".tmp")
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return nil, connect.NewError(connect.CodeInternal, err)
	}
	if err := os.Rename(tmp, filepath.Join(a.vmDir(r.ID), recordFile)); err != nil {
		return nil, connect.NewError(connect.CodeInternal, err)
	}
	a.vms[r.ID] = &next
	return connect.NewResponse(a.vmOf(ctx, &next)), nil
}
