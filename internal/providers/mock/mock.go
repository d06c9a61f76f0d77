// Package mock is the Manager's side of the mock provider: elastic nodes
// booted on demand by mock hosts (package mockhost), each host a machine
// that runs at most one node's worker at a time. The provider stands in for
// a cloud's instance API in tests and on a development machine: creating a
// node picks a free host and tells it to boot a worker with the new node's
// registration token; the worker registers like any other, and the Manager
// terminates the node the usual way (the worker stops its instances and
// exits), after which the host is free again.
//
// A Provider is safe for concurrent use. It holds no state of its own that
// matters: which host runs which node is the node record's
// provider_instance, in the store.
package mock

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"connectrpc.com/connect"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1/managerv1connect"
	"github.com/norsk-go/norsk-manager/internal/providers"
)

// Name is the provider's name on its nodes (Node.provider).
const Name = "mock"

// Defaults of Config fields left zero.
const (
	DefaultPool         = "mock"
	DefaultVCPUs        = 4
	DefaultStartTimeout = 2 * time.Minute
)

// Config configures the mock provider (config.yaml providers.mock).
type Config struct {
	// Hosts are the mock hosts' URLs (http://host:port), tried in order.
	Hosts []string `json:"hosts"`
	// Token is the hosts' bearer token ("" = they need none).
	Token string `json:"token,omitempty"`
	// Pools are the pool tiers the provider creates nodes in (default
	// ["mock"]); the first is the default of CreateMockNode.
	Pools []string `json:"pools,omitempty"`
	// VCPUs is the capacity a node is promised before its worker reports
	// its own hardware (default 4): placement counts on it for a node that
	// is still starting.
	VCPUs uint32 `json:"vcpus,omitempty"`
	// StartTimeout is how long a created node may take to come online
	// before it is terminated (default 2 min).
	StartTimeout time.Duration `json:"-"`
}

// WithDefaults validates c and fills in defaults.
func (c Config) WithDefaults() (Config, error) {
	if len(c.Hosts) == 0 {
		return c, errors.New("providers.mock.hosts: give at least one mock host URL")
	}
	seen := map[string]bool{}
	for i, h := range c.Hosts {
		h = strings.TrimRight(strings.TrimSpace(h), "/")
		u, err := url.Parse(h)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return c, fmt.Errorf("providers.mock.hosts[%d]: %q is not http(s)://host:port", i, h)
		}
		if seen[h] {
			return c, fmt.Errorf("providers.mock.hosts[%d]: %q is listed twice", i, h)
		}
		seen[h] = true
		c.Hosts[i] = h
	}
	if len(c.Pools) == 0 {
		c.Pools = []string{DefaultPool}
	}
	for i, p := range c.Pools {
		if p == "" {
			return c, fmt.Errorf("providers.mock.pools[%d]: empty pool", i)
		}
	}
	if c.VCPUs == 0 {
		c.VCPUs = DefaultVCPUs
	}
	if c.StartTimeout <= 0 {
		c.StartTimeout = DefaultStartTimeout
	}
	return c, nil
}

// Serves reports whether the provider creates nodes in pool.
func (c Config) Serves(pool string) bool {
	for _, p := range c.Pools {
		if p == pool {
			return true
		}
	}
	return false
}

// Provider talks to the mock hosts.
type Provider struct {
	cfg     Config
	clients map[string]managerv1connect.MockHostClient
}

// ErrNoFreeHost: every host runs a node (or did not answer).
var ErrNoFreeHost = errors.New("mock provider: every mock host is in use")

// New returns a provider for cfg (already WithDefaults). httpClient
// carries the calls (nil: a plain HTTP client).
func New(cfg Config, httpClient *http.Client) *Provider {
	if httpClient == nil {
		httpClient = &http.Client{Timeout: 10 * time.Second}
	}
	p := &Provider{cfg: cfg, clients: map[string]managerv1connect.MockHostClient{}}
	var opts []connect.ClientOption
	if cfg.Token != "" {
		opts = append(opts, connect.WithInterceptors(bearer("Bearer "+cfg.Token)))
	}
	for _, h := range cfg.Hosts {
		p.clients[h] = managerv1connect.NewMockHostClient(httpClient, h, opts...)
	}
	return p
}

// Config is the provider's configuration.
func (p *Provider) Config() Config { return p.cfg }

// Hardware is what a node is promised until its worker reports its own.
func (p *Provider) Hardware() *managerv1.Hardware {
	return &managerv1.Hardware{Vcpus: p.cfg.VCPUs}
}

// Pick returns the first host that no live node holds (taken) and that
// says it is free. The errors of hosts that did not answer are joined into
// ErrNoFreeHost's message.
func (p *Provider) Pick(ctx context.Context, taken map[string]bool) (string, error) {
	var why []string
	for _, h := range p.cfg.Hosts {
		if taken[h] {
			continue
		}
		st, err := p.clients[h].Status(ctx, connect.NewRequest(&managerv1.MockHostStatusRequest{}))
		switch {
		case err != nil:
			why = append(why, fmt.Sprintf("%s: %v", h, err))
		case st.Msg.GetBusy():
			why = append(why, fmt.Sprintf("%s: runs node %q", h, st.Msg.GetNodeId()))
		default:
			return h, nil
		}
	}
	if len(why) == 0 {
		return "", fmt.Errorf("%w (%d hosts, each holding a node)", ErrNoFreeHost, len(p.cfg.Hosts))
	}
	return "", fmt.Errorf("%w: %s", ErrNoFreeHost, strings.Join(why, "; "))
}

