// Package oci is the oci provider: elastic nodes on OCI compute instances,
// through the OCI Go SDK (core, identity, common).
//
// Credentials come the way the SDK's users expect: the OCI config file
// (~/.oci/config, or providers.oci.configFile) and its profile, whose
// key_file signs every request. The API endpoints are the SDK's for each
// region, unless config.yaml overrides a region's (the SDK's own endpoint
// override, for private endpoints and for test equipment such as
// internal/cloudsim/oci, which the provider reaches exactly as it reaches
// OCI).
//
// The regions it runs are the overrides file's; each availability domain
// is a "region" of the instance-type cache (its shapes). Every instance is
// launched with the cluster and node freeform tags, the node's user data
// (metadata user_data) and an opc-retry-token derived from the node, so a
// launch repeated by a new primary returns the first launch's instance.
// HTTP 429 and 5xx answers (but "Out of host capacity", which tries the
// next shape) are retried with jittered exponential backoff.
package oci

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/oracle/oci-go-sdk/v65/common"
	"github.com/oracle/oci-go-sdk/v65/core"
	"github.com/oracle/oci-go-sdk/v65/identity"

	"github.com/norsk-go/norsk-manager/internal/providers"
	"github.com/norsk-go/norsk-manager/internal/providers/cloudconf"
)

// Name is the provider's name on its nodes.
const Name = cloudconf.OCIName

// Freeform tag keys of the cluster and node (OCI tag keys take no colon).
const (
	tagCluster = "norsk-cluster"
	tagNode    = "norsk-node"
)

// Config is the provider's configuration (config.yaml providers.oci).
type (
	Config       = cloudconf.OCI
	RegionConfig = cloudconf.OCIRegion
	PoolConfig   = cloudconf.OCIPool
)

func init() {
	providers.RegisterCloud(Name, func(cfg any, log *slog.Logger) (providers.Provider, error) {
		c, ok := cfg.(*Config)
		if !ok || c == nil {
			return nil, fmt.Errorf("oci: configuration %T", cfg)
		}
		return New(*c, log)
	})
}

// Provider is the oci provider. It is safe for concurrent use.
type Provider struct {
	cfg         Config
	log         *slog.Logger
	conf        common.ConfigurationProvider
	compartment string
	policy      common.RetryPolicy

	mu      sync.RWMutex
	regions []string
	clients map[string]*regionClients
}

type regionClients struct {
	compute  core.ComputeClient
	identity identity.IdentityClient
}

// New loads the OCI config file and makes the provider; it runs no region
// until ApplyOverrides.
func New(cfg Config, log *slog.Logger) (*Provider, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.ConfigFile == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return nil, fmt.Errorf("providers.oci.configFile: no home directory for the default: %w", err)
		}
		cfg.ConfigFile = filepath.Join(home, ".oci", "config")
	}
	if cfg.Profile == "" {
		cfg.Profile = "DEFAULT"
	}
	if cfg.RetryMaxAttempts <= 0 {
		cfg.RetryMaxAttempts = 8
	}
	if cfg.RetryBaseDelay.Duration <= 0 {
		cfg.RetryBaseDelay.Duration = 500 * time.Millisecond
	}
	if cfg.RetryMaxBackoff.Duration <= 0 {
		cfg.RetryMaxBackoff.Duration = 20 * time.Second
	}
	if log == nil {
		log = slog.Default()
	}
	conf, err := common.ConfigurationProviderFromFileWithProfile(cfg.ConfigFile, cfg.Profile, "")
	if err != nil {
		return nil, fmt.Errorf("providers.oci: config file %s: %w", cfg.ConfigFile, err)
	}
	compartment := cfg.CompartmentID
	if compartment == "" {
		if compartment, err = conf.TenancyOCID(); err != nil {
			return nil, fmt.Errorf("providers.oci: no compartmentId, and the profile names no tenancy: %w", err)
		}
	}
	p := &Provider{cfg: cfg, log: log.With("provider", Name), conf: conf, compartment: compartment, clients: map[string]*regionClients{}}
	p.policy = common.NewRetryPolicy(uint(cfg.RetryMaxAttempts), shouldRetry, p.backoff)
	return p, nil
}

var (
	_ providers.Provider   = (*Provider)(nil)
	_ providers.Catalog    = (*Provider)(nil)
	_ providers.Reloadable = (*Provider)(nil)
	_ providers.Tracker    = (*Provider)(nil)
)

// Name is "oci".
func (p *Provider) Name() string { return Name }

// Config is the provider's configuration.
func (p *Provider) Config() Config { return p.cfg }

