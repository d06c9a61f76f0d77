// Package cloudhypervisor is the Manager's cloud-hypervisor provider:
// elastic nodes whose workers run as Cloud Hypervisor microVMs on the
// Manager's host agents (internal/hostagent, `norsk-ctl host-agent`). It
// sits on the same seam as the clouds (providers.Provider, Catalog,
// Tracker): a host agent is a "region" (the overrides file names the hosts
// run and, per host, the base image of each worker version), its shapes
// are the instance types, a VM is an instance tagged with the cluster and
// node ids. The fleet does the rest (creation recorded before the call,
// reconciliation both ways, the reaper, start timeouts).
//
// A Provider is safe for concurrent use.
package cloudhypervisor

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1/managerv1connect"
	"github.com/norsk-go/norsk-manager/internal/providers"
	"github.com/norsk-go/norsk-manager/internal/providers/cloudconf"
)

// Name is the provider's name on its nodes (Node.provider).
const Name = cloudconf.CloudHypervisorName

// Provider talks to the host agents.
type Provider struct {
	cfg     cloudconf.CloudHypervisor
	hc      *http.Client
	clients map[string]managerv1connect.HostAgentClient
	log     *slog.Logger
	// registered are the host agents registered at run time (the store's),
	// set once before the provider is used (SetRegistered).
	registered func() map[string]Host
	// tlsFor is the mutual-TLS client configuration for a registered
	// host's https URL (SetTLS; nil: the plain client's).
	tlsFor func(host string) *tls.Config
	// StartTimeoutD is how long a VM's worker may take to register (0 =
	// the fleet's default).
	StartTimeoutD time.Duration

	mu sync.Mutex
	// dyn are the clients of registered hosts, with what they were made
	// for.
	dyn map[string]dynClient
	// run are the hosts the overrides file names (and the config has).
	run []string
	// seen is each host's last answer, for placement's view of room.
	seen map[string]*managerv1.HostInfo
}

// New returns a provider for cfg (validated here). httpClient carries the
// calls (nil: a plain HTTP client).
func New(cfg cloudconf.CloudHypervisor, httpClient *http.Client, log *slog.Logger) (*Provider, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if httpClient == nil {
		httpClient = &http.Client{Timeout: 2 * time.Minute}
	}
	if log == nil {
		log = slog.Default()
	}
	p := &Provider{cfg: cfg, hc: httpClient, clients: map[string]managerv1connect.HostAgentClient{}, log: log.With("provider", Name),
		seen: map[string]*managerv1.HostInfo{}, dyn: map[string]dynClient{}}
	for name, h := range cfg.Hosts {
		token := h.Token
		if token == "" {
			b, err := os.ReadFile(h.TokenFile)
			if err != nil {
				return nil, fmt.Errorf("providers.cloudHypervisor.hosts.%s.tokenFile: %w", name, err)
			}
			token = strings.TrimSpace(string(b))
		}
		p.clients[name] = managerv1connect.NewHostAgentClient(httpClient, strings.TrimRight(h.URL, "/"),
			connect.WithInterceptors(bearer(token)))
	}
	return p, nil
}

func bearer(token string) connect.UnaryInterceptorFunc {
	return func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			req.Header().Set("Authorization", "Bearer "+token)
			return next(ctx, req)
		}
	}
}

// Name is "cloud-hypervisor".
func (p *Provider) Name() string { return Name }

// TracksInstances: the host agents' VM lists are the whole truth.
func (p *Provider) TracksInstances() bool { return true }

// StartTimeout is how long a VM's worker may take to register.
func (p *Provider) StartTimeout() time.Duration { return p.StartTimeoutD }

// Host is a registered host agent: where it serves and its secret.
type Host struct {
	URL, Secret string
}

type dynClient struct {
	host   Host
	client managerv1connect.HostAgentClient
	// tr is the client's own transport (mutual TLS), closed when replaced.
	tr *http.Transport
}

// SetRegistered gives the provider the host agents registered at run time
// (read on every call; config.yaml's hosts win on a name in both). Call it
// before the provider is used.
func (p *Provider) SetRegistered(f func() map[string]Host) { p.registered = f }

