package docker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sort"
	"strconv"
	"strings"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/api/types/volume"
	"github.com/docker/go-connections/nat"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/internal/runtime"
)

// maxNameLen bounds container and volume names; longer ones are cut and get
// a hash suffix. Docker itself has no small limit, but humans read these.
const maxNameLen = 100

// ContainerName is the deterministic name of a service's container:
// norsk-<cluster>-<node>-<job>-<role>-<service>, where <cluster> is the
// first 12 characters of clusterID (without a cluster id, the name
// containers had before cluster ids: norsk-<node>-<job>-<role>-<service>),
// sanitised to Docker's name alphabet [a-zA-Z0-9_.-] ('@' and every other
// character become '_'). When sanitising changed the name, or it is longer
// than 100 characters, it is cut and ends in "-" plus 8 hex digits of a hash
// of the unsanitised name, so that distinct services keep distinct names.
// Two clusters with a node of the same name on one engine never share a
// name.
func ContainerName(clusterID, nodeID string, key runtime.Key, service string) string {
	prefix := "norsk-"
	if clusterID != "" {
		prefix += clusterID[:min(len(clusterID), clusterNameLen)] + "-"
	}
	return dockerName(prefix + nodeID + "-" + key.JobID + "-" + key.Role + "-" + service)
}

// clusterNameLen is how much of the cluster id a container name carries.
const clusterNameLen = 12

// VolumeName is the name of a job-scoped named volume on the engine:
// norsk-<job>-<name>, sanitised like ContainerName.
func VolumeName(jobID, name string) string {
	return dockerName("norsk-" + jobID + "-" + name)
}

