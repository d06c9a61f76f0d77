package manager

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sort"
	"strings"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1/managerv1connect"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/internal/automanager"
	"github.com/norsk-go/norsk-manager/internal/providers"
	"github.com/norsk-go/norsk-manager/internal/providers/cloudconf"
	"github.com/norsk-go/norsk-manager/internal/providers/cloudhypervisor"
	"github.com/norsk-go/norsk-manager/internal/rpcerr"
	"github.com/norsk-go/norsk-manager/internal/store/state"
	"github.com/norsk-go/norsk-manager/pkg/apierr"
	"github.com/norsk-go/norsk-manager/pkg/jobspec"
)

// The cloud providers' RPCs: thin handlers over the fleet
// (internal/providers), which checks, creates and answers from the
// instance-type cache.

// buildClouds makes the cloud providers the configuration names.
func (c *Config) buildClouds(log *slog.Logger) ([]providers.Provider, error) {
	var out []providers.Provider
	if c.AWS != nil {
		p, err := providers.BuildCloud(cloudconf.AWSName, c.AWS, log)
		if err != nil {
			return nil, fmt.Errorf("manager: %w", err)
		}
		out = append(out, p)
	}
	if c.OCI != nil {
		p, err := providers.BuildCloud(cloudconf.OCIName, c.OCI, log)
		if err != nil {
			return nil, fmt.Errorf("manager: %w", err)
		}
		out = append(out, p)
	}
	if c.CloudHypervisor != nil {
		p, err := cloudhypervisor.New(*c.CloudHypervisor, nil, log)
		if err != nil {
			return nil, fmt.Errorf("manager: %w", err)
		}
		out = append(out, p)
	}
	return out, nil
}

// cloudTiers are the elastic tiers of the cloud providers' pools, each
// with the instance types the cache knows in the regions the overrides
// file runs, cheapest (as listed) first.
func (s *Server) cloudTiers() []automanager.ElasticTier {
	reg := s.fleet.Registry()
	types, o := reg.Types(), reg.Overrides()
	var out []automanager.ElasticTier
	if a := s.cfg.AWS; a != nil {
		for _, tier := range sortedKeysOf(a.Pools) {
			pc := a.Pools[tier]
			et := automanager.ElasticTier{Tier: tier, Provider: cloudconf.AWSName}
			for _, region := range pc.Regions {
				if !o.RunsRegion(cloudconf.AWSName, region) {
					continue
				}
				zones := pc.Zones
				if len(zones) == 0 {
					zones = []string{""}
				}
				var offered []providers.InstanceType
				for _, name := range pc.InstanceTypes {
					if it, ok, err := types.Type(cloudconf.AWSName, region, name); err == nil && ok && len(it.Regions) > 0 {
						offered = append(offered, it)
					}
				}
				et.Types = append(et.Types, typeLadder(offered, zones, region, func(t *automanager.ElasticType) {
					t.SecurityGroups, t.Subnet = pc.SecurityGroups, pc.Subnet
				})...)
			}
			out = append(out, et)
		}
	}
	if c := s.cfg.OCI; c != nil {
		for _, tier := range sortedKeysOf(c.Pools) {
			pc := c.Pools[tier]
			et := automanager.ElasticTier{Tier: tier, Provider: cloudconf.OCIName}
			for _, region := range pc.Regions {
				if !o.RunsRegion(cloudconf.OCIName, region) {
					continue
				}
				ads := pc.AvailabilityDomains
				if len(ads) == 0 {
					ads, _ = types.Locations(cloudconf.OCIName, region)
				}
				var offered []providers.InstanceType
				for _, name := range pc.Shapes {
					if it, ok, err := types.Type(cloudconf.OCIName, region, name); err == nil && ok {
						offered = append(offered, it)
					}
				}
				et.Types = append(et.Types, typeLadder(offered, ads, region, func(t *automanager.ElasticType) {
					t.Subnet, t.OCPUs, t.MemoryGBs = pc.Subnet, pc.OCPUs, pc.MemoryGBs
				})...)
			}
			out = append(out, et)
		}
	}
	out = append(out, s.hypervisorTiers()...)
	return out
}