// SetTLS gives the provider the mutual-TLS configuration it dials a
// registered host agent's https URL with: the Manager's client certificate
// presented, the agent's certificate verified to the cluster CA and naming
// the host (pki.HostAgentClientConfig). Hosts listed in config.yaml keep
// the plain client. Call it before the provider is used.
func (p *Provider) SetTLS(f func(host string) *tls.Config) { p.tlsFor = f }

// registeredClient is the HTTP client for registered host h at url: mutual
// TLS for an https URL when SetTLS was given, else the plain client.
func (p *Provider) registeredClient(host, url string) *http.Client {
	if p.tlsFor == nil || !strings.HasPrefix(url, "https://") {
		return p.hc
	}
	tr := &http.Transport{TLSClientConfig: p.tlsFor(host), ForceAttemptHTTP2: true, IdleConnTimeout: 90 * time.Second,
		TLSHandshakeTimeout: 10 * time.Second}
	return &http.Client{Transport: tr, Timeout: p.hc.Timeout}
}

// ApplyOverrides takes the hosts the overrides file runs. A host neither
// config.yaml names nor has registered yet is run once it registers; until
// then calls to it fail (its shapes are not loaded).
func (p *Provider) ApplyOverrides(o *providers.Overrides) error {
	hosts := o.Regions(Name)
	p.mu.Lock()
	p.run = hosts
	p.mu.Unlock()
	return nil
}

// Regions are the hosts run now.
func (p *Provider) Regions() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.run...)
}

func (p *Provider) client(host string) (managerv1connect.HostAgentClient, error) {
	if c, ok := p.clients[host]; ok {
		return c, nil
	}
	if p.registered != nil {
		if h, ok := p.registered()[host]; ok && h.URL != "" {
			p.mu.Lock()
			defer p.mu.Unlock()
			if d, ok := p.dyn[host]; ok && d.host == h {
				return d.client, nil
			}
			if d, ok := p.dyn[host]; ok && d.tr != nil {
				d.tr.CloseIdleConnections()
			}
			hc := p.registeredClient(host, h.URL)
			c := managerv1connect.NewHostAgentClient(hc, strings.TrimRight(h.URL, "/"), connect.WithInterceptors(bearer(h.Secret)))
			d := dynClient{host: h, client: c}
			if hc != p.hc {
				d.tr, _ = hc.Transport.(*http.Transport)
			}
			p.dyn[host] = d
			return c, nil
		}
	}
	return nil, fmt.Errorf("%w: no host agent %q (not in providers.cloudHypervisor.hosts, and none registered by that name)", providers.ErrNoRegion, host)
}

// Host asks host's agent for its shapes, room and VMs (and remembers the
// answer for Room).
func (p *Provider) Host(ctx context.Context, host string) (*managerv1.HostInfo, error) {
	c, err := p.client(host)
	if err != nil {
		return nil, err
	}
	res, err := c.GetHost(ctx, connect.NewRequest(&managerv1.GetHostRequest{}))
	if err != nil {
		return nil, cloudErr(host, err)
	}
	p.mu.Lock()
	p.seen[host] = res.Msg
	p.mu.Unlock()
	return res.Msg, nil
}

// InstanceTypes are host's shapes; its one location is the host.
func (p *Provider) InstanceTypes(ctx context.Context, host string) ([]providers.InstanceType, []string, error) {
	h, err := p.Host(ctx, host)
	if err != nil {
		return nil, nil, err
	}
	var out []providers.InstanceType
	for _, s := range h.GetShapes() {
		it := providers.InstanceType{Name: s.GetName(), VCPUs: s.GetVcpus(), MemoryBytes: s.GetMemoryBytes(), GPUs: s.GetGpus(), Regions: []string{host}}
		if a := h.GetArchitecture(); a != "" {
			it.Architectures = []string{a}
		}
		out = append(out, it)
	}
	return out, []string{host}, nil
}

// instanceID names a VM across hosts: <host>/<vm id>.
func instanceID(host, vm string) string { return host + "/" + vm }

