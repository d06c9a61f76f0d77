// Package runtime defines the container runtime a worker runs job instances
// with, and the types the runtimes share. The implementations live in the
// sub-packages docker (the Docker Engine API) and process (host processes);
// runtimetest holds a conformance suite both must pass.
//
// A job instance, keyed by (job id, role), is a set of services. The runtime
// works one service at a time so that the worker's supervisor can apply
// dependsOn ordering and restart policies the same way for every runtime:
//
//	Prepare(instance)            create every service, start none (idempotent)
//	StartService / Wait          start one service; block until it exits
//	StopService                  stop one service with a grace period
//	Remove(instance)             remove every service and the instance's data
//	List                         every service this node's runtime holds, for
//	                             adoption after a worker restart
//
// Services outlive the worker process: a worker that restarts finds them with
// List, adopts them and waits on them again; nothing is restarted.
//
// This package imports nothing of the Manager's side.
package runtime

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
)

// Key identifies an instance on a node.
type Key struct {
	JobID string
	Role  string
}

// String renders the key as "job/role".
func (k Key) String() string { return k.JobID + "/" + k.Role }

// InstanceSpec is everything a runtime needs to create an instance.
type InstanceSpec struct {
	Key Key
	// NodeID is the node the instance runs on; runtimes label what they
	// create with it so that several workers can share one engine.
	NodeID string
	// Token is the fencing token of the instance's binding.
	Token uint64
	// RuntimeRole is the role the job is told (NORSK_RUNTIME_ROLE).
	RuntimeRole string
	// Job is the job's specification; Job.Services are created.
	Job *managerv1.Job
	// Env is added to every service's environment, after the service's own
	// env (so the worker's NORSK_* variables win).
	Env map[string]string
	// Mounts are host directories the worker makes visible in every
	// service (the job socket's). The docker runtime bind-mounts them; the
	// process runtime ignores them, as a host process sees the host's
	// files at their own paths.
	Mounts []Mount
	// PullProgress, when set, is told how the pulls Prepare makes go (the
	// docker runtime; see Images). It is called from Prepare's goroutine
	// and must not block.
	PullProgress func(PullProgress)
}

// Mount is a host directory bind-mounted into a container.
type Mount struct {
	// Source is the absolute host path, Target the absolute path inside
	// the container.
	Source, Target string
	ReadOnly       bool
}

// ServiceStatus is what a runtime knows of one service.
type ServiceStatus struct {
	Key     Key
	Service string
	// ClusterID is the cluster label the service carries: the runtime's
	// cluster id, or "" for a service made before cluster ids (or before
	// its worker learned its cluster's).
	ClusterID string
	// Token and RuntimeRole as given to Prepare (recovered from labels or
	// state files after a worker restart).
	Token       uint64
	RuntimeRole string
	// Created is true once the service exists (Prepare ran).
	Created bool
	// Running is true while the service's process or container runs.
	Running bool
	// ExitCode is the last exit code when the service has exited and the
	// code is known; -1 when it is not known.
	ExitCode  int
	StartedAt time.Time
	// PID is the service's main process id on the node while it runs (0
	// when not running or not known).
	PID int
	// Ports are the service's published ports while it runs (none while
	// it does not): the host port the runtime gave each port mapping of
	// the spec, with the URL clients reach it at. See
	// Runtime.StartService for what a caller can rely on.
	Ports []*managerv1.ResolvedPortMapping
}

