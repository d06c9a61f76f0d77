package process

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/internal/runtime"
)

// Prepare writes a state file per service of spec and starts nothing. See
// runtime.Runtime for the idempotency and fencing rules, and the package
// comment for what each service is given.
func (r *Runtime) Prepare(ctx context.Context, spec runtime.InstanceSpec) error {
	key := spec.Key
	if key.JobID == "" || spec.Job == nil {
		return fmt.Errorf("prepare %s: no job id or job: %w", key, runtime.ErrInvalidSpec)
	}
	if spec.NodeID != "" && spec.NodeID != r.nodeID {
		return fmt.Errorf("prepare %s: spec is for node %s, this runtime runs node %s: %w", key, spec.NodeID, r.nodeID, runtime.ErrInvalidSpec)
	}
	instDir := r.instanceDir(key)
	seen := map[string]bool{}
	for _, svc := range spec.Job.GetServices() {
		if err := r.validate(svc, instDir); err != nil {
			return fmt.Errorf("prepare %s: %w", key, err)
		}
		if seen[svc.GetName()] {
			return fmt.Errorf("prepare %s: service %q appears twice: %w", key, svc.GetName(), runtime.ErrInvalidSpec)
		}
		seen[svc.GetName()] = true
	}
	for _, v := range spec.Job.GetVolumes() {
		if !validName(v) {
			return fmt.Errorf("prepare %s: job volume %q: not 1-128 characters of [A-Za-z0-9._-]: %w", key, v, runtime.ErrInvalidSpec)
		}
	}

	unlock, err := r.lockInstance(key, true)
	if err != nil {
		return fmt.Errorf("prepare %s: %w", key, err)
	}
	defer unlock()

	existing, err := r.instanceStates(key)
	if err != nil {
		return fmt.Errorf("prepare %s: %w", key, err)
	}
	if f := r.foreign(existing); f != nil {
		return fmt.Errorf("prepare %s: its directory %s holds service %s of node %s in cluster %q, not this runtime's; it is left alone",
			key, r.instanceDir(key), f.Service, f.NodeID, f.ClusterID)
	}
	current := map[string]bool{}
	var stale []*serviceState
	for _, st := range existing {
		switch {
		case st.Token > spec.Token:
			return fmt.Errorf("prepare %s with token %d: service %s has token %d: %w", key, spec.Token, st.Service, st.Token, runtime.ErrSuperseded)
		case st.Token < spec.Token:
			stale = append(stale, st)
		default:
			current[st.Service] = true
		}
	}
	for _, st := range stale {
		r.log.Info("removing service of a superseded binding", "instance", key.String(), "service", st.Service,
			"token", st.Token, "new_token", spec.Token)
		if err := r.kill(ctx, key, st); err != nil {
			return fmt.Errorf("prepare %s: remove superseded service %s: %w", key, st.Service, err)
		}
		if err := os.Remove(r.statePath(key, st.Service)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("prepare %s: remove superseded service %s: %w", key, st.Service, err)
		}
	}

	// One allocation at a time on the host, up to the saved state files:
	// a port another Prepare has chosen is then either still bound by it
	// or in a state file of a registered directory, bound or not.
	r.allocMu.Lock()
	defer r.allocMu.Unlock()
	unlockPorts, err := r.ports.lock()
	if err != nil {
		return fmt.Errorf("prepare %s: %w", key, err)
	}
	defer unlockPorts()
	reserved, err := r.reservedPorts()
	if err != nil {
		return fmt.Errorf("prepare %s: %w", key, err)
	}
	// Listeners held until every port of this Prepare is chosen, so that
	// two mappings never get the same port; released on return.
	var holds []io.Closer
	defer func() {
		for _, h := range holds {
			_ = h.Close()
		}
	}()

	for _, svc := range spec.Job.GetServices() {
		if current[svc.GetName()] {
			continue
		}
		st, err := r.newState(spec, svc, instDir, reserved, &holds)
		if err != nil {
			return fmt.Errorf("prepare %s: service %s: %w", key, svc.GetName(), err)
		}
		if err := saveState(r.statePath(key, svc.GetName()), st); err != nil {
			return fmt.Errorf("prepare %s: %w", key, err)
		}
		r.log.Info("prepared service", "instance", key.String(), "service", svc.GetName(), "token", spec.Token,
			"argv", st.Argv, "ports", len(st.Ports))
	}
	return nil
}

