package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1/managerv1connect"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/internal/cluster"
	"github.com/norsk-go/norsk-manager/internal/providers"
	"github.com/norsk-go/norsk-manager/internal/providers/cloudconf"
	"github.com/norsk-go/norsk-manager/internal/providers/cloudhypervisor"
	"github.com/norsk-go/norsk-manager/internal/rpcerr"
	"github.com/norsk-go/norsk-manager/internal/store/state"
	"github.com/norsk-go/norsk-manager/pkg/apierr"
	"github.com/norsk-go/norsk-manager/pkg/jobspec"
)

func (h *Handler) CreateAwsNode(ctx context.Context, req *connect.Request[managerv1.CreateAwsNodeRequest]) (*connect.Response[managerv1.CreateCloudNodeResponse], error) {
	ctx = spareReconcilerContext(ctx)
	m := req.Msg
	cr := providers.CloudRequest{Provider: cloudconf.AWSName, NodeID: m.GetNodeId(), Pool: m.GetPool(), Tags: m.GetTags(), Region: m.GetRegion(),
		Zone: m.GetAvailabilityZone(), InstanceType: m.GetInstanceType(), Fallbacks: m.GetFallbackInstanceTypes(), Subnet: m.GetSubnet(),
		SecurityGroupLabels: m.GetSecurityGroupLabels(), WorkerVersion: m.GetWorkerVersion()}
	return h.createCloud(ctx, req.Header(), cr, func(ctx context.Context, c managerv1connect.ManagerClient, nodeID string) (*connect.Response[managerv1.CreateCloudNodeResponse], error) {
		msg := proto.Clone(m).(*managerv1.CreateAwsNodeRequest)
		msg.NodeId = nodeID
		return c.CreateAwsNode(ctx, cluster.WithAuth(req, connect.NewRequest(msg)))
	})
}

func (h *Handler) CreateOciNode(ctx context.Context, req *connect.Request[managerv1.CreateOciNodeRequest]) (*connect.Response[managerv1.CreateCloudNodeResponse], error) {
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
		return c.CreateOciNode(ctx, cluster.WithAuth(req, connect.NewRequest(msg)))
	})
}

// createCloud checks a cloud create on this member (a bad request is
// refused here, changing nothing), then has the primary run it.
func (h *Handler) createCloud(ctx context.Context, hdr http.Header, cr providers.CloudRequest,
	forward func(context.Context, managerv1connect.ManagerClient, string) (*connect.Response[managerv1.CreateCloudNodeResponse], error),
) (*connect.Response[managerv1.CreateCloudNodeResponse], error) {
	cr, ci, err := h.b.Fleet().CheckCloud(ctx, cr)
	if err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	if h.read().Node(nil, cr.NodeID) != nil || h.read().NodeByName(nil, cr.NodeID) != nil {
		return nil, rpcerr.ToConnect(apierr.AlreadyExistsf("node %q already exists", cr.NodeID))
	}
	if out, ok, err := askPrimary(ctx, h, hdr, func(ctx context.Context, c managerv1connect.ManagerClient) (*connect.Response[managerv1.CreateCloudNodeResponse], error) {
		return forward(ctx, c, cr.NodeID)
	}); ok {
		return out, err
	}
	created, err := h.b.Fleet().CreateCloud(ctx, cr, ci)
	if err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	c := created.Cloud
	return connect.NewResponse(&managerv1.CreateCloudNodeResponse{
		NodeId: created.NodeID, Provider: cr.Provider, InstanceId: created.Instance.ID, Region: c.GetRegion(), Zone: c.GetZone(),
		InstanceType: c.GetInstanceType(), Image: c.GetImage(), Attempts: created.Attempts,
	}), nil
}

func (h *Handler) DescribeInstanceType(ctx context.Context, req *connect.Request[managerv1.DescribeInstanceTypeRequest]) (*connect.Response[managerv1.DescribeInstanceTypeResponse], error) {
	m := req.Msg
	if err := jobspec.ValidateInstanceTypeName(m.GetInstanceType()); err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	it, found, offered, err := h.b.Fleet().Registry().Types().Describe(providerOr(m.GetProvider()), m.GetInstanceType(), m.GetRegion())
	if err != nil {
		return nil, rpcerr.ToConnect(typesErr(err))
	}
	out := &managerv1.DescribeInstanceTypeResponse{}
	if found {
		out.InstanceType, out.Offered = infoOf(it), offered
	}
	return connect.NewResponse(out), nil
}

func (h *Handler) ListInstanceTypes(ctx context.Context, req *connect.Request[managerv1.ListInstanceTypesRequest]) (*connect.Response[managerv1.ListInstanceTypesResponse], error) {
	m := req.Msg
	types := h.b.Fleet().Registry().Types()
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

func (h *Handler) CreateCloudHypervisorNode(ctx context.Context, req *connect.Request[managerv1.CreateCloudHypervisorNodeRequest]) (*connect.Response[managerv1.CreateCloudNodeResponse], error) {
	ctx = spareReconcilerContext(ctx)
	m := req.Msg
	if m.GetShape() == "" {
		return nil, rpcerr.ToConnect(apierr.Invalid("shape", "is required"))
	}
	host := m.GetHost()
	if host == "" {
		p, ok := h.b.Fleet().Registry().Provider(cloudconf.CloudHypervisorName)
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
		return c.CreateCloudHypervisorNode(ctx, cluster.WithAuth(req, connect.NewRequest(msg)))
	})
}

func (h *Handler) ListWorkerSecurityGroups(ctx context.Context, req *connect.Request[managerv1.ListWorkerSecurityGroupsRequest]) (*connect.Response[managerv1.ListWorkerSecurityGroupsResponse], error) {
	region := req.Msg.GetRegion()
	if err := jobspec.ValidateRegion(region); err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	reg := h.b.Fleet().Registry()
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
func (h *Handler) ReloadExternalConfig(ctx context.Context, req *connect.Request[managerv1.ReloadExternalConfigRequest]) (*connect.Response[managerv1.ReloadExternalConfigResponse], error) {
	res, err := h.b.Fleet().Registry().Reload()
	switch {
	case errors.Is(err, providers.ErrNoOverridesFile):
		return nil, rpcerr.ToConnect(apierr.FailedPreconditionf("%v", err))
	case err != nil:
		return nil, rpcerr.ToConnect(apierr.Invalid("overridesFile", "%v; the file in force is unchanged", err))
	}
	out := &managerv1.ReloadExternalConfigResponse{Consistent: true, Members: []*managerv1.ExternalConfigReload{{
		Member: h.cfg.NodeName, File: res.Path, Digest: res.Digest, Changes: res.Changes,
	}}}
	if req.Header().Get(cluster.AskedHeader) != "" {
		return connect.NewResponse(out), nil // a member passed it on: it fans out and audits
	}
	if st := h.b.Store(); st != nil && h.cfg.Clustered {
		for _, mr := range st.State().Snapshot().Members() {
			if mr.GetName() == h.cfg.NodeName || mr.GetWitness() || mr.GetStatus() == state.MemberRetired || mr.GetApiUrl() == "" {
				continue
			}
			entry := &managerv1.ExternalConfigReload{Member: mr.GetName()}
			cctx, cancel := context.WithTimeout(ctx, askPrimaryTimeout*5)
			r, err := h.b.ManagerClient(mr.GetApiUrl()).ReloadExternalConfig(cctx, cluster.WithAuth(req, connect.NewRequest(&managerv1.ReloadExternalConfigRequest{})))
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
		h.cfg.Log.Warn("reloadExternalConfig: could not audit the reload", "err", err)
	}
	return connect.NewResponse(out), nil
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
