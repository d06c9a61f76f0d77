// Package docker is the runtime.Runtime that runs each service of a job
// instance as a Docker container, through the Docker Engine API client.
//
// Contract, beyond the one runtime.Runtime states:
//
//   - Images are pulled by service, as its pull policy says
//     (Service.pull_policy): IF_NOT_PRESENT (the default) pulls an image the
//     engine does not hold, ALWAYS pulls before every creation of the
//     service's container, NEVER fails Prepare with runtime.ErrImageNotFound
//     when the image is absent. Pulls go through the engine with the
//     registry credentials of the worker's Docker config
//     (Config.DockerConfig: auths, credsStore, credHelpers), read at every
//     pull; a failed pull fails Prepare with runtime.ErrImagePull and the
//     registry's answer. Every image is made present before anything is
//     created, so a failure changes nothing. Progress goes to
//     InstanceSpec.PullProgress.
//   - Prepare creates one container per service, not started, named
//     norsk-<cluster>-<node>-<job>-<role>-<service> (<cluster> is the first
//     12 characters of the cluster id; norsk-<node>-<job>-<role>-<service>
//     while the runtime knows none; sanitised for Docker, with a short hash
//     suffix when sanitising changed the name or it is long) and labelled
//     with the runtime.Label* labels. The containers have no Docker restart
//     policy: the worker's supervisor restarts services itself.
//   - The service's command becomes the container's entrypoint, its args the
//     container's command; the environment is the service's env, then the
//     instance's Env, then NORSK_SERVICE.
//   - Ports: an ephemeral mapping lets the engine choose the host port, a
//     range publishes "min-max", a specific one that port; protocol ANY and
//     TCP are tcp, UDP is udp; host_address is the host IP bound, and
//     without one Config.PublishHost (every address when that is empty).
//   - Every container has host.docker.internal in its /etc/hosts, naming
//     the engine's host (its host-gateway address), as on Docker Desktop
//     (HostGateway); engines before 20.10 do not know host-gateway.
//   - Volume mounts whose source starts with "/" are bind mounts; any other
//     source names a job-scoped volume, norsk-<job>-<name>, created when
//     absent and kept by Remove (volumes belong to the job, not to one
//     instance; RemoveJobVolumes removes them when the job is gone).
//   - The runtime keeps no state of its own: everything it needs is in the
//     engine (names and labels), so a new Runtime over the same engine and
//     node adopts the containers an earlier worker process created.
//
// Several workers may share one engine: each only sees the containers
// labelled with its own node id and its own cluster id, or with its node id
// and no cluster id (made before cluster ids; their names are the old ones).
// Another cluster's containers of the same node name are never listed,
// stopped or removed. Named volumes are labelled with the cluster too, but
// their names do not carry it: two clusters on one engine with a job of the
// same id share its named volumes.
package docker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sort"
	"strconv"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"
	"github.com/docker/go-connections/nat"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/internal/runtime"
)

// DefaultStopGrace is the grace StopService gives when it is given none.
const DefaultStopGrace = 10 * time.Second

// Config configures a Runtime.
type Config struct {
	// NodeID is the node this runtime runs services for (required). It
	// labels every container, so that several nodes can share one engine.
	NodeID string
	// ClusterID is the cluster the node belongs to ("" while the worker
	// knows none; see runtime.Runtime.SetClusterID).
	ClusterID string
	// Client is the engine client to use. When nil, New makes one from the
	// environment (DOCKER_HOST, …) with API version negotiation, and Close
	// closes it; a given client is left open.
	Client *client.Client
	// Logger receives the runtime's logs; nil means slog.Default().
	Logger *slog.Logger
	// AdvertiseHost is the host put in resolved port URLs for ports
	// published on every address (0.0.0.0, ::, or none given): the address
	// at which clients reach the node. Empty means "127.0.0.1".
	AdvertiseHost string
	// PublishHost is the host IP a port mapping without a host address is
	// published on: "127.0.0.1" keeps every job port on loopback (dev).
	// Empty means every address, the engine's default.
	PublishHost string
	// DockerConfig is the directory of the Docker CLI config whose registry
	// credentials pulls use; "" means $DOCKER_CONFIG, else ~/.docker
	// (DockerConfigDir).
	DockerConfig string
}

// Runtime runs services as Docker containers. It is safe for concurrent use.
type Runtime struct {
	nodeID     string
	cluster    runtime.ClusterID
	cli        *client.Client
	ownsClient bool
	log        *slog.Logger
	advertise  string
	// publishHost is Config.PublishHost.
	publishHost string
	// dockerConfig is the Docker config directory pulls read.
	dockerConfig string
}

var _ runtime.Runtime = (*Runtime)(nil)