func dockerName(raw string) string {
	var b strings.Builder
	for _, r := range raw {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_', r == '.', r == '-':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	s := b.String()
	if s == raw && len(s) <= maxNameLen {
		return s
	}
	sum := sha256.Sum256([]byte(raw))
	suffix := "-" + hex.EncodeToString(sum[:4])
	if len(s) > maxNameLen-len(suffix) {
		s = s[:maxNameLen-len(suffix)]
	}
	return s + suffix
}

// createPlan is everything ContainerCreate needs for one service, plus the
// named volumes that must exist first.
type createPlan struct {
	name    string
	config  *container.Config
	host    *container.HostConfig
	volumes []string // engine volume names
}

// HostGateway is the name every container is given for the machine it runs
// on (an /etc/hosts entry for the engine's host-gateway address), the name
// Docker Desktop gives its containers: a job reaches a service on its own
// host — a receiver, a sink — as host.docker.internal on any engine.
const HostGateway = "host.docker.internal"

// planService maps one service of spec to a container's configuration;
// publishHost is the host IP a port mapping without a host address is
// published on ("": every address). It does no I/O; errors wrap
// runtime.ErrInvalidSpec.
func planService(nodeID, clusterID, publishHost string, spec runtime.InstanceSpec, svc *managerv1.Service) (createPlan, error) {
	invalid := func(format string, args ...any) (createPlan, error) {
		return createPlan{}, fmt.Errorf("service %q: %s: %w", svc.GetName(), fmt.Sprintf(format, args...), runtime.ErrInvalidSpec)
	}
	if svc.GetName() == "" {
		return invalid("no name")
	}
	if svc.GetImage() == "" {
		return invalid("no image")
	}

	env := map[string]string{}
	for k, v := range svc.GetEnv() {
		env[k] = v
	}
	for k, v := range spec.Env {
		env[k] = v
	}
	env[runtime.EnvService] = svc.GetName()
	envList := make([]string, 0, len(env))
	for k, v := range env {
		envList = append(envList, k+"="+v)
	}
	sort.Strings(envList)

	exposed := nat.PortSet{}
	bindings := nat.PortMap{}
	for _, pm := range svc.GetPorts() {
		if pm.GetContainerPort() == 0 || pm.GetContainerPort() > 65535 {
			return invalid("container port %d out of range", pm.GetContainerPort())
		}
		proto := "tcp"
		if pm.GetProtocol() == managerv1.Protocol_PROTOCOL_UDP {
			proto = "udp"
		}
		port, err := nat.NewPort(proto, strconv.FormatUint(uint64(pm.GetContainerPort()), 10))
		if err != nil {
			return invalid("port %d/%s: %v", pm.GetContainerPort(), proto, err)
		}
		var hostPort string
		switch hp := pm.GetHostPort().(type) {
		case nil, *managerv1.PortMapping_Ephemeral:
			hostPort = ""
		case *managerv1.PortMapping_Range:
			lo, hi := hp.Range.GetMinPort(), hp.Range.GetMaxPort()
			if lo == 0 || hi > 65535 || lo > hi {
				return invalid("port %d: host port range %d-%d is not valid", pm.GetContainerPort(), lo, hi)
			}
			hostPort = fmt.Sprintf("%d-%d", lo, hi)
		case *managerv1.PortMapping_Specific:
			if hp.Specific == 0 || hp.Specific > 65535 {
				return invalid("port %d: host port %d out of range", pm.GetContainerPort(), hp.Specific)
			}
			hostPort = strconv.FormatUint(uint64(hp.Specific), 10)
		}
		exposed[port] = struct{}{}
		hostIP := pm.GetHostAddress()
		if hostIP == "" {
			hostIP = publishHost
		}
		bindings[port] = append(bindings[port], nat.PortBinding{HostIP: hostIP, HostPort: hostPort})
	}

	var mounts []mount.Mount
	var volumes []string
	addVolume := func(v string) {
		for _, have := range volumes {
			if have == v {
				return
			}
		}
		volumes = append(volumes, v)
	}
	for _, name := range spec.Job.GetVolumes() {
		if name == "" {
			return invalid("job volume with no name")
		}
		addVolume(VolumeName(spec.Key.JobID, name))
	}
	for _, vm := range svc.GetVolumeMounts() {
		if !strings.HasPrefix(vm.GetContainerPath(), "/") {
			return invalid("volume mount %q: container path %q is not absolute", vm.GetSource(), vm.GetContainerPath())
		}
		switch src := vm.GetSource(); {
		case src == "":
			return invalid("volume mount at %s has no source", vm.GetContainerPath())
		case strings.HasPrefix(src, "/"):
			mounts = append(mounts, mount.Mount{Type: mount.TypeBind, Source: src, Target: vm.GetContainerPath(), ReadOnly: vm.GetReadOnly()})
		default:
			v := VolumeName(spec.Key.JobID, src)
			addVolume(v)
			mounts = append(mounts, mount.Mount{Type: mount.TypeVolume, Source: v, Target: vm.GetContainerPath(), ReadOnly: vm.GetReadOnly()})
		}
	}

	for _, m := range spec.Mounts {
		if !strings.HasPrefix(m.Source, "/") || !strings.HasPrefix(m.Target, "/") {
			return invalid("worker mount %s -> %s: both paths must be absolute", m.Source, m.Target)
		}
		mounts = append(mounts, mount.Mount{Type: mount.TypeBind, Source: m.Source, Target: m.Target, ReadOnly: m.ReadOnly})
	}

	cpus := make([]string, 0, len(svc.GetCpuSet()))
	for _, c := range svc.GetCpuSet() {
		cpus = append(cpus, strconv.FormatUint(uint64(c), 10))
	}

	cfg := &container.Config{
		Image:        svc.GetImage(),
		Env:          envList,
		ExposedPorts: exposed,
		WorkingDir:   svc.GetWorkingDir(),
		Labels: map[string]string{
			runtime.LabelNode:        nodeID,
			runtime.LabelJob:         spec.Key.JobID,
			runtime.LabelRole:        spec.Key.Role,
			runtime.LabelService:     svc.GetName(),
			runtime.LabelToken:       strconv.FormatUint(spec.Token, 10),
			runtime.LabelRuntimeRole: spec.RuntimeRole,
		},
	}
	if clusterID != "" {
		cfg.Labels[runtime.LabelCluster] = clusterID
	}
	if len(svc.GetCommand()) > 0 {
		cfg.Entrypoint = append([]string(nil), svc.GetCommand()...)
	}
	if len(svc.GetArgs()) > 0 {
		cfg.Cmd = append([]string(nil), svc.GetArgs()...)
	}
	host := &container.HostConfig{
		PortBindings: bindings,
		Mounts:       mounts,
		ShmSize:      svc.GetShmSizeBytes(),
		// No Docker restart policy: the worker's supervisor restarts.
		RestartPolicy: container.RestartPolicy{Name: container.RestartPolicyDisabled},
		Resources:     container.Resources{CpusetCpus: strings.Join(cpus, ",")},
		ExtraHosts:    []string{HostGateway + ":host-gateway"},
	}
	return createPlan{name: ContainerName(clusterID, nodeID, spec.Key, svc.GetName()), config: cfg, host: host, volumes: volumes}, nil
}

// Prepare creates a container per service of spec, starting none. See
// runtime.Runtime for the idempotency and fencing rules.
func (r *Runtime) Prepare(ctx context.Context, spec runtime.InstanceSpec) error {
	key := spec.Key
	if key.JobID == "" || spec.Job == nil {
		return fmt.Errorf("prepare %s: no job id or job: %w", key, runtime.ErrInvalidSpec)
	}
	if spec.NodeID != "" && spec.NodeID != r.nodeID {
		return fmt.Errorf("prepare %s: spec is for node %s, this runtime runs node %s: %w", key, spec.NodeID, r.nodeID, runtime.ErrInvalidSpec)
	}

	cluster := r.cluster.Get()
	plans := make([]createPlan, 0, len(spec.Job.GetServices()))
	names := map[string]bool{}
	for _, svc := range spec.Job.GetServices() {
		if names[svc.GetName()] {
			return fmt.Errorf("prepare %s: service %q appears twice: %w", key, svc.GetName(), runtime.ErrInvalidSpec)
		}
		names[svc.GetName()] = true
		p, err := planService(r.nodeID, cluster, r.publishHost, spec, svc)
		if err != nil {
			return fmt.Errorf("prepare %s: %w", key, err)
		}
		plans = append(plans, p)
	}

	existing, err := r.instanceContainers(ctx, key)
	if err != nil {
		return fmt.Errorf("prepare %s: %w", key, err)
	}
	current := map[string]bool{} // services that exist with spec.Token
	var stale []container.Summary
	for _, c := range existing {
		switch tok := parseToken(c.Labels[runtime.LabelToken]); {
		case tok > spec.Token:
			return fmt.Errorf("prepare %s with token %d: container %s has token %d: %w",
				key, spec.Token, strings.TrimPrefix(firstName(c), "/"), tok, runtime.ErrSuperseded)
		case tok < spec.Token:
			stale = append(stale, c)
		default:
			current[c.Labels[runtime.LabelService]] = true
		}
	}

	// Every image first, so that a missing one (or a failed pull) changes
	// nothing.
	pulled := map[string]bool{}
	for i, p := range plans {
		svc := p.config.Labels[runtime.LabelService]
		if current[svc] || pulled[p.config.Image] {
			continue
		}
		if err := r.ensureServiceImage(ctx, spec, svc, p.config.Image, spec.Job.GetServices()[i].GetPullPolicy()); err != nil {
			return fmt.Errorf("prepare %s: %w", key, err)
		}
		pulled[p.config.Image] = true
	}

	for _, c := range stale {
		r.log.Info("removing container of a superseded binding", "instance", key.String(),
			"container", firstName(c), "token", c.Labels[runtime.LabelToken], "new_token", spec.Token)
		if err := r.cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true, RemoveVolumes: true}); err != nil && !cerrdefs.IsNotFound(err) {
			return fmt.Errorf("prepare %s: remove superseded container %s: %w", key, firstName(c), err)
		}
	}

	for _, p := range plans {
		if current[p.config.Labels[runtime.LabelService]] {
			continue
		}
		for _, v := range p.volumes {
			if err := r.ensureVolume(ctx, key.JobID, v); err != nil {
				return fmt.Errorf("prepare %s: %w", key, err)
			}
		}
		if _, err := r.cli.ContainerCreate(ctx, p.config, p.host, nil, nil, p.name); err != nil {
			if cerrdefs.IsConflict(err) {
				// A container by this name that the key listing did not
				// show: another node's or another key's after sanitising.
				return fmt.Errorf("prepare %s: container name %s is taken by a container of another service: %w", key, p.name, err)
			}
			return fmt.Errorf("prepare %s: create container %s: %w", key, p.name, err)
		}
		r.log.Info("created container", "instance", key.String(), "service", p.config.Labels[runtime.LabelService],
			"container", p.name, "image", p.config.Image, "token", spec.Token)
	}
	return nil
}