// validate checks what Prepare can check of a service before it changes
// anything; errors wrap runtime.ErrInvalidSpec.
func (r *Runtime) validate(svc *managerv1.Service, instDir string) error {
	name := svc.GetName()
	invalid := func(format string, args ...any) error {
		return fmt.Errorf("service %q: %s: %w", name, fmt.Sprintf(format, args...), runtime.ErrInvalidSpec)
	}
	if !validName(name) {
		return invalid("name is not 1-128 characters of [A-Za-z0-9._-]")
	}
	if len(svc.GetCommand()) == 0 || svc.GetCommand()[0] == "" {
		return invalid("the process runtime needs a command (the executable to run)")
	}
	if wd := svc.GetWorkingDir(); filepath.IsAbs(wd) {
		if fi, err := os.Stat(wd); err != nil || !fi.IsDir() {
			return invalid("working directory %q is not a directory on this node", wd)
		}
	}
	if _, err := resolveExecutable(svc.GetCommand()[0], r.commandDir); err != nil {
		return invalid("executable %q: %v", svc.GetCommand()[0], err)
	}
	for _, pm := range svc.GetPorts() {
		if pm.GetContainerPort() == 0 || pm.GetContainerPort() > 65535 {
			return invalid("container port %d out of range", pm.GetContainerPort())
		}
		switch hp := pm.GetHostPort().(type) {
		case *managerv1.PortMapping_Range:
			if lo, hi := hp.Range.GetMinPort(), hp.Range.GetMaxPort(); lo == 0 || hi > 65535 || lo > hi {
				return invalid("port %d: host port range %d-%d is not valid", pm.GetContainerPort(), lo, hi)
			}
		case *managerv1.PortMapping_Specific:
			if hp.Specific == 0 || hp.Specific > 65535 {
				return invalid("port %d: host port %d out of range", pm.GetContainerPort(), hp.Specific)
			}
		}
		if a := pm.GetHostAddress(); a != "" && net.ParseIP(a) == nil {
			return invalid("port %d: host address %q is not an IP address", pm.GetContainerPort(), a)
		}
	}
	for _, vm := range svc.GetVolumeMounts() {
		if !strings.HasPrefix(vm.GetContainerPath(), "/") {
			return invalid("volume mount %q: container path %q is not absolute", vm.GetSource(), vm.GetContainerPath())
		}
		src := vm.GetSource()
		if !strings.HasPrefix(src, "/") && !validName(src) {
			return invalid("volume %q: not 1-128 characters of [A-Za-z0-9._-]", src)
		}
	}
	return nil
}

// workDir is where a service runs: its working_dir, relative to the
// instance directory when relative; the instance directory when empty.
func workDir(instDir string, svc *managerv1.Service) string {
	return absFrom(svc.GetWorkingDir(), instDir)
}

func absFrom(p, base string) string {
	if p == "" {
		return base
	}
	if filepath.IsAbs(p) {
		return filepath.Clean(p)
	}
	return filepath.Join(base, p)
}

// newState builds a service's state file: argv, environment, ports and
// volumes. It allocates ports (holding them open in holds) and creates the
// job's volume directories and the working directory.
func (r *Runtime) newState(spec runtime.InstanceSpec, svc *managerv1.Service, instDir string, reserved map[string]bool, holds *[]io.Closer) (*serviceState, error) {
	wd := workDir(instDir, svc)
	if !filepath.IsAbs(svc.GetWorkingDir()) {
		if err := os.MkdirAll(wd, 0o755); err != nil {
			return nil, fmt.Errorf("working directory: %w", err)
		}
	}
	exe, err := resolveExecutable(svc.GetCommand()[0], r.commandDir)
	if err != nil {
		return nil, fmt.Errorf("executable %q: %v: %w", svc.GetCommand()[0], err, runtime.ErrInvalidSpec)
	}
	argv := append([]string{exe}, svc.GetCommand()[1:]...)
	argv = append(argv, svc.GetArgs()...)

	env := map[string]string{}
	for k, v := range svc.GetEnv() {
		env[k] = v
	}
	for k, v := range spec.Env {
		env[k] = v
	}

	ports := make([]allocatedPort, 0, len(svc.GetPorts()))
	for _, pm := range svc.GetPorts() {
		p, err := allocatePort(pm, reserved, holds)
		if err != nil {
			return nil, err
		}
		ports = append(ports, p)
		env["NORSK_PORT_"+strconv.FormatUint(uint64(p.ContainerPort), 10)] = strconv.FormatUint(uint64(p.HostPort), 10)
	}

	volumes := append([]string(nil), spec.Job.GetVolumes()...)
	for _, vm := range svc.GetVolumeMounts() {
		src := vm.GetSource()
		target := src
		if !strings.HasPrefix(src, "/") {
			volumes = append(volumes, src)
			target = filepath.Join(r.jobVolumesDir(spec.Key.JobID), src)
		}
		env["NORSK_MOUNT_"+envSuffix(vm.GetContainerPath(), true)] = target
	}
	for _, v := range volumes {
		d := filepath.Join(r.jobVolumesDir(spec.Key.JobID), v)
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("volume %s: %w", v, err)
		}
		env["NORSK_VOLUME_"+envSuffix(v, false)] = d
	}
	env[runtime.EnvService] = svc.GetName()

	envList := make([]string, 0, len(env))
	for k, v := range env {
		envList = append(envList, k+"="+v)
	}
	sort.Strings(envList)

	specJSON, err := protojson.Marshal(svc)
	if err != nil {
		return nil, fmt.Errorf("encode spec: %w", err)
	}
	return &serviceState{
		NodeID:      r.nodeID,
		ClusterID:   r.cluster.Get(),
		JobID:       spec.Key.JobID,
		Role:        spec.Key.Role,
		Service:     svc.GetName(),
		Token:       spec.Token,
		RuntimeRole: spec.RuntimeRole,
		Spec:        specJSON,
		Argv:        argv,
		Env:         envList,
		WorkDir:     wd,
		Ports:       ports,
		PreparedAt:  time.Now().UTC(),
	}, nil
}