// New returns a Runtime for cfg.NodeID once the engine has answered a ping;
// when no engine answers it fails with an error that says where it looked.
func New(ctx context.Context, cfg Config) (*Runtime, error) {
	if cfg.NodeID == "" {
		return nil, errors.New("docker runtime: NodeID is required")
	}
	r := &Runtime{
		nodeID:    cfg.NodeID,
		cli:       cfg.Client,
		log:       cfg.Logger,
		advertise: cfg.AdvertiseHost,
		// A mapping's own host address wins (planService).
		publishHost: cfg.PublishHost,

		dockerConfig: cfg.DockerConfig,
	}
	if r.dockerConfig == "" {
		r.dockerConfig = DockerConfigDir()
	}
	if r.log == nil {
		r.log = slog.Default()
	}
	r.log = r.log.With("runtime", "docker", "node", cfg.NodeID)
	if err := r.cluster.Set(cfg.ClusterID); err != nil {
		return nil, fmt.Errorf("docker runtime: %w", err)
	}
	if r.publishHost != "" && net.ParseIP(r.publishHost) == nil {
		return nil, fmt.Errorf("docker runtime: PublishHost %q is not an IP address", r.publishHost)
	}
	if r.advertise == "" {
		r.advertise = "127.0.0.1"
	}
	if r.cli == nil {
		cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
		if err != nil {
			return nil, fmt.Errorf("docker runtime: make engine client: %w", err)
		}
		r.cli, r.ownsClient = cli, true
	}
	if _, err := r.cli.Ping(ctx); err != nil {
		if r.ownsClient {
			_ = r.cli.Close()
		}
		return nil, fmt.Errorf("docker runtime: no Docker engine answers at %s: %w", r.cli.DaemonHost(), err)
	}
	return r, nil
}

// Name returns "docker".
func (r *Runtime) Name() string { return "docker" }

// Client returns the engine client the runtime uses.
func (r *Runtime) Client() *client.Client { return r.cli }

// SetClusterID sets the runtime's cluster id once (runtime.Runtime).
func (r *Runtime) SetClusterID(id string) error {
	if err := r.cluster.Set(id); err != nil {
		return fmt.Errorf("docker runtime: %w", err)
	}
	return nil
}

// mine reports whether a container's (or volume's) labels make it one this
// runtime sees: its node's, of its cluster or of none.
func (r *Runtime) mine(labels map[string]string) bool {
	return labels[runtime.LabelNode] == r.nodeID && r.cluster.Owns(labels[runtime.LabelCluster])
}

// Close closes the engine client when New made it. Containers keep running.
func (r *Runtime) Close() error {
	if r.ownsClient {
		return r.cli.Close()
	}
	return nil
}

