// Package fake is an in-memory runtime.Runtime for tests: worker and
// cluster tests that need services to start, exit, stop and be adopted, but
// not real processes or containers. It passes the runtimetest conformance
// suite, as the process and docker runtimes do, so what a test proves over
// it holds for them too; a test about real behaviour (signals reaching a
// process, a container's mounts) keeps a real runtime.
//
// A Host is the machine: its services outlive every Runtime made over it,
// as processes outlive a worker, so a new Runtime over the same Host (a
// restarted worker) lists and adopts them. A service runs a program read
// from its command's arguments after the first, then its args, in the test
// program's flags (runtimetest.Behaviour.Args): -exit N, -run D,
// -ignore-term, -listen P. A program with -listen answers TCP connections on
// its published port with "testprog\n"; every published port is bound on
// 127.0.0.1 while the service runs. A service needs a command or an image;
// Image names nothing real (the Host holds every image). Runtime.Exit makes
// a running program exit by itself, for a test that needs a crash at a
// chosen moment.
//
// The package is for tests only: no configuration of the product names it
// (the worker takes it through Config.RuntimeImpl, which only tests set).
package fake

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/norsk-go/norsk-manager/internal/runtime"
)

// Host is the in-memory machine services run on. The zero value is not
// usable; make one with NewHost. Safe for concurrent use.
type Host struct {
	mu       sync.Mutex
	services map[serviceID]*service
}

// serviceID names a service on a Host.
type serviceID struct {
	node    string
	key     runtime.Key
	service string
}

// NewHost returns a Host that runs nothing yet.
func NewHost() *Host {
	return &Host{services: map[serviceID]*service{}}
}

// Runtime is one worker's view of a Host: the services of its node and
// cluster. Close leaves them running.
type Runtime struct {
	host    *Host
	nodeID  string
	cluster runtime.ClusterID
}

var _ runtime.Runtime = (*Runtime)(nil)

// New returns a runtime for nodeID over h.
func (h *Host) New(nodeID string) *Runtime {
	return &Runtime{host: h, nodeID: nodeID}
}

// Name is "fake".
func (r *Runtime) Name() string { return "fake" }

// SetClusterID sets the runtime's cluster once (runtime.Runtime).
func (r *Runtime) SetClusterID(id string) error { return r.cluster.Set(id) }

// Close does nothing: the services keep running on the Host.
func (r *Runtime) Close() error { return nil }

// visible reports whether s is one of this runtime's services: of its node,
// and of its cluster or of none. Call with the host's lock held.
func (r *Runtime) visible(s *service) bool {
	return s.node == r.nodeID && r.cluster.Owns(s.cluster)
}

// lookup returns the runtime's service key/name, or ErrNotFound. Call with
// the host's lock held.
func (r *Runtime) lookup(key runtime.Key, name string) (*service, error) {
	s := r.host.services[serviceID{r.nodeID, key, name}]
	if s == nil || !r.visible(s) {
		return nil, fmt.Errorf("service %s of %s: %w", name, key, runtime.ErrNotFound)
	}
	return s, nil
}

// List returns the node's services of the runtime's cluster and of none,
// sorted by key and service.
func (r *Runtime) List(ctx context.Context) ([]runtime.ServiceStatus, error) {
	r.host.mu.Lock()
	defer r.host.mu.Unlock()
	var out []runtime.ServiceStatus
	for _, s := range r.host.services {
		if r.visible(s) {
			out = append(out, s.status())
		}
	}
	sortStatuses(out)
	return out, nil
}

// Logs returns the last tail lines the service's program wrote: a line
// when it starts, is signalled and exits.
func (r *Runtime) Logs(ctx context.Context, key runtime.Key, name string, tail int) (string, error) {
	r.host.mu.Lock()
	defer r.host.mu.Unlock()
	s, err := r.lookup(key, name)
	if err != nil {
		return "", fmt.Errorf("logs: %w", err)
	}
	return runtime.TailLines(s.log.String(), tail), nil
}

// logf appends one line to the service's log. Call with the host's lock
// held.
func (s *service) logf(format string, args ...any) {
	if s.log.Len() > 64<<10 {
		rest := s.log.String()[s.log.Len()-32<<10:]
		s.log.Reset()
		s.log.WriteString(rest)
	}
	fmt.Fprintf(&s.log, "%s "+format+"\n", append([]any{time.Now().UTC().Format(time.RFC3339Nano)}, args...)...)
}

// service is one service on a Host.
type service struct {
	node, cluster string
	key           runtime.Key
	name          string
	token         uint64
	runtimeRole   string
	prog          program
	ports         []portSpec
	// run is the current or last run; nil until first started.
	run      *execution
	exitCode int
	log      strings.Builder
}

// status is what List says of s. Call with the host's lock held.
func (s *service) status() runtime.ServiceStatus {
	st := runtime.ServiceStatus{
		Key: s.key, Service: s.name, ClusterID: s.cluster, Token: s.token, RuntimeRole: s.runtimeRole,
		Created: true, ExitCode: -1,
	}
	if s.run == nil {
		return st
	}
	if s.run.running() {
		st.Running = true
		st.StartedAt = s.run.startedAt
		st.Ports = s.run.resolved()
		return st
	}
	st.ExitCode = s.exitCode
	st.StartedAt = s.run.startedAt
	return st
}
