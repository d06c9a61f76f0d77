package fake

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"time"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/internal/runtime"
)

// validName is what a service or volume name may be (as the process
// runtime has it).
var validName = regexp.MustCompile(`^[A-Za-z0-9._-]{1,128}$`)

// Prepare creates every service of spec without starting any; see
// runtime.Runtime for idempotency and fencing.
func (r *Runtime) Prepare(ctx context.Context, spec runtime.InstanceSpec) error {
	key := spec.Key
	if key.JobID == "" || spec.Job == nil {
		return fmt.Errorf("prepare %s: no job id or job: %w", key, runtime.ErrInvalidSpec)
	}
	if spec.NodeID != "" && spec.NodeID != r.nodeID {
		return fmt.Errorf("prepare %s: spec is for node %s, this runtime runs node %s: %w", key, spec.NodeID, r.nodeID, runtime.ErrInvalidSpec)
	}
	made := make([]*service, 0, len(spec.Job.GetServices()))
	seen := map[string]bool{}
	for _, svc := range spec.Job.GetServices() {
		s, err := r.newService(spec, svc)
		if err != nil {
			return fmt.Errorf("prepare %s: %w", key, err)
		}
		if seen[s.name] {
			return fmt.Errorf("prepare %s: service %q appears twice: %w", key, s.name, runtime.ErrInvalidSpec)
		}
		seen[s.name] = true
		made = append(made, s)
	}
	for _, v := range spec.Job.GetVolumes() {
		if !validName.MatchString(v) {
			return fmt.Errorf("prepare %s: job volume %q: not 1-128 characters of [A-Za-z0-9._-]: %w", key, v, runtime.ErrInvalidSpec)
		}
	}

	h := r.host
	h.mu.Lock()
	defer h.mu.Unlock()
	current := map[string]bool{}
	var stale []*service
	for id, s := range h.services {
		if id.node != r.nodeID || id.key != key {
			continue
		}
		if !r.visible(s) {
			return fmt.Errorf("prepare %s: service %s belongs to cluster %q, not this runtime's; it is left alone", key, s.name, s.cluster)
		}
		switch {
		case s.token > spec.Token:
			return fmt.Errorf("prepare %s with token %d: service %s has token %d: %w", key, spec.Token, s.name, s.token, runtime.ErrSuperseded)
		case s.token < spec.Token:
			stale = append(stale, s)
		default:
			current[s.name] = true
		}
	}
	for _, s := range stale {
		h.remove(s)
	}
	for _, s := range made {
		if !current[s.name] {
			h.services[serviceID{r.nodeID, key, s.name}] = s
		}
	}
	return nil
}

// newService checks svc and makes its service (not yet on the Host);
// errors wrap runtime.ErrInvalidSpec.
func (r *Runtime) newService(spec runtime.InstanceSpec, svc *managerv1.Service) (*service, error) {
	name := svc.GetName()
	invalid := func(format string, args ...any) error {
		return fmt.Errorf("service %q: %s: %w", name, fmt.Sprintf(format, args...), runtime.ErrInvalidSpec)
	}
	if !validName.MatchString(name) {
		return nil, invalid("name is not 1-128 characters of [A-Za-z0-9._-]")
	}
	if (len(svc.GetCommand()) == 0 || svc.GetCommand()[0] == "") && svc.GetImage() == "" {
		return nil, invalid("neither a command nor an image")
	}
	prog, err := parseProgram(svc)
	if err != nil {
		return nil, invalid("program: %v", err)
	}
	s := &service{
		node: r.nodeID, cluster: r.cluster.Get(), key: spec.Key, name: name,
		token: spec.Token, runtimeRole: spec.RuntimeRole, prog: prog,
	}
	for _, pm := range svc.GetPorts() {
		if pm.GetContainerPort() == 0 || pm.GetContainerPort() > 65535 {
			return nil, invalid("container port %d out of range", pm.GetContainerPort())
		}
		ps := portSpec{target: pm.GetContainerPort(), proto: pm.GetProtocol()}
		switch hp := pm.GetHostPort().(type) {
		case *managerv1.PortMapping_Range:
			if lo, hi := hp.Range.GetMinPort(), hp.Range.GetMaxPort(); lo == 0 || hi > 65535 || lo > hi {
				return nil, invalid("port %d: host port range %d-%d is not valid", pm.GetContainerPort(), lo, hi)
			}
			ps.lo, ps.hi = hp.Range.GetMinPort(), hp.Range.GetMaxPort()
		case *managerv1.PortMapping_Specific:
			if hp.Specific == 0 || hp.Specific > 65535 {
				return nil, invalid("port %d: host port %d out of range", pm.GetContainerPort(), hp.Specific)
			}
			ps.lo, ps.hi = hp.Specific, hp.Specific
		}
		s.ports = append(s.ports, ps)
	}
	for _, vm := range svc.GetVolumeMounts() {
		if !strings.HasPrefix(vm.GetContainerPath(), "/") {
			return nil, invalid("volume mount %q: container path %q is not absolute", vm.GetSource(), vm.GetContainerPath())
		}
		if src := vm.GetSource(); !strings.HasPrefix(src, "/") && !validName.MatchString(src) {
			return nil, invalid("volume %q: not 1-128 characters of [A-Za-z0-9._-]", src)
		}
	}
	return s, nil
}