// envSuffix turns a name or path into an environment variable suffix: upper
// case, every character other than A-Z and 0-9 replaced by '_'. For a path
// (trim set), leading and trailing '_' are trimmed and "" becomes ROOT.
func envSuffix(s string, trim bool) string {
	b := []byte(strings.ToUpper(s))
	for i, c := range b {
		if !(c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			b[i] = '_'
		}
	}
	out := string(b)
	if trim {
		out = strings.Trim(out, "_")
		if out == "" {
			out = "ROOT"
		}
	}
	return out
}

// reservedPorts are the host ports allocated to any service of any runtime
// directory in the port registry (this runtime's among them), as
// "proto/port". Call it under the registry's lock.
func (r *Runtime) reservedPorts() (map[string]bool, error) {
	// Registered again: an entry lost with the temporary directory's
	// cleaning comes back before this runtime's ports are needed.
	if err := r.ports.register(r.dir); err != nil {
		return nil, err
	}
	dirs, err := r.ports.dirs()
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, dir := range dirs {
		states, err := statesUnder(dir, r.log)
		if err != nil {
			return nil, err
		}
		for _, st := range states {
			for _, p := range st.Ports {
				out[p.Protocol+"/"+strconv.FormatUint(uint64(p.HostPort), 10)] = true
			}
		}
	}
	return out, nil
}

// allocatePort chooses the host port of a mapping. Ports it checks by
// binding stay bound (appended to holds) until Prepare returns.
func allocatePort(pm *managerv1.PortMapping, reserved map[string]bool, holds *[]io.Closer) (allocatedPort, error) {
	p := allocatedPort{ContainerPort: pm.GetContainerPort(), Protocol: "tcp", HostAddress: pm.GetHostAddress()}
	if pm.GetProtocol() == managerv1.Protocol_PROTOCOL_UDP {
		p.Protocol = "udp"
	}
	take := func(port uint32) (uint32, bool) {
		if port != 0 && reserved[p.Protocol+"/"+strconv.FormatUint(uint64(port), 10)] {
			return 0, false
		}
		c, got, err := bindPort(p.Protocol, p.HostAddress, port)
		if err != nil {
			return 0, false
		}
		if reserved[p.Protocol+"/"+strconv.FormatUint(uint64(got), 10)] {
			_ = c.Close()
			return 0, false
		}
		*holds = append(*holds, c)
		reserved[p.Protocol+"/"+strconv.FormatUint(uint64(got), 10)] = true
		return got, true
	}
	switch hp := pm.GetHostPort().(type) {
	case *managerv1.PortMapping_Specific:
		p.HostPort = hp.Specific
		return p, nil
	case *managerv1.PortMapping_Range:
		for port := hp.Range.GetMinPort(); port <= hp.Range.GetMaxPort(); port++ {
			if got, ok := take(port); ok {
				p.HostPort = got
				return p, nil
			}
		}
		return p, fmt.Errorf("port %d: no free %s port in %d-%d", p.ContainerPort, p.Protocol, hp.Range.GetMinPort(), hp.Range.GetMaxPort())
	default: // ephemeral
		// Drawn from EphemeralPortMin..Max, below the kernel's range for
		// outgoing connections: the port is free when chosen but released
		// until the service binds it, and a port the kernel may hand to a
		// client socket meanwhile is one the service then cannot bind.
		span := EphemeralPortMax - EphemeralPortMin + 1
		start := rand.IntN(span)
		for i := range min(span, 256) {
			if got, ok := take(uint32(EphemeralPortMin + (start+i*7919)%span)); ok {
				p.HostPort = got
				return p, nil
			}
		}
		return p, fmt.Errorf("port %d: no free ephemeral %s port in %d-%d", p.ContainerPort, p.Protocol, EphemeralPortMin, EphemeralPortMax)
	}
}