// TracksInstances: OCI's listing is the truth about the instances.
func (p *Provider) TracksInstances() bool { return true }

// shouldRetry retries throttling (429) and server errors, but not "Out of
// host capacity": another shape or domain may have some, and retrying the
// same one only delays finding out.
func shouldRetry(r common.OCIOperationResponse) bool {
	if r.Error == nil {
		return false
	}
	se, ok := common.IsServiceError(r.Error)
	if !ok {
		return false // a transport error: the caller decides
	}
	switch code := se.GetHTTPStatusCode(); {
	case code == http.StatusTooManyRequests:
		return true
	case code >= 500 && code != http.StatusNotImplemented:
		return !outOfCapacity(se)
	case code == http.StatusConflict:
		return se.GetCode() == "IncorrectState" || se.GetCode() == "LockConflict"
	}
	return false
}

// backoff is full jitter: uniform in [0, min(max, base·2ⁿ)].
func (p *Provider) backoff(r common.OCIOperationResponse) time.Duration {
	ceil := p.cfg.RetryBaseDelay.Duration << min(max(int(r.AttemptNumber)-1, 0), 30)
	if ceil <= 0 || ceil > p.cfg.RetryMaxBackoff.Duration {
		ceil = p.cfg.RetryMaxBackoff.Duration
	}
	return time.Duration(rand.Int64N(int64(ceil) + 1))
}

func outOfCapacity(se common.ServiceError) bool {
	return strings.Contains(strings.ToLower(se.GetMessage()), "out of host capacity") || se.GetCode() == "OutOfCapacity"
}

// ApplyOverrides runs the regions the overrides file names.
func (p *Provider) ApplyOverrides(o *providers.Overrides) error {
	regions := o.Regions(Name)
	for _, r := range regions {
		if _, err := p.client(r); err != nil {
			return err
		}
	}
	p.mu.Lock()
	p.regions = regions
	p.mu.Unlock()
	return nil
}

// Regions are the regions the provider runs.
func (p *Provider) Regions() []string {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return append([]string(nil), p.regions...)
}

func (p *Provider) client(region string) (*regionClients, error) {
	p.mu.RLock()
	c, ok := p.clients[region]
	p.mu.RUnlock()
	if ok {
		return c, nil
	}
	compute, err := core.NewComputeClientWithConfigurationProvider(p.conf)
	if err != nil {
		return nil, fmt.Errorf("oci %s: compute client: %w", region, err)
	}
	ident, err := identity.NewIdentityClientWithConfigurationProvider(p.conf)
	if err != nil {
		return nil, fmt.Errorf("oci %s: identity client: %w", region, err)
	}
	compute.SetRegion(region)
	ident.SetRegion(region)
	rc := p.cfg.Regions[region]
	if rc.Endpoint != "" {
		compute.Host = rc.Endpoint
		ident.Host = rc.Endpoint
	}
	if rc.IdentityEndpoint != "" {
		ident.Host = rc.IdentityEndpoint
	}
	// The provider's retry policy, and no circuit breaker: a cloud that
	// throttles is retried with backoff, not cut off.
	policy := p.policy
	compute.SetCustomClientConfiguration(common.CustomClientConfiguration{RetryPolicy: &policy})
	ident.SetCustomClientConfiguration(common.CustomClientConfiguration{RetryPolicy: &policy})
	c = &regionClients{compute: compute, identity: ident}
	p.mu.Lock()
	if existing, ok := p.clients[region]; ok {
		c = existing
	} else {
		p.clients[region] = c
	}
	p.mu.Unlock()
	return c, nil
}