// Runtime runs the services of job instances on one node.
//
// Every method may be called concurrently for different keys; calls for the
// same key are serialised by the caller (the worker's supervisor). Methods are
// idempotent where noted, so a worker that crashed half way can simply repeat
// a step.
type Runtime interface {
	// Name is "docker" or "process".
	Name() string

	// Prepare creates every service of the instance without starting any.
	// Idempotent: services that already exist for the same key and token
	// are left as they are. Services of the key that carry an older token
	// belong to a superseded binding: they are removed (killed if running)
	// and created anew. Services that carry a newer token make Prepare fail
	// with ErrSuperseded and change nothing. A missing image is
	// ErrImageNotFound (the runtime never pulls); a spec the runtime cannot
	// run is ErrInvalidSpec.
	Prepare(ctx context.Context, spec InstanceSpec) error

	// StartService starts one prepared service and returns its status.
	// Starting a running service returns its status. Starting a service
	// that has exited starts it again (the supervisor's restart). An
	// unknown service is ErrNotFound.
	//
	// Ports. When the status returned is Running, its Ports are resolved:
	// the host port of each of the spec's port mappings, the same List
	// reports for as long as this run lasts. The runtime gives a host port
	// to one service at a time: no other service of the node's runtime,
	// nor of another runtime drawing from the same pool (the engine's
	// containers; the process runtimes sharing a port registry), is given
	// it while the service holds it. It does not promise that the service
	// accepts connections there yet: the docker runtime's engine publishes
	// the port at start, but a process runtime's service binds its port
	// itself once it runs, and a process foreign to the runtimes may have
	// bound it first. A service that no longer runs when the status is
	// taken (it exited at once: it could not bind its port, say) is
	// returned without an error, not Running and without Ports; Wait
	// returns its exit code and the supervisor's restart policy applies.
	StartService(ctx context.Context, key Key, service string) (ServiceStatus, error)

	// Wait blocks until the service is not running (it exited, or was
	// stopped) or ctx ends, and returns its exit code (-1 if unknown). It
	// works for services started by an earlier worker process too. A
	// service killed by a signal exits with 128+signal (143 for SIGTERM,
	// 137 for SIGKILL), as a shell and Docker report it. A service that was
	// never started returns -1 at once. An unknown service is ErrNotFound.
	Wait(ctx context.Context, key Key, service string) (int, error)

	// StopService stops a running service: a polite signal (SIGTERM), then
	// a kill once grace has passed (grace 0 means the default of 10 s). It
	// returns once the service no longer runs. Stopping a service that is
	// not running is not an error; an unknown service is ErrNotFound.
	StopService(ctx context.Context, key Key, service string, grace time.Duration) error

	// Remove stops (without grace) and removes every service of the
	// instance and the runtime's data for it. The job's named volumes are
	// kept: they belong to the job, which may have other instances on the
	// node. Removing an absent instance is not an error.
	Remove(ctx context.Context, key Key) error

	// Logs returns the last tail lines (at most 64 KiB) a service wrote to
	// its stdout and stderr, for an operator reading why it failed. An
	// unknown service is ErrNotFound.
	Logs(ctx context.Context, key Key, service string, tail int) (string, error)

	// List returns every service the runtime holds for this node: those
	// labelled with its cluster id and those labelled with none.
	List(ctx context.Context) ([]ServiceStatus, error)

	// SetClusterID tells the runtime the cluster it runs services for (the
	// Manager's store's cluster id). Prepare labels everything it creates
	// with it (LabelCluster), and every method sees and acts on only the
	// node's services that carry it or carry no cluster label at all (made
	// before cluster ids, or before the worker learned its cluster's):
	// another cluster's services on the same engine or directory, under the
	// same node name, are never listed, stopped or removed. "" leaves the
	// cluster as it is (a runtime that knows none sees only unlabelled
	// services); once set, another id is refused — a runtime belongs to one
	// cluster.
	SetClusterID(id string) error

	// Close releases the runtime's resources. Services keep running.
	Close() error
}

// ClusterID is a runtime's cluster id, settable once from "" (see
// Runtime.SetClusterID); the zero value knows none. Safe for concurrent
// use.
type ClusterID struct {
	mu sync.Mutex
	id string
}

// Get returns the cluster id ("" while none is known).
func (c *ClusterID) Get() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.id
}

// Set sets the cluster id once: "" and the same id change nothing, another
// id than the one set is an error.
func (c *ClusterID) Set(id string) error {
	if id == "" {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch c.id {
	case "":
		c.id = id
		return nil
	case id:
		return nil
	}
	return fmt.Errorf("runtime belongs to cluster %s; refusing cluster %s", c.id, id)
}

// Owns reports whether a service labelled with cluster (its LabelCluster,
// "" when absent) is one a runtime of cluster c may see and act on: one of
// c's, or one that carries no cluster label.
func (c *ClusterID) Owns(cluster string) bool {
	return cluster == "" || cluster == c.Get()
}

// Errors a runtime returns, matched with errors.Is.
var (
	// ErrImageNotFound: the image is not present on the node.
	ErrImageNotFound = errors.New("image not present on this node")
	// ErrNotFound: no such instance or service.
	ErrNotFound = errors.New("no such service")
	// ErrInvalidSpec: the runtime cannot run the spec as given (e.g. the
	// process runtime and a service without a command).
	ErrInvalidSpec = errors.New("invalid service spec for this runtime")
	// ErrSuperseded: the instance on the node carries a newer fencing
	// token than the one given; the older binding must not run.
	ErrSuperseded = errors.New("instance superseded by a newer fencing token")
	// ErrImagePull: the runtime tried to pull an image and the registry (or
	// the engine) refused; the error says which image and the answer.
	ErrImagePull = errors.New("image pull failed")
)

// Standard labels and environment variables.
const (
	LabelNode        = "norsk.manager/node"
	LabelJob         = "norsk.manager/job"
	LabelRole        = "norsk.manager/role"
	LabelService     = "norsk.manager/service"
	LabelToken       = "norsk.manager/token"
	LabelRuntimeRole = "norsk.manager/runtime-role"
	// LabelCluster is the cluster id of the Manager whose worker made the
	// service (absent on services made before cluster ids).
	LabelCluster = "norsk.manager/cluster"

	EnvJobID       = "NORSK_JOB_ID"
	EnvRole        = "NORSK_ROLE"
	EnvRuntimeRole = "NORSK_RUNTIME_ROLE"
	EnvNodeID      = "NORSK_NODE_ID"
	EnvToken       = "NORSK_FENCING_TOKEN"
	EnvService     = "NORSK_SERVICE"
	// EnvMigrationID is set when the instance is the target of a migration.
	EnvMigrationID = "NORSK_MIGRATION_ID"
)

// TailLines returns the last n lines of s (all of s when n <= 0).
func TailLines(s string, n int) string {
	if n <= 0 {
		return s
	}
	s = strings.TrimRight(s, "\n")
	i := len(s)
	for k := 0; k < n; k++ {
		j := strings.LastIndexByte(s[:i], '\n')
		if j < 0 {
			return s
		}
		i = j
	}
	return s[i+1:]
}