// portsAtStart checks, just before a service that does not run starts, that
// each of its host ports can still be bound. A port that cannot (a process
// foreign to the runtimes bound it after Prepare, or something the
// service's last run left behind holds it) is allocated anew when its
// mapping is ephemeral or a range, as a container engine chooses such a port
// anew at every start, and the state file is saved with it; a specific port
// is left as given. A port that cannot be allocated anew is left as it was,
// with a warning: the service then fails to bind it, as before.
func (r *Runtime) portsAtStart(key runtime.Key, st *serviceState) error {
	var taken []int
	for i, p := range st.Ports {
		c, _, err := bindPort(p.Protocol, p.HostAddress, p.HostPort)
		if err == nil {
			_ = c.Close()
			continue
		}
		taken = append(taken, i)
	}
	if len(taken) == 0 {
		return nil
	}
	var svc managerv1.Service
	if err := protojson.Unmarshal(st.Spec, &svc); err != nil || len(svc.GetPorts()) != len(st.Ports) {
		r.log.Warn("host ports taken, and the spec to allocate them anew unreadable", "instance", key.String(), "service", st.Service, "err", err)
		return nil
	}

	r.allocMu.Lock()
	defer r.allocMu.Unlock()
	unlockPorts, err := r.ports.lock()
	if err != nil {
		return err
	}
	defer unlockPorts()
	reserved, err := r.reservedPorts()
	if err != nil {
		return err
	}
	var holds []io.Closer
	defer func() {
		for _, h := range holds {
			_ = h.Close()
		}
	}()
	changed := false
	for _, i := range taken {
		pm := svc.GetPorts()[i]
		old := st.Ports[i]
		if _, ok := pm.GetHostPort().(*managerv1.PortMapping_Specific); ok {
			r.log.Warn("specific host port taken; starting the service with it", "instance", key.String(), "service", st.Service,
				"protocol", old.Protocol, "port", old.HostPort)
			continue
		}
		p, err := allocatePort(pm, reserved, &holds)
		if err != nil {
			r.log.Warn("host port taken and none free to allocate anew; starting the service with it", "instance", key.String(),
				"service", st.Service, "protocol", old.Protocol, "port", old.HostPort, "err", err)
			continue
		}
		r.log.Info("host port taken since Prepare; allocated anew", "instance", key.String(), "service", st.Service,
			"protocol", p.Protocol, "old_port", old.HostPort, "port", p.HostPort)
		st.Ports[i] = p
		setEnv(&st.Env, "NORSK_PORT_"+strconv.FormatUint(uint64(p.ContainerPort), 10), strconv.FormatUint(uint64(p.HostPort), 10))
		changed = true
	}
	if !changed {
		return nil
	}
	// Saved before the registry's lock is released: the new ports are
	// then the service's for every other allocation.
	return saveState(r.statePath(key, st.Service), st)
}

// setEnv sets k to v in an environment list of "K=V" entries.
func setEnv(env *[]string, k, v string) {
	for i, kv := range *env {
		if strings.HasPrefix(kv, k+"=") {
			(*env)[i] = k + "=" + v
			return
		}
	}
	*env = append(*env, k+"="+v)
}

// The range an ephemeral host port is drawn from: Kubernetes' NodePort
// range, below Linux's default ip_local_port_range (32768-60999), from
// which the kernel takes the local ports of outgoing connections.
const (
	EphemeralPortMin = 30000
	EphemeralPortMax = 32767
)

// bindPort binds proto (tcp or udp) on host:port and returns the socket and
// the port bound.
func bindPort(proto, host string, port uint32) (io.Closer, uint32, error) {
	addr := net.JoinHostPort(host, strconv.FormatUint(uint64(port), 10))
	if proto == "udp" {
		c, err := net.ListenPacket("udp", addr)
		if err != nil {
			return nil, 0, err
		}
		return c, uint32(c.LocalAddr().(*net.UDPAddr).Port), nil
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, 0, err
	}
	return l, uint32(l.Addr().(*net.TCPAddr).Port), nil
}

// kill ends a service's process at once (SIGKILL to its group) and waits
// until it no longer runs. A service that does not run is left alone.
func (r *Runtime) kill(ctx context.Context, key runtime.Key, st *serviceState) error {
	p := st.Process
	if p == nil || !alive(p.PID, p.StartTicks) {
		return nil
	}
	if err := signalService(p, syscall.SIGKILL); err != nil {
		return fmt.Errorf("kill pid %d: %w", p.PID, err)
	}
	if err := r.waitDead(ctx, r.statePath(key, st.Service), p); err != nil {
		return err
	}
	killLeftovers(p.PID)
	return nil
}
