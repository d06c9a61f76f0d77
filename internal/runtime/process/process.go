// Package process is the runtime.Runtime that runs each service of a job
// instance as a host process: for machines without Docker, and for fast
// tests. The service's image is ignored; its command is what runs.
//
// # What a service gets
//
// command[0] is the executable (required: a service without a command is
// runtime.ErrInvalidSpec; a name without a slash is looked up in the
// worker's PATH at Prepare), followed by command[1:] and then args. It runs
// in working_dir (relative to the instance directory when relative; the
// instance directory when empty), with stdin from /dev/null and stdout and
// stderr appended to <service>.log in the instance directory.
//
// Its environment is, in this order (later wins): PATH and HOME of the
// worker; the service's env; the instance's Env (the worker's NORSK_*
// variables); the variables below, which stand in for what a container
// runtime would do with ports and mounts; and NORSK_SERVICE.
//
//	NORSK_PORT_<containerPort>=<hostPort>
//	    one per port mapping. There is no port translation on the host: the
//	    service must listen on hostPort itself. Prepare allocates the host
//	    port: an ephemeral mapping gets a free port drawn at random from
//	    EphemeralPortMin-EphemeralPortMax, a range the first free port in
//	    it, a specific one that port as given. Free means bindable with the
//	    mapping's protocol (ANY and TCP: tcp, UDP: udp) on its host_address,
//	    and not allocated to a service of any process runtime on the host
//	    (see Host ports).
//	NORSK_VOLUME_<NAME>=<dir>
//	    one per named volume of the job (job.volumes, and every volume mount
//	    whose source does not start with "/"). NAME is the volume name in
//	    upper case, every character other than A-Z and 0-9 replaced by '_'.
//	    The directory is <Dir>/volumes/<job>/<name>, shared by every
//	    instance of the job on the node and kept by Remove (the volume
//	    belongs to the job; see RemoveJobVolumes).
//	NORSK_MOUNT_<PATH>=<dir>
//	    one per volume mount: the host directory that stands for the
//	    container path, the source itself for a bind mount (source starting
//	    with "/") or the volume's directory. PATH is the container path in
//	    upper case, every character other than A-Z and 0-9 replaced by '_',
//	    with leading and trailing '_' trimmed ("/data/in" → DATA_IN; "/" →
//	    ROOT). read_only cannot be enforced on a host process.
//
// shm_size_bytes and cpu_set are ignored.
//
// # Host ports
//
// A service's host port is allocated at Prepare and bound by the service
// itself once it runs; in between nobody holds it, so that a bind check
// alone would find it free. What holds it is the state file: a port is the
// service's from Prepare until its instance is removed (or prepared anew
// with a newer token), across restarts of the service and of the worker.
// For that to hold between runtimes over different directories (two workers
// on one host, the nodes of a test), they share a port registry
// (Config.PortRegistry, by default DefaultPortRegistry(): one per user of
// the host): every runtime registers its directory there, and Prepare
// allocates under the registry's lock, counting as taken every port a state
// file of any registered directory holds. Runtimes given different
// registries, and processes that are not process runtimes, are not held
// off. StartService therefore checks that a service's ports can still be
// bound just before it starts the process, and allocates an ephemeral or
// range port that cannot anew (as a container engine chooses such a port
// anew at every start); a specific port is left as given. A port taken in
// the moment between that check and the service's bind is not seen: the
// service fails to bind it, typically exits, and the supervisor restarts
// it, which checks again.
//
// # State and adoption
//
// Prepare writes a directory per instance under <Dir>/instances, with a JSON
// state file per service (the node and cluster ids, the spec, token, runtime
// role, allocated ports, the argv and environment, and once started the pid
// and start time). The runtime sees and acts on only the state files of its
// node that carry its cluster id or none (written before cluster ids): an
// instance directory of another cluster is never listed, started, stopped
// or removed, and Prepare of its key is refused. Every
// write is atomic (temp file, fsync, rename, fsync of the directory) and made
// under an flock of the instance's lock file, so that two runtimes over the
// same directory (a worker and its successor) never tear a file.
//
// Processes are started in a session of their own (setsid), so a worker that
// exits or restarts leaves them running; they are stopped by signalling their
// process group. A state file records the pid and the process start time
// (field 22 of /proc/<pid>/stat): a later worker process adopts the service
// only while a process with that pid and that start time lives, so a reused
// pid is never mistaken for the service. Wait on a process this runtime
// started knows its exit code (128+signal when a signal killed it) and
// records it in the state file; Wait on an adopted process polls /proc and
// returns -1 unless a state file recorded the code.
//
// This package needs Linux (/proc).
package process

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"time"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/internal/runtime"
)