// StartService starts a prepared service (again, if it has exited); a
// running one is left as it is.
func (r *Runtime) StartService(ctx context.Context, key runtime.Key, name string) (runtime.ServiceStatus, error) {
	h := r.host
	h.mu.Lock()
	defer h.mu.Unlock()
	s, err := r.lookup(key, name)
	if err != nil {
		return runtime.ServiceStatus{}, fmt.Errorf("start: %w", err)
	}
	if s.run == nil || !s.run.running() {
		if err := h.start(s); err != nil {
			return runtime.ServiceStatus{}, err
		}
	}
	return s.status(), nil
}

// Wait blocks until the service does not run, or ctx ends, and returns its
// exit code (-1 for a service never started).
func (r *Runtime) Wait(ctx context.Context, key runtime.Key, name string) (int, error) {
	h := r.host
	h.mu.Lock()
	s, err := r.lookup(key, name)
	if err != nil {
		h.mu.Unlock()
		return -1, fmt.Errorf("wait: %w", err)
	}
	e := s.run
	h.mu.Unlock()
	if e == nil {
		return -1, nil
	}
	select {
	case <-e.done:
	case <-ctx.Done():
		return -1, fmt.Errorf("wait for %s of %s: %w", name, key, ctx.Err())
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if s.run != e { // started again since: this run's end is what was waited for
		return -1, nil
	}
	return s.exitCode, nil
}

// StopService signals the program (SIGTERM: exit 143, unless it ignores
// it) and kills it (137) once grace (0: 10 s) has passed; it returns when
// the service no longer runs.
func (r *Runtime) StopService(ctx context.Context, key runtime.Key, name string, grace time.Duration) error {
	if grace <= 0 {
		grace = 10 * time.Second
	}
	h := r.host
	h.mu.Lock()
	s, err := r.lookup(key, name)
	if err != nil {
		h.mu.Unlock()
		return fmt.Errorf("stop: %w", err)
	}
	e := s.run
	if e == nil || !e.running() {
		h.mu.Unlock()
		return nil
	}
	if !s.prog.ignoreTerm {
		h.exit(s, e, 143, "terminated")
		h.mu.Unlock()
		return nil
	}
	s.logf("ignoring SIGTERM")
	h.mu.Unlock()
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-e.done:
		return nil
	case <-t.C:
	case <-ctx.Done():
		return fmt.Errorf("stop %s of %s: %w", name, key, ctx.Err())
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.exit(s, e, 137, "killed")
	return nil
}

// Exit makes the running program of the service exit by itself with code,
// as a crash would. A service not running is left as it is; an unknown one
// is ErrNotFound.
func (r *Runtime) Exit(key runtime.Key, name string, code int) error {
	h := r.host
	h.mu.Lock()
	defer h.mu.Unlock()
	s, err := r.lookup(key, name)
	if err != nil {
		return fmt.Errorf("exit: %w", err)
	}
	if s.run != nil {
		h.exit(s, s.run, code, "exited")
	}
	return nil
}

// Remove kills and removes every service of the instance; an absent one
// is not an error.
func (r *Runtime) Remove(ctx context.Context, key runtime.Key) error {
	h := r.host
	h.mu.Lock()
	defer h.mu.Unlock()
	for id, s := range h.services {
		if id.node == r.nodeID && id.key == key && r.visible(s) {
			h.remove(s)
		}
	}
	return nil
}

// remove kills s (137) and forgets it. Call with the host's lock held.
func (h *Host) remove(s *service) {
	if s.run != nil {
		h.exit(s, s.run, 137, "killed")
	}
	delete(h.services, serviceID{s.node, s.key, s.name})
}

// Close kills every service on the Host and forgets them: a test's
// clean-up, so that no port stays bound.
func (h *Host) Close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, s := range h.services {
		h.remove(s)
	}
}