func splitID(id string) (host, vm string, err error) {
	host, vm, ok := strings.Cut(id, "/")
	if !ok || host == "" || vm == "" {
		return "", "", fmt.Errorf("%w: %q is not a cloud-hypervisor instance id (<host>/<vm>)", providers.ErrInvalid, id)
	}
	return host, vm, nil
}

func instanceOf(host string, vm *managerv1.MicroVm) providers.Instance {
	inst := providers.Instance{
		ID: instanceID(host, vm.GetId()), NodeID: vm.GetNodeId(), ClusterID: vm.GetClusterId(), Region: host, Zone: host,
		Type: vm.GetShape(), Image: vm.GetImage(), Tags: vm.GetTags(), PrivateDNS: host,
	}
	if t, err := time.Parse(time.RFC3339, vm.GetCreatedAt()); err == nil {
		inst.LaunchedAt = t
	}
	switch vm.GetState() {
	case "Running", "Paused":
		inst.State = providers.StateRunning
	case "Created":
		inst.State = providers.StatePending
	case "Shutdown":
		inst.State, inst.StateReason = providers.StateTerminated, "the VM is shut down"
	default: // Lost
		inst.State, inst.StateReason = providers.StateTerminated, "its VMM no longer answers on its API socket"
	}
	return inst
}

// Launch creates and boots the node's VM on spec.Region (the host),
// idempotently in spec.ClientToken.
func (p *Provider) Launch(ctx context.Context, spec providers.LaunchSpec) (providers.Instance, error) {
	c, err := p.client(spec.Region)
	if err != nil {
		return providers.Instance{}, err
	}
	tags := map[string]string{providers.TagName: spec.NodeID}
	for k, v := range spec.Tags {
		tags[k] = v
	}
	res, err := c.CreateVm(ctx, connect.NewRequest(&managerv1.CreateVmRequest{
		NodeId: spec.NodeID, ClusterId: spec.ClusterID, ClientToken: spec.ClientToken, Shape: spec.InstanceType,
		Image: spec.Image, UserData: spec.UserData, Tags: tags,
	}))
	p.refresh(ctx, spec.Region)
	if err != nil {
		return providers.Instance{}, cloudErr(spec.Region, err)
	}
	return instanceOf(spec.Region, res.Msg), nil
}

// Terminate deletes the VM (one gone already is not an error).
func (p *Provider) Terminate(ctx context.Context, ref providers.Ref) error {
	host, vm, err := splitID(ref.ID)
	if err != nil {
		return err
	}
	c, err := p.client(host)
	if err != nil {
		return err
	}
	if _, err := c.DeleteVm(ctx, connect.NewRequest(&managerv1.DeleteVmRequest{Id: vm})); err != nil {
		return cloudErr(host, err)
	}
	p.refresh(ctx, host)
	return nil
}

// refresh reads host's room again after a VM came or went, so the
// AutoManager's next view of it (OutOfRoom) is current; a failure keeps
// the last answer.
func (p *Provider) refresh(ctx context.Context, host string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	_, _ = p.Host(ctx, host)
}

// List is every VM of the cluster on the hosts run; an unreachable host
// makes the answer incomplete (an error).
func (p *Provider) List(ctx context.Context, clusterID string) ([]providers.Instance, error) {
	var out []providers.Instance
	var errs []error
	for _, host := range p.Regions() {
		h, err := p.Host(ctx, host)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, vm := range h.GetVms() {
			if vm.GetClusterId() == clusterID {
				out = append(out, instanceOf(host, vm))
			}
		}
	}
	return out, errors.Join(errs...)
}

// SetTags merges tags onto the VM.
func (p *Provider) SetTags(ctx context.Context, ref providers.Ref, tags map[string]string) error {
	host, vm, err := splitID(ref.ID)
	if err != nil {
		return err
	}
	c, err := p.client(host)
	if err != nil {
		return err
	}
	if _, err := c.SetVmTags(ctx, connect.NewRequest(&managerv1.SetVmTagsRequest{Id: vm, Tags: tags})); err != nil {
		return cloudErr(host, err)
	}
	return nil
}