// Boot tells host to boot a worker for nodeID that registers with
// managerURL (comma-separated members) using token.
func (p *Provider) Boot(ctx context.Context, host, nodeID, managerURL, token, caHash string) error {
	c, ok := p.clients[host]
	if !ok {
		return fmt.Errorf("mock provider: %q is not one of its hosts", host)
	}
	_, err := c.Boot(ctx, connect.NewRequest(&managerv1.MockHostBootRequest{
		NodeId: nodeID, ManagerUrl: managerURL, Token: token, CaHash: caHash,
	}))
	if err != nil {
		return fmt.Errorf("mock host %s: boot node %s: %w", host, nodeID, err)
	}
	return nil
}

// Release tells host to end nodeID's worker, if it still runs it.
func (p *Provider) Release(ctx context.Context, host, nodeID string) error {
	c, ok := p.clients[host]
	if !ok {
		return fmt.Errorf("mock provider: %q is not one of its hosts", host)
	}
	if _, err := c.Release(ctx, connect.NewRequest(&managerv1.MockHostReleaseRequest{NodeId: nodeID})); err != nil {
		return fmt.Errorf("mock host %s: release node %s: %w", host, nodeID, err)
	}
	return nil
}

// Runs reports whether host says it runs nodeID's worker.
func (p *Provider) Runs(ctx context.Context, host, nodeID string) (bool, error) {
	c, ok := p.clients[host]
	if !ok {
		return false, fmt.Errorf("mock provider: %q is not one of its hosts", host)
	}
	st, err := c.Status(ctx, connect.NewRequest(&managerv1.MockHostStatusRequest{}))
	if err != nil {
		return false, err
	}
	return st.Msg.GetBusy() && st.Msg.GetNodeId() == nodeID, nil
}

type bearer string

func (b bearer) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		req.Header().Set("Authorization", string(b))
		return next(ctx, req)
	}
}

func (b bearer) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, s connect.Spec) connect.StreamingClientConn {
		conn := next(ctx, s)
		conn.RequestHeader().Set("Authorization", string(b))
		return conn
	}
}

func (b bearer) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// The provider seam (package providers).
var (
	_ providers.Provider       = (*Provider)(nil)
	_ providers.Reserver       = (*Provider)(nil)
	_ providers.StartTimeouter = (*Provider)(nil)
)

// Name is "mock".
func (p *Provider) Name() string { return Name }

// TracksInstances: the hosts' Status is the truth about which node each
// runs. A node whose host no longer runs it (the host died and a fresh one
// took its address, or its worker ended without the Manager) is gone, as
// a vanished cloud instance is: reconciliation marks it terminated and the
// host can take a new node. A host that does not answer concludes nothing.
func (p *Provider) TracksInstances() bool { return true }

// StartTimeout is how long a node may take to come online.
func (p *Provider) StartTimeout() time.Duration { return p.cfg.StartTimeout }

// Reserve picks a free host (see Pick).
func (p *Provider) Reserve(ctx context.Context, inUse map[string]bool) (string, error) {
	return p.Pick(ctx, inUse)
}

// Launch boots the reserved host's worker from the spec's user data. A
// host already running the node answers as if it had just booted it.
func (p *Provider) Launch(ctx context.Context, spec providers.LaunchSpec) (providers.Instance, error) {
	ud, err := providers.DecodeUserData(spec.UserData)
	if err != nil {
		return providers.Instance{}, err
	}
	if err := p.Boot(ctx, spec.Reserved, spec.NodeID, strings.Join(ud.ManagerURLs, ","), ud.Token, ud.CAHash); err != nil {
		return providers.Instance{}, err
	}
	return providers.Instance{ID: spec.Reserved, NodeID: spec.NodeID, State: providers.StateRunning}, nil
}

// Terminate releases the host of ref.NodeID if it still runs that node's
// worker (a terminated node's worker usually ends by itself).
func (p *Provider) Terminate(ctx context.Context, ref providers.Ref) error {
	runs, err := p.Runs(ctx, ref.ID, ref.NodeID)
	if err != nil || !runs {
		return err
	}
	return p.Release(ctx, ref.ID, ref.NodeID)
}

// List is every host that runs a node's worker.
func (p *Provider) List(ctx context.Context, _ string) ([]providers.Instance, error) {
	var out []providers.Instance
	for _, h := range p.cfg.Hosts {
		st, err := p.clients[h].Status(ctx, connect.NewRequest(&managerv1.MockHostStatusRequest{}))
		if err != nil {
			return nil, fmt.Errorf("mock host %s: %w", h, err)
		}
		if st.Msg.GetBusy() {
			out = append(out, providers.Instance{ID: h, NodeID: st.Msg.GetNodeId(), State: providers.StateRunning})
		}
	}
	return out, nil
}

// SetTags does nothing: mock hosts hold no tags.
func (p *Provider) SetTags(context.Context, providers.Ref, map[string]string) error { return nil }