// hypervisorTiers are the cloud-hypervisor pools' tiers: each host's
// shapes (smallest first, as the pool lists them), a shape on a host with
// no room for it marked so (job why says it).
func (s *Server) hypervisorTiers() []automanager.ElasticTier {
	c := s.cfg.CloudHypervisor
	if c == nil {
		return nil
	}
	reg := s.fleet.Registry()
	pp, ok := reg.Provider(cloudconf.CloudHypervisorName)
	if !ok {
		return nil
	}
	prov := pp.(*cloudhypervisor.Provider)
	types, o := reg.Types(), reg.Overrides()
	var out []automanager.ElasticTier
	for _, tier := range sortedKeysOf(c.Pools) {
		pc := c.Pools[tier]
		et := automanager.ElasticTier{Tier: tier, Provider: cloudconf.CloudHypervisorName}
		hosts := pc.Hosts
		if len(hosts) == 0 {
			hosts = o.Regions(cloudconf.CloudHypervisorName)
		}
		for _, name := range pc.Shapes {
			for _, host := range hosts {
				if !o.RunsRegion(cloudconf.CloudHypervisorName, host) {
					continue
				}
				it, found, err := types.Type(cloudconf.CloudHypervisorName, host, name)
				if err != nil || !found {
					continue
				}
				et.Types = append(et.Types, automanager.ElasticType{Name: it.Name, VCPUs: it.VCPUs, Region: host, Zone: host,
					Unavailable: prov.OutOfRoom(host, it.VCPUs, it.MemoryBytes, it.GPUs)})
			}
		}
		out = append(out, et)
	}
	return out
}

// typeLadder is one region's types of a tier, cheapest first, each in the
// first zone offering it, with every later (type, zone) as its fallbacks.
func typeLadder(offered []providers.InstanceType, zones []string, region string, set func(*automanager.ElasticType)) []automanager.ElasticType {
	type step struct {
		it   providers.InstanceType
		zone string
	}
	var steps []step
	for _, it := range offered {
		for _, z := range zones {
			if z == "" || slices.Contains(it.Regions, z) || slices.Contains(it.Regions, region) {
				steps = append(steps, step{it, z})
			}
		}
	}
	var out []automanager.ElasticType
	seen := map[string]bool{}
	for i, st := range steps {
		if seen[st.it.Name] {
			continue // a type's first zone; the others are fallbacks
		}
		seen[st.it.Name] = true
		t := automanager.ElasticType{Name: st.it.Name, VCPUs: st.it.VCPUs, Region: region, Zone: st.zone}
		for _, next := range steps[i+1:] {
			fb := next.it.Name
			if next.zone != "" {
				fb += "@" + next.zone
			}
			t.Fallbacks = append(t.Fallbacks, fb)
		}
		set(&t)
		out = append(out, t)
	}
	return out
}