// Launch launches the node's instance (LaunchInstance with
// opc-retry-token = spec.ClientToken).
func (p *Provider) Launch(ctx context.Context, spec providers.LaunchSpec) (providers.Instance, error) {
	c, err := p.client(spec.Region)
	if err != nil {
		return providers.Instance{}, err
	}
	if spec.Zone == "" {
		return providers.Instance{}, &providers.CloudError{Kind: providers.ErrInvalid, Message: "oci: an instance needs an availability domain"}
	}
	subnet := spec.Subnet
	if subnet == "" {
		subnet = p.cfg.Regions[spec.Region].Subnet
	}
	details := core.LaunchInstanceDetails{
		AvailabilityDomain: common.String(spec.Zone),
		CompartmentId:      common.String(p.compartment),
		DisplayName:        common.String("norsk-" + spec.NodeID),
		Shape:              common.String(spec.InstanceType),
		FreeformTags:       freeformTags(spec.ClusterID, spec.NodeID, spec.Tags),
		Metadata:           map[string]string{"user_data": base64.StdEncoding.EncodeToString(spec.UserData)},
		SourceDetails:      core.InstanceSourceViaImageDetails{ImageId: common.String(spec.Image)},
	}
	if subnet != "" {
		details.CreateVnicDetails = &core.CreateVnicDetails{SubnetId: common.String(subnet)}
	}
	if spec.OCPUs > 0 || spec.MemoryGBs > 0 {
		sc := &core.LaunchInstanceShapeConfigDetails{}
		if spec.OCPUs > 0 {
			sc.Ocpus = common.Float32(spec.OCPUs)
		}
		if spec.MemoryGBs > 0 {
			sc.MemoryInGBs = common.Float32(spec.MemoryGBs)
		}
		details.ShapeConfig = sc
	}
	res, err := c.compute.LaunchInstance(ctx, core.LaunchInstanceRequest{LaunchInstanceDetails: details, OpcRetryToken: common.String(spec.ClientToken)})
	if err != nil {
		return providers.Instance{}, mapError("LaunchInstance", err)
	}
	return instanceOf(spec.Region, res.Instance), nil
}

func freeformTags(cluster, node string, user map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range user {
		out[k] = v
	}
	out[tagCluster] = cluster
	out[tagNode] = node
	return out
}

func instanceOf(region string, i core.Instance) providers.Instance {
	out := providers.Instance{
		ID:     str(i.Id),
		Region: region,
		Zone:   str(i.AvailabilityDomain),
		Type:   str(i.Shape),
		Image:  str(i.ImageId),
		State:  stateOf(i.LifecycleState),
		Tags:   map[string]string{},
	}
	if i.Region != nil && *i.Region != "" {
		out.Region = *i.Region
	}
	if i.TimeCreated != nil {
		out.LaunchedAt = i.TimeCreated.Time
	}
	for k, v := range i.FreeformTags {
		switch k {
		case tagCluster:
			out.ClusterID = v
			out.Tags[providers.TagCluster] = v
		case tagNode:
			out.NodeID = v
			out.Tags[providers.TagNode] = v
		default:
			out.Tags[k] = v
		}
	}
	return out
}

// stateOf maps OCI lifecycle states onto the providers' states.
func stateOf(s core.InstanceLifecycleStateEnum) string {
	switch s {
	case core.InstanceLifecycleStateProvisioning, core.InstanceLifecycleStateStarting, core.InstanceLifecycleStateMoving:
		return providers.StatePending
	case core.InstanceLifecycleStateRunning, core.InstanceLifecycleStateCreatingImage:
		return providers.StateRunning
	case core.InstanceLifecycleStateStopping:
		return providers.StateStopping
	case core.InstanceLifecycleStateStopped:
		return providers.StateStopped
	case core.InstanceLifecycleStateTerminating:
		return providers.StateTerminating
	case core.InstanceLifecycleStateTerminated:
		return providers.StateTerminated
	}
	return strings.ToLower(string(s))
}

// Terminate ends an instance (TerminateInstance); one OCI does not know is
// gone already.
func (p *Provider) Terminate(ctx context.Context, ref providers.Ref) error {
	c, err := p.client(ref.Region)
	if err != nil {
		return err
	}
	if _, err := c.compute.TerminateInstance(ctx, core.TerminateInstanceRequest{InstanceId: common.String(ref.ID)}); err != nil {
		err = mapError("TerminateInstance", err)
		if errors.Is(err, providers.ErrNotFound) {
			return nil
		}
		return err
	}
	return nil
}

// List is every instance of the compartment tagged with the cluster, in
// every region run.
func (p *Provider) List(ctx context.Context, clusterID string) ([]providers.Instance, error) {
	var out []providers.Instance
	for _, region := range p.Regions() {
		c, err := p.client(region)
		if err != nil {
			return nil, err
		}
		var page *string
		for {
			res, err := c.compute.ListInstances(ctx, core.ListInstancesRequest{CompartmentId: common.String(p.compartment), Page: page})
			if err != nil {
				return nil, mapError("ListInstances", err)
			}
			for _, i := range res.Items {
				if i.FreeformTags[tagCluster] == clusterID {
					out = append(out, instanceOf(region, i))
				}
			}
			if res.OpcNextPage == nil || *res.OpcNextPage == "" {
				break
			}
			page = res.OpcNextPage
		}
	}
	return out, nil
}