// DefaultStopGrace is the grace StopService gives when it is given none.
const DefaultStopGrace = 10 * time.Second

// pollInterval is how often an adopted process is checked in /proc.
const pollInterval = 200 * time.Millisecond

// Config configures a Runtime.
type Config struct {
	// NodeID is the node this runtime runs services for (required). It is
	// recorded in every state file; List shows only this node's services.
	NodeID string
	// ClusterID is the cluster the node belongs to, recorded in every state
	// file ("" while the worker knows none; see
	// runtime.Runtime.SetClusterID).
	ClusterID string
	// Dir is the state directory (required): instance directories, logs
	// and job volumes live under it. It belongs to one node; a worker's
	// successor must be given the same directory to adopt its services.
	Dir string
	// Logger receives the runtime's logs; nil means slog.Default().
	Logger *slog.Logger
	// AdvertiseHost is the host put in resolved port URLs for ports bound
	// on every address: the address at which clients reach the node.
	// Empty means "127.0.0.1".
	AdvertiseHost string
	// CommandDir is what a relative executable path (a command[0] with a
	// slash, like "./build/hello") is resolved against: the directory the
	// operator started the worker in, by default (os.Getwd at New). A
	// relative working_dir is still relative to the instance directory.
	CommandDir string
	// PortRegistry is the directory the host's process runtimes share to
	// allocate host ports from one pool (see "Host ports" in the package
	// comment). Empty means DefaultPortRegistry(). Runtimes that are given
	// different registries may give one port to two services.
	PortRegistry string
}

// Runtime runs services as host processes. It is safe for concurrent use.
type Runtime struct {
	commandDir string
	nodeID     string
	cluster    runtime.ClusterID
	dir        string
	log        *slog.Logger
	advertise  string

	ports   *portRegistry
	allocMu sync.Mutex // serialises this runtime's port allocations (Prepare, StartService) before the registry's flock

	mu       sync.Mutex
	children map[string]*child // by state file path: processes this runtime started
}

// child is a process this runtime started and reaps.
type child struct {
	pid   int
	ticks uint64
	// exited is closed once the process is reaped and code is set;
	// recorded once the code is in the state file too (or cannot be).
	exited   chan struct{}
	recorded chan struct{}
	code     int
}

var _ runtime.Runtime = (*Runtime)(nil)

// New returns a Runtime over cfg.Dir, creating the directory if needed.
func New(cfg Config) (*Runtime, error) {
	if cfg.NodeID == "" {
		return nil, errors.New("process runtime: NodeID is required")
	}
	if cfg.Dir == "" {
		return nil, errors.New("process runtime: Dir is required")
	}
	dir, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("process runtime: state directory: %w", err)
	}
	for _, d := range []string{dir, filepath.Join(dir, "instances"), filepath.Join(dir, "volumes")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("process runtime: state directory: %w", err)
		}
	}
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		return nil, fmt.Errorf("process runtime: needs /proc: %w", err)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	adv := cfg.AdvertiseHost
	if adv == "" {
		adv = "127.0.0.1"
	}
	cmdDir := cfg.CommandDir
	if cmdDir == "" {
		if cmdDir, err = os.Getwd(); err != nil {
			return nil, fmt.Errorf("process runtime: working directory: %w", err)
		}
	}
	if cmdDir, err = filepath.Abs(cmdDir); err != nil {
		return nil, fmt.Errorf("process runtime: command directory: %w", err)
	}
	regDir := cfg.PortRegistry
	if regDir == "" {
		regDir = DefaultPortRegistry()
	}
	ports, err := openPortRegistry(regDir)
	if err != nil {
		return nil, fmt.Errorf("process runtime: %w", err)
	}
	// Registered at once: the ports of the services it already holds
	// (adopted after a restart) are taken before it prepares anything.
	if err := ports.register(dir); err != nil {
		return nil, fmt.Errorf("process runtime: %w", err)
	}
	r := &Runtime{
		commandDir: cmdDir,
		nodeID:     cfg.NodeID,
		dir:        dir,
		ports:      ports,
		log:        log.With("runtime", "process", "node", cfg.NodeID),
		advertise:  adv,
		children:   map[string]*child{},
	}
	if err := r.cluster.Set(cfg.ClusterID); err != nil {
		return nil, fmt.Errorf("process runtime: %w", err)
	}
	return r, nil
}