func sortedKeysOf[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func (h *handler) CreateAwsNode(ctx context.Context, req *connect.Request[managerv1.CreateAwsNodeRequest]) (*connect.Response[managerv1.CreateCloudNodeResponse], error) {
	ctx = spareReconcilerContext(ctx)
	m := req.Msg
	cr := providers.CloudRequest{Provider: cloudconf.AWSName, NodeID: m.GetNodeId(), Pool: m.GetPool(), Tags: m.GetTags(), Region: m.GetRegion(),
		Zone: m.GetAvailabilityZone(), InstanceType: m.GetInstanceType(), Fallbacks: m.GetFallbackInstanceTypes(), Subnet: m.GetSubnet(),
		SecurityGroupLabels: m.GetSecurityGroupLabels(), WorkerVersion: m.GetWorkerVersion()}
	return h.createCloud(ctx, req.Header(), cr, func(ctx context.Context, c managerv1connect.ManagerClient, nodeID string) (*connect.Response[managerv1.CreateCloudNodeResponse], error) {
		msg := proto.Clone(m).(*managerv1.CreateAwsNodeRequest)
		msg.NodeId = nodeID
		return c.CreateAwsNode(ctx, withAuth(req, connect.NewRequest(msg)))
	})
}

func (h *handler) CreateOciNode(ctx context.Context, req *connect.Request[managerv1.CreateOciNodeRequest]) (*connect.Response[managerv1.CreateCloudNodeResponse], error) {
	ctx = spareReconcilerContext(ctx)
	m := req.Msg
	if err := jobspec.ValidateOciNode(m); err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	cr := providers.CloudRequest{Provider: cloudconf.OCIName, NodeID: m.GetNodeId(), Pool: m.GetPool(), Tags: m.GetTags(), Region: m.GetRegion(),
		Zone: m.GetAvailabilityDomain(), InstanceType: m.GetShape(), Fallbacks: m.GetFallbackShapes(), Subnet: m.GetSubnet(),
		WorkerVersion: m.GetWorkerVersion(), OCPUs: m.GetOcpus(), MemoryGBs: m.GetMemoryGbs()}
	return h.createCloud(ctx, req.Header(), cr, func(ctx context.Context, c managerv1connect.ManagerClient, nodeID string) (*connect.Response[managerv1.CreateCloudNodeResponse], error) {
		msg := proto.Clone(m).(*managerv1.CreateOciNodeRequest)
		msg.NodeId = nodeID
		return c.CreateOciNode(ctx, withAuth(req, connect.NewRequest(msg)))
	})
}

// createCloud checks a cloud create on this member (a bad request is
// refused here, changing nothing), then has the primary run it.
func (h *handler) createCloud(ctx context.Context, hdr http.Header, cr providers.CloudRequest,
	forward func(context.Context, managerv1connect.ManagerClient, string) (*connect.Response[managerv1.CreateCloudNodeResponse], error),
) (*connect.Response[managerv1.CreateCloudNodeResponse], error) {
	cr, ci, err := h.s.fleet.CheckCloud(ctx, cr)
	if err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	if h.read().Node(nil, cr.NodeID) != nil || h.read().NodeByName(nil, cr.NodeID) != nil {
		return nil, rpcerr.ToConnect(apierr.AlreadyExistsf("node %q already exists", cr.NodeID))
	}
	if out, ok, err := askPrimary(ctx, h.s, hdr, func(ctx context.Context, c managerv1connect.ManagerClient) (*connect.Response[managerv1.CreateCloudNodeResponse], error) {
		return forward(ctx, c, cr.NodeID)
	}); ok {
		return out, err
	}
	created, err := h.s.fleet.CreateCloud(ctx, cr, ci)
	if err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	c := created.Cloud
	return connect.NewResponse(&managerv1.CreateCloudNodeResponse{
		NodeId: created.NodeID, Provider: cr.Provider, InstanceId: created.Instance.ID, Region: c.GetRegion(), Zone: c.GetZone(),
		InstanceType: c.GetInstanceType(), Image: c.GetImage(), Attempts: created.Attempts,
	}), nil
}

// typesErr maps the instance-type cache's errors to the API's codes.
func typesErr(err error) error {
	switch {
	case errors.Is(err, providers.ErrNotWarm):
		return apierr.Unavailablef("%v", err)
	case errors.Is(err, providers.ErrNotRun), errors.Is(err, providers.ErrNoRegion):
		return apierr.FailedPreconditionf("%v", err)
	}
	return err
}

func providerOr(p string) string {
	if p == "" {
		return cloudconf.AWSName // the seed's default
	}
	return p
}

func infoOf(it providers.InstanceType) *managerv1.InstanceTypeInfo {
	return &managerv1.InstanceTypeInfo{InstanceType: it.Name, Vcpus: it.VCPUs, MemoryBytes: it.MemoryBytes,
		Architectures: it.Architectures, Regions: it.Regions, Gpus: it.GPUs}
}

func (h *handler) DescribeInstanceType(ctx context.Context, req *connect.Request[managerv1.DescribeInstanceTypeRequest]) (*connect.Response[managerv1.DescribeInstanceTypeResponse], error) {
	m := req.Msg
	if err := jobspec.ValidateInstanceTypeName(m.GetInstanceType()); err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	it, found, offered, err := h.s.fleet.Registry().Types().Describe(providerOr(m.GetProvider()), m.GetInstanceType(), m.GetRegion())
	if err != nil {
		return nil, rpcerr.ToConnect(typesErr(err))
	}
	out := &managerv1.DescribeInstanceTypeResponse{}
	if found {
		out.InstanceType, out.Offered = infoOf(it), offered
	}
	return connect.NewResponse(out), nil
}

func (h *handler) ListInstanceTypes(ctx context.Context, req *connect.Request[managerv1.ListInstanceTypesRequest]) (*connect.Response[managerv1.ListInstanceTypesResponse], error) {
	m := req.Msg
	types := h.s.fleet.Registry().Types()
	provider := providerOr(m.GetProvider())
	// The provider (and region) must be run; aws and oci cannot enumerate
	// their types (the seed's known: false, with an empty list).
	locs, err := types.Locations(provider, "")
	if err != nil {
		return nil, rpcerr.ToConnect(typesErr(err))
	}
	if r := m.GetRegion(); r != "" && !slices.Contains(locs, r) {
		return nil, rpcerr.ToConnect(apierr.FailedPreconditionf("%v: %s %q (it runs %s)", providers.ErrNoRegion, provider, r, strings.Join(locs, ", ")))
	}
	if provider != cloudconf.CloudHypervisorName {
		return connect.NewResponse(&managerv1.ListInstanceTypesResponse{Known: false}), nil
	}
	// The host agents' shapes (one host's with a region), each with the
	// hosts that offer it.
	out := &managerv1.ListInstanceTypesResponse{Known: true}
	byName := map[string]*managerv1.InstanceTypeInfo{}
	for _, host := range locs {
		if r := m.GetRegion(); r != "" && host != r {
			continue
		}
		for _, it := range types.TypesIn(provider, host) {
			if have, ok := byName[it.Name]; ok {
				have.Regions = append(have.Regions, host)
				continue
			}
			info := infoOf(it)
			info.Regions = []string{host}
			byName[it.Name] = info
			out.InstanceTypes = append(out.InstanceTypes, info)
		}
	}
	sort.Slice(out.InstanceTypes, func(i, j int) bool {
		a, b := out.InstanceTypes[i], out.InstanceTypes[j]
		if a.GetVcpus() != b.GetVcpus() {
			return a.GetVcpus() < b.GetVcpus()
		}
		return a.GetInstanceType() < b.GetInstanceType()
	})
	return connect.NewResponse(out), nil
}

func (h *handler) CreateCloudHypervisorNode(ctx context.Context, req *connect.Request[managerv1.CreateCloudHypervisorNodeRequest]) (*connect.Response[managerv1.CreateCloudNodeResponse], error) {
	ctx = spareReconcilerContext(ctx)
	m := req.Msg
	if m.GetShape() == "" {
		return nil, rpcerr.ToConnect(apierr.Invalid("shape", "is required"))
	}
	host := m.GetHost()
	if host == "" {
		p, ok := h.s.fleet.Registry().Provider(cloudconf.CloudHypervisorName)
		if !ok {
			return nil, rpcerr.ToConnect(apierr.FailedPreconditionf("this Manager runs no %s provider (configure providers.cloudHypervisor in config.yaml)", cloudconf.CloudHypervisorName))
		}
		var err error
		if host, err = p.(*cloudhypervisor.Provider).PickHost(ctx, m.GetShape(), nil); err != nil {
			switch {
			case errors.Is(err, providers.ErrCapacity):
				return nil, rpcerr.ToConnect(apierr.New(apierr.ResourceExhausted, "%v", err))
			case errors.Is(err, providers.ErrInvalid):
				return nil, rpcerr.ToConnect(apierr.Invalid("shape", "%v", err))
			}
			return nil, rpcerr.ToConnect(apierr.Unavailablef("%v", err))
		}
	}
	cr := providers.CloudRequest{Provider: cloudconf.CloudHypervisorName, NodeID: m.GetNodeId(), Pool: m.GetPool(), Tags: m.GetTags(),
		Region: host, Zone: host, InstanceType: m.GetShape(), WorkerVersion: m.GetWorkerVersion()}
	return h.createCloud(ctx, req.Header(), cr, func(ctx context.Context, c managerv1connect.ManagerClient, nodeID string) (*connect.Response[managerv1.CreateCloudNodeResponse], error) {
		msg := proto.Clone(m).(*managerv1.CreateCloudHypervisorNodeRequest)
		msg.NodeId, msg.Host = nodeID, host
		return c.CreateCloudHypervisorNode(ctx, withAuth(req, connect.NewRequest(msg)))
	})
}

func (h *handler) ListWorkerSecurityGroups(ctx context.Context, req *connect.Request[managerv1.ListWorkerSecurityGroupsRequest]) (*connect.Response[managerv1.ListWorkerSecurityGroupsResponse], error) {
	region := req.Msg.GetRegion()
	if err := jobspec.ValidateRegion(region); err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	reg := h.s.fleet.Registry()
	p, ok := reg.Provider(cloudconf.AWSName)
	if !ok {
		return nil, rpcerr.ToConnect(apierr.FailedPreconditionf("this Manager runs no aws provider (worker security groups are EC2's)"))
	}
	if !reg.Overrides().RunsRegion(cloudconf.AWSName, region) {
		return nil, rpcerr.ToConnect(apierr.FailedPreconditionf("this Manager runs no aws region %q (the overrides file names %s)", region, strings.Join(reg.Overrides().Regions(cloudconf.AWSName), ", ")))
	}
	groups, err := p.(providers.SecurityGroups).WorkerSecurityGroups(ctx, region)
	if err != nil {
		return nil, rpcerr.ToConnect(apierr.Unavailablef("aws %s: %v", region, err))
	}
	out := &managerv1.ListWorkerSecurityGroupsResponse{}
	for _, g := range groups {
		wg := &managerv1.WorkerSecurityGroup{GroupId: g.ID, GroupName: g.Name, Label: g.Label, Description: g.Description, Base: g.Base, VpcId: g.VPC}
		for _, r := range g.Ingress {
			wg.Ingress = append(wg.Ingress, &managerv1.SecurityGroupRule{Protocol: r.Protocol, FromPort: r.FromPort, ToPort: r.ToPort,
				Cidrs: r.CIDRs, SourceGroups: r.SourceGroups, Description: r.Description})
		}
		out.Groups = append(out.Groups, wg)
	}
	return connect.NewResponse(out), nil
}

// ReloadExternalConfig reloads the overrides file here, then on every
// other full member (each reads its own copy; operations.md says how to
// keep them the same), and audits the reload once.
func (h *handler) ReloadExternalConfig(ctx context.Context, req *connect.Request[managerv1.ReloadExternalConfigRequest]) (*connect.Response[managerv1.ReloadExternalConfigResponse], error) {
	res, err := h.s.fleet.Registry().Reload()
	switch {
	case errors.Is(err, providers.ErrNoOverridesFile):
		return nil, rpcerr.ToConnect(apierr.FailedPreconditionf("%v", err))
	case err != nil:
		return nil, rpcerr.ToConnect(apierr.Invalid("overridesFile", "%v; the file in force is unchanged", err))
	}
	out := &managerv1.ReloadExternalConfigResponse{Consistent: true, Members: []*managerv1.ExternalConfigReload{{
		Member: h.s.cfg.NodeName, File: res.Path, Digest: res.Digest, Changes: res.Changes,
	}}}
	if req.Header().Get(askedHeader) != "" {
		return connect.NewResponse(out), nil // a member passed it on: it fans out and audits
	}
	if st := h.s.st(); st != nil && h.s.cfg.clustered() {
		for _, mr := range st.State().Snapshot().Members() {
			if mr.GetName() == h.s.cfg.NodeName || mr.GetWitness() || mr.GetStatus() == state.MemberRetired || mr.GetApiUrl() == "" {
				continue
			}
			entry := &managerv1.ExternalConfigReload{Member: mr.GetName()}
			cctx, cancel := context.WithTimeout(ctx, askPrimaryTimeout*5)
			r, err := h.s.managerClient(mr.GetApiUrl()).ReloadExternalConfig(cctx, withAuth(req, connect.NewRequest(&managerv1.ReloadExternalConfigRequest{})))
			cancel()
			switch {
			case err != nil:
				entry.Error = err.Error()
			case len(r.Msg.GetMembers()) > 0:
				entry = r.Msg.GetMembers()[0]
			}
			out.Members = append(out.Members, entry)
		}
	}
	for _, e := range out.Members {
		if e.GetError() != "" || e.GetDigest() != out.Members[0].GetDigest() {
			out.Consistent = false
		}
	}
	payload := fmt.Sprintf("overrides file %s (sha256 %s): %d change(s)", res.Path, res.Digest, len(res.Changes))
	if len(res.Changes) > 0 {
		payload += ": " + strings.Join(res.Changes, "; ")
	}
	if !out.Consistent {
		payload += "; members disagree (see the reply)"
	}
	if len(payload) > 4000 {
		payload = payload[:4000] + "…"
	}
	if _, err := h.apply(ctx, &storev1.Command{Cmd: &storev1.Command_AppendAudit{AppendAudit: &storev1.AppendAudit{
		Source: state.AuditSourceManager, Kind: "ReloadExternalConfig", Payload: payload,
	}}}); err != nil {
		h.s.log.Warn("reloadExternalConfig: could not audit the reload", "err", err)
	}
	return connect.NewResponse(out), nil
}