// SetTags merges tags onto the instance's freeform tags (GetInstance, then
// UpdateInstance with the merged set, as OCI replaces them whole).
func (p *Provider) SetTags(ctx context.Context, ref providers.Ref, tags map[string]string) error {
	if len(tags) == 0 {
		return nil
	}
	c, err := p.client(ref.Region)
	if err != nil {
		return err
	}
	cur, err := c.compute.GetInstance(ctx, core.GetInstanceRequest{InstanceId: common.String(ref.ID)})
	if err != nil {
		return mapError("GetInstance", err)
	}
	merged := map[string]string{}
	for k, v := range cur.FreeformTags {
		merged[k] = v
	}
	for k, v := range tags {
		merged[k] = v
	}
	_, err = c.compute.UpdateInstance(ctx, core.UpdateInstanceRequest{InstanceId: common.String(ref.ID),
		UpdateInstanceDetails: core.UpdateInstanceDetails{FreeformTags: merged}, IfMatch: cur.Etag})
	if err != nil {
		return mapError("UpdateInstance", err)
	}
	return nil
}

// InstanceTypes lists the shapes of each of the region's availability
// domains (ListAvailabilityDomains, ListShapes): a shape's Regions are the
// domains offering it, and the locations are the domains.
func (p *Provider) InstanceTypes(ctx context.Context, region string) ([]providers.InstanceType, []string, error) {
	c, err := p.client(region)
	if err != nil {
		return nil, nil, err
	}
	ads, err := c.identity.ListAvailabilityDomains(ctx, identity.ListAvailabilityDomainsRequest{CompartmentId: common.String(p.compartment)})
	if err != nil {
		return nil, nil, mapError("ListAvailabilityDomains", err)
	}
	byName := map[string]*providers.InstanceType{}
	var locations []string
	for _, ad := range ads.Items {
		name := str(ad.Name)
		locations = append(locations, name)
		var page *string
		for {
			res, err := c.compute.ListShapes(ctx, core.ListShapesRequest{CompartmentId: common.String(p.compartment), AvailabilityDomain: common.String(name), Page: page})
			if err != nil {
				return nil, nil, mapError("ListShapes", err)
			}
			for _, s := range res.Items {
				shape := str(s.Shape)
				it := byName[shape]
				if it == nil {
					it = shapeType(s)
					byName[shape] = it
				}
				it.Regions = append(it.Regions, name)
			}
			if res.OpcNextPage == nil || *res.OpcNextPage == "" {
				break
			}
			page = res.OpcNextPage
		}
	}
	out := make([]providers.InstanceType, 0, len(byName))
	for _, it := range byName {
		sort.Strings(it.Regions)
		out = append(out, *it)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	sort.Strings(locations)
	return out, locations, nil
}

// shapeType is a shape's facts: an OCPU is two vCPUs, but one on Arm
// (Ampere) shapes.
func shapeType(s core.Shape) *providers.InstanceType {
	it := &providers.InstanceType{Name: str(s.Shape)}
	arch := "x86_64"
	desc := strings.ToLower(str(s.ProcessorDescription))
	if strings.Contains(desc, "ampere") || strings.Contains(desc, "arm") || strings.Contains(strings.ToLower(it.Name), ".a1.") {
		arch = "arm64"
	}
	it.Architectures = []string{arch}
	if s.Ocpus != nil {
		perOCPU := float32(2)
		if arch == "arm64" {
			perOCPU = 1
		}
		it.VCPUs = uint32(*s.Ocpus * perOCPU)
	}
	if s.MemoryInGBs != nil {
		it.MemoryBytes = uint64(*s.MemoryInGBs * (1 << 30))
	}
	if s.Gpus != nil {
		it.GPUs = uint32(*s.Gpus)
	}
	return it
}

// mapError turns an SDK error into a providers.CloudError of the right
// kind.
func mapError(op string, err error) error {
	se, ok := common.IsServiceError(err)
	if !ok {
		return fmt.Errorf("oci %s: %w", op, err)
	}
	ce := &providers.CloudError{Code: se.GetCode(), Message: se.GetMessage(), Err: err}
	switch code := se.GetHTTPStatusCode(); {
	case outOfCapacity(se):
		ce.Kind = providers.ErrCapacity
	case code == http.StatusTooManyRequests:
		ce.Kind = providers.ErrThrottled
	case code == http.StatusNotFound:
		ce.Kind = providers.ErrNotFound
	case code == http.StatusBadRequest, code == http.StatusUnauthorized, code == http.StatusConflict, code == http.StatusForbidden:
		ce.Kind = providers.ErrInvalid
	}
	return ce
}

func str(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}