// List returns every container labelled with this runtime's node and its
// cluster (or no cluster), in every state, ordered by job, role and
// service.
func (r *Runtime) List(ctx context.Context) ([]runtime.ServiceStatus, error) {
	cs, err := r.cli.ContainerList(ctx, container.ListOptions{
		All:     true,
		Filters: filters.NewArgs(filters.Arg("label", runtime.LabelNode+"="+r.nodeID)),
	})
	if err != nil {
		return nil, fmt.Errorf("list containers of node %s: %w", r.nodeID, err)
	}
	out := make([]runtime.ServiceStatus, 0, len(cs))
	for _, c := range cs {
		if !r.mine(c.Labels) {
			continue // another cluster's
		}
		info, err := r.cli.ContainerInspect(ctx, c.ID)
		if cerrdefs.IsNotFound(err) {
			continue // removed since the listing
		}
		if err != nil {
			return nil, fmt.Errorf("list containers of node %s: inspect %s: %w", r.nodeID, c.ID, err)
		}
		out = append(out, r.status(info))
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

// status maps an inspected container to a ServiceStatus.
func (r *Runtime) status(c container.InspectResponse) runtime.ServiceStatus {
	var labels map[string]string
	if c.Config != nil {
		labels = c.Config.Labels
	}
	st := runtime.ServiceStatus{
		Key:         runtime.Key{JobID: labels[runtime.LabelJob], Role: labels[runtime.LabelRole]},
		Service:     labels[runtime.LabelService],
		ClusterID:   labels[runtime.LabelCluster],
		Token:       parseToken(labels[runtime.LabelToken]),
		RuntimeRole: labels[runtime.LabelRuntimeRole],
		Created:     true,
		ExitCode:    -1,
	}
	if c.ContainerJSONBase == nil || c.State == nil {
		return st
	}
	st.Running = c.State.Running
	if st.Running {
		st.PID = c.State.Pid
	}
	if c.State.Status == container.StateExited || c.State.Status == container.StateDead {
		st.ExitCode = c.State.ExitCode
	}
	if t, err := time.Parse(time.RFC3339Nano, c.State.StartedAt); err == nil && t.Year() > 1 {
		st.StartedAt = t
	}
	if st.Running && c.NetworkSettings != nil {
		st.Ports = r.resolvedPorts(c.NetworkSettings.Ports)
	}
	return st
}

// resolvedPorts turns the engine's port bindings into ResolvedPortMappings,
// one per (container port, protocol, host port): the engine reports a port
// published on every address once for IPv4 and once for IPv6.
func (r *Runtime) resolvedPorts(pm nat.PortMap) []*managerv1.ResolvedPortMapping {
	var out []*managerv1.ResolvedPortMapping
	ports := make([]nat.Port, 0, len(pm))
	for p := range pm {
		ports = append(ports, p)
	}
	sort.Slice(ports, func(i, j int) bool { return ports[i] < ports[j] })
	for _, p := range ports {
		proto := managerv1.Protocol_PROTOCOL_TCP
		if p.Proto() == "udp" {
			proto = managerv1.Protocol_PROTOCOL_UDP
		}
		// A port published on every address is bound once for IPv4 and once
		// for IPv6 — with different host ports, when the engine picks them.
		// Clients reach it through one: the IPv4 binding (or the first).
		bindings := append([]nat.PortBinding(nil), pm[p]...)
		sort.SliceStable(bindings, func(i, j int) bool { return isV4(bindings[i].HostIP) && !isV4(bindings[j].HostIP) })
		seenAny := false
		seenHost := map[string]bool{}
		for _, b := range bindings {
			published, err := strconv.ParseUint(b.HostPort, 10, 16)
			if err != nil || published == 0 {
				continue
			}
			if unspecified(b.HostIP) {
				if seenAny {
					continue
				}
				seenAny = true
			} else {
				if seenHost[b.HostIP+"|"+b.HostPort] {
					continue
				}
				seenHost[b.HostIP+"|"+b.HostPort] = true
			}
			out = append(out, &managerv1.ResolvedPortMapping{
				Url:       net.JoinHostPort(r.urlHost(b.HostIP), b.HostPort),
				Target:    uint32(p.Int()),
				Published: uint32(published),
				Protocol:  proto,
			})
		}
	}
	return out
}

func unspecified(hostIP string) bool {
	ip := net.ParseIP(hostIP)
	return hostIP == "" || (ip != nil && ip.IsUnspecified())
}

func isV4(hostIP string) bool {
	ip := net.ParseIP(hostIP)
	return hostIP == "" || (ip != nil && ip.To4() != nil)
}

// urlHost is the host clients use to reach a port bound on hostIP.
func (r *Runtime) urlHost(hostIP string) string {
	switch hostIP {
	case "", "0.0.0.0", "::":
		return r.advertise
	}
	return hostIP
}

func parseToken(s string) uint64 {
	t, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0
	}
	return t
}

// keyFilter selects the containers of one instance on this node.
func (r *Runtime) keyFilter(key runtime.Key) filters.Args {
	return filters.NewArgs(
		filters.Arg("label", runtime.LabelNode+"="+r.nodeID),
		filters.Arg("label", runtime.LabelJob+"="+key.JobID),
		filters.Arg("label", runtime.LabelRole+"="+key.Role),
	)
}

// instanceContainers returns the containers of one instance on this node.
func (r *Runtime) instanceContainers(ctx context.Context, key runtime.Key) ([]container.Summary, error) {
	cs, err := r.cli.ContainerList(ctx, container.ListOptions{All: true, Filters: r.keyFilter(key)})
	if err != nil {
		return nil, fmt.Errorf("list containers of %s: %w", key, err)
	}
	// The engine matches label values exactly, but be strict anyway: a
	// container belongs to the key only if every identity label matches,
	// and to this runtime only if it is of its cluster (or of none).
	out := cs[:0]
	for _, c := range cs {
		if r.mine(c.Labels) && c.Labels[runtime.LabelJob] == key.JobID && c.Labels[runtime.LabelRole] == key.Role {
			out = append(out, c)
		}
	}
	return out, nil
}

// inspectService finds a service's container by its deterministic name —
// its cluster's, else the name it had before cluster ids — and checks that
// it is the service's (names are sanitised, so two services could in
// principle share one) and this runtime's. A missing container is
// runtime.ErrNotFound.
func (r *Runtime) inspectService(ctx context.Context, key runtime.Key, service string) (container.InspectResponse, error) {
	cluster := r.cluster.Get()
	name := ContainerName(cluster, r.nodeID, key, service)
	c, err := r.cli.ContainerInspect(ctx, name)
	if cerrdefs.IsNotFound(err) && cluster != "" {
		name = ContainerName("", r.nodeID, key, service)
		c, err = r.cli.ContainerInspect(ctx, name)
	}
	if cerrdefs.IsNotFound(err) {
		return c, fmt.Errorf("service %s/%s on node %s: %w", key, service, r.nodeID, runtime.ErrNotFound)
	}
	if err != nil {
		return c, fmt.Errorf("inspect container %s: %w", name, err)
	}
	if !r.owns(c, key, service) {
		return c, fmt.Errorf("container %s belongs to another service (labels %v), not %s/%s on node %s",
			name, labelsOf(c), key, service, r.nodeID)
	}
	return c, nil
}

func (r *Runtime) owns(c container.InspectResponse, key runtime.Key, service string) bool {
	l := labelsOf(c)
	return r.mine(l) && l[runtime.LabelJob] == key.JobID &&
		l[runtime.LabelRole] == key.Role && l[runtime.LabelService] == service
}

func labelsOf(c container.InspectResponse) map[string]string {
	if c.Config == nil {
		return nil
	}
	return c.Config.Labels
}