// SetClusterID sets the runtime's cluster id once (runtime.Runtime).
func (r *Runtime) SetClusterID(id string) error {
	if err := r.cluster.Set(id); err != nil {
		return fmt.Errorf("process runtime: %w", err)
	}
	return nil
}

// mine reports whether a state file is one this runtime sees: its node's,
// of its cluster or of none.
func (r *Runtime) mine(st *serviceState) bool {
	return st.NodeID == r.nodeID && r.cluster.Owns(st.ClusterID)
}

// Name returns "process".
func (r *Runtime) Name() string { return "process" }

// Dir returns the runtime's state directory.
func (r *Runtime) Dir() string { return r.dir }

// Close releases nothing but is here for the interface: services keep
// running. The goroutine that reaps each process this runtime started ends
// when that process exits, and then still records its exit code.
func (r *Runtime) Close() error { return nil }

// List reads every state file under the directory and returns this node's
// services of its cluster (or of none), ordered by job, role and service.
func (r *Runtime) List(ctx context.Context) ([]runtime.ServiceStatus, error) {
	states, err := r.allStates()
	if err != nil {
		return nil, fmt.Errorf("list services of node %s: %w", r.nodeID, err)
	}
	out := make([]runtime.ServiceStatus, 0, len(states))
	for _, st := range states {
		if !r.mine(st) {
			continue
		}
		out = append(out, r.status(st))
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Key.JobID != b.Key.JobID {
			return a.Key.JobID < b.Key.JobID
		}
		if a.Key.Role != b.Key.Role {
			return a.Key.Role < b.Key.Role
		}
		return a.Service < b.Service
	})
	return out, nil
}

// status maps a state file to a ServiceStatus, checking /proc for liveness.
func (r *Runtime) status(st *serviceState) runtime.ServiceStatus {
	s := runtime.ServiceStatus{
		Key:         runtime.Key{JobID: st.JobID, Role: st.Role},
		Service:     st.Service,
		ClusterID:   st.ClusterID,
		Token:       st.Token,
		RuntimeRole: st.RuntimeRole,
		Created:     true,
		ExitCode:    -1,
	}
	p := st.Process
	if p == nil {
		return s
	}
	s.StartedAt = p.StartedAt
	if alive(p.PID, p.StartTicks) {
		s.Running = true
		s.PID = p.PID
		s.Ports = r.resolved(st.Ports)
		return s
	}
	if p.ExitCode != nil {
		s.ExitCode = *p.ExitCode
	}
	return s
}

func (r *Runtime) resolved(ports []allocatedPort) []*managerv1.ResolvedPortMapping {
	out := make([]*managerv1.ResolvedPortMapping, 0, len(ports))
	for _, p := range ports {
		host := p.HostAddress
		switch host {
		case "", "0.0.0.0", "::":
			host = r.advertise
		}
		proto := managerv1.Protocol_PROTOCOL_TCP
		if p.Protocol == "udp" {
			proto = managerv1.Protocol_PROTOCOL_UDP
		}
		out = append(out, &managerv1.ResolvedPortMapping{
			Url:       net.JoinHostPort(host, strconv.FormatUint(uint64(p.HostPort), 10)),
			Target:    p.ContainerPort,
			Published: p.HostPort,
			Protocol:  proto,
		})
	}
	return out
}