// Room is how much of host is free as last seen, and whether it was seen.
func (p *Provider) Room(host string) (vcpus uint32, mem uint64, gpus uint32, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	h, ok := p.seen[host]
	if !ok {
		return 0, 0, 0, false
	}
	return sub(h.GetVcpus(), h.GetUsedVcpus()), h.GetMemoryBytes() - min(h.GetMemoryBytes(), h.GetUsedMemoryBytes()), sub(h.GetGpus(), h.GetUsedGpus()), true
}

func sub(a, b uint32) uint32 {
	if b > a {
		return 0
	}
	return a - b
}

// OutOfRoom says why host cannot take a VM of shape it offers (vcpus,
// memory and GPUs of the shape), as last seen; "" when it can (or was
// never seen).
func (p *Provider) OutOfRoom(host string, vcpus uint32, mem uint64, gpus uint32) string {
	fv, fm, fg, ok := p.Room(host)
	if !ok || (fv >= vcpus && fm >= mem && fg >= gpus) {
		return ""
	}
	return fmt.Sprintf("host %s is out of capacity (%d vCPUs, %d MiB, %d GPUs free; the shape needs %d, %d MiB, %d)", host, fv, fm>>20, fg, vcpus, mem>>20, gpus)
}

// PickHost is the host (of candidates; none = every host run) with the
// most free vCPUs that offers shape and has room for it, asking each
// agent now. The error names each host's reason and wraps
// providers.ErrCapacity when hosts offer the shape but none has room,
// providers.ErrInvalid when no host that answered offers it.
func (p *Provider) PickHost(ctx context.Context, shape string, candidates []string) (string, error) {
	if len(candidates) == 0 {
		candidates = p.Regions()
	}
	type cand struct {
		host string
		free uint32
	}
	var ok []cand
	var why []string
	offered, answered := false, false
	for _, host := range candidates {
		if !slices.Contains(p.Regions(), host) {
			why = append(why, fmt.Sprintf("%s: not run (the overrides file does not name it)", host))
			continue
		}
		h, err := p.Host(ctx, host)
		if err != nil {
			why = append(why, fmt.Sprintf("%s: %v", host, err))
			continue
		}
		answered = true
		var sh *managerv1.HostShape
		for _, s := range h.GetShapes() {
			if s.GetName() == shape {
				sh = s
			}
		}
		if sh == nil {
			why = append(why, fmt.Sprintf("%s: offers no shape %s", host, shape))
			continue
		}
		offered = true
		if r := p.OutOfRoom(host, sh.GetVcpus(), sh.GetMemoryBytes(), sh.GetGpus()); r != "" {
			why = append(why, r)
			continue
		}
		fv, _, _, _ := p.Room(host)
		ok = append(ok, cand{host, fv})
	}
	if len(ok) == 0 {
		sort.Strings(why)
		kind, msg := providers.ErrCapacity, "no host has room for shape "+shape
		switch {
		case answered && !offered:
			kind, msg = providers.ErrInvalid, "no host offers shape "+shape
		case !answered:
			kind, msg = nil, "no host answered"
		}
		return "", &providers.CloudError{Kind: kind, Message: msg + ": " + strings.Join(why, "; ")}
	}
	sort.SliceStable(ok, func(i, j int) bool { return ok[i].free > ok[j].free })
	return ok[0].host, nil
}

// cloudErr maps a host agent's answer to the seam's errors.
func cloudErr(host string, err error) error {
	kind := error(nil)
	switch connect.CodeOf(err) {
	case connect.CodeResourceExhausted:
		kind = providers.ErrCapacity
	case connect.CodeInvalidArgument, connect.CodeAlreadyExists, connect.CodeFailedPrecondition:
		kind = providers.ErrInvalid
	case connect.CodeNotFound:
		kind = providers.ErrNotFound
	}
	msg := err.Error()
	var ce *connect.Error
	if errors.As(err, &ce) {
		msg = ce.Message()
	}
	return &providers.CloudError{Kind: kind, Code: connect.CodeOf(err).String(), Message: "host " + host + ": " + msg, Err: err}
}