// ensureServiceImage makes a service's image present as its pull policy
// says.
func (r *Runtime) ensureServiceImage(ctx context.Context, spec runtime.InstanceSpec, svc, ref string, policy managerv1.PullPolicy) error {
	if policy != managerv1.PullPolicy_PULL_POLICY_ALWAYS {
		_, err := r.cli.ImageInspect(ctx, ref)
		switch {
		case err == nil:
			return nil
		case !cerrdefs.IsNotFound(err):
			return fmt.Errorf("service %s: inspect image %q: %w", svc, ref, err)
		case policy == managerv1.PullPolicy_PULL_POLICY_NEVER:
			return fmt.Errorf("service %s: image %q is not present on node %s, and its pull policy is never: %w",
				svc, ref, r.nodeID, runtime.ErrImageNotFound)
		}
	}
	if err := r.pull(ctx, ref, svc, spec.PullProgress); err != nil {
		return fmt.Errorf("service %s: %w", svc, err)
	}
	return nil
}

// ensureVolume creates a job-scoped named volume unless it exists.
func (r *Runtime) ensureVolume(ctx context.Context, jobID, name string) error {
	if _, err := r.cli.VolumeInspect(ctx, name); err == nil {
		return nil
	} else if !cerrdefs.IsNotFound(err) {
		return fmt.Errorf("inspect volume %s: %w", name, err)
	}
	labels := map[string]string{runtime.LabelNode: r.nodeID, runtime.LabelJob: jobID}
	if c := r.cluster.Get(); c != "" {
		labels[runtime.LabelCluster] = c
	}
	_, err := r.cli.VolumeCreate(ctx, volume.CreateOptions{Name: name, Labels: labels})
	if err != nil {
		return fmt.Errorf("create volume %s: %w", name, err)
	}
	r.log.Info("created volume", "job", jobID, "volume", name)
	return nil
}

// RemoveJobVolumes removes the named volumes this node created for a job
// (in its cluster, or before cluster ids). Remove keeps them because they
// belong to the job; call this when the job is gone from the node. It fails
// while a container still uses one.
func (r *Runtime) RemoveJobVolumes(ctx context.Context, jobID string) error {
	vs, err := r.cli.VolumeList(ctx, volume.ListOptions{Filters: filters.NewArgs(
		filters.Arg("label", runtime.LabelNode+"="+r.nodeID),
		filters.Arg("label", runtime.LabelJob+"="+jobID),
	)})
	if err != nil {
		return fmt.Errorf("remove volumes of job %s: %w", jobID, err)
	}
	for _, v := range vs.Volumes {
		if !r.mine(v.Labels) {
			continue // another cluster's
		}
		if err := r.cli.VolumeRemove(ctx, v.Name, false); err != nil && !cerrdefs.IsNotFound(err) {
			return fmt.Errorf("remove volumes of job %s: %s: %w", jobID, v.Name, err)
		}
	}
	return nil
}

func firstName(c container.Summary) string {
	if len(c.Names) > 0 {
		return c.Names[0]
	}
	return c.ID
}
