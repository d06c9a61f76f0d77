package api

import (
	"context"

	"connectrpc.com/connect"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/internal/automanager"
	"github.com/norsk-go/norsk-manager/internal/rpcerr"
	"github.com/norsk-go/norsk-manager/pkg/apierr"
	"github.com/norsk-go/norsk-manager/pkg/jobspec"
	"github.com/norsk-go/norsk-manager/pkg/placement"
)

// ExplainPlacement answers where an instance of a job would be placed now,
// against this member's copy of the nodes and instances, and why every
// other node would not take it (the placement every automatic placement
// will use). It binds nothing.
func (h *Handler) ExplainPlacement(ctx context.Context, req *connect.Request[managerv1.ExplainPlacementRequest]) (*connect.Response[managerv1.ExplainPlacementResponse], error) {
	m := req.Msg
	if err := jobspec.ValidateID("jobId", m.GetJobId()); err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	role := m.GetRole()
	if role == "" {
		role = "primary"
	}
	r := h.read()
	rec := r.Job(nil, m.GetJobId())
	if rec == nil {
		return nil, rpcerr.ToConnect(apierr.NotFoundf("no job %s", apierr.Quote(m.GetJobId())))
	}
	var nodes []*managerv1.Node
	for _, n := range r.Nodes(nil) {
		nodes = append(nodes, r.NodeView(n))
	}
	var live []placement.JobInstance
	r.Instances(nil, func(in *managerv1.Instance) bool {
		if in.GetPhase() != managerv1.InstancePhase_INSTANCE_PHASE_STOPPED {
			if j := r.Job(nil, in.GetJobId()); j != nil {
				live = append(live, placement.JobInstance{Instance: in, Job: j.GetJob(), Bundle: r.Bundle(nil, j.GetJob().GetTags()[placement.TagBundleID])})
			}
		}
		return true
	})
	bundle := r.Bundle(nil, rec.GetJob().GetTags()[placement.TagBundleID])
	if m.GetRole() == "" {
		if _, replica, _, ok := placement.BundleJobOf(rec.GetJob()); ok {
			role = jobspec.ReplicaRole(replica)
		}
	}
	out, err := placement.ExplainBundleJob(h.b.PlacementConfig(), nodes, live, rec.GetJob(), bundle, role, m.GetPool())
	if err != nil {
		return nil, rpcerr.ToConnect(apierr.Invalid("jobId", "%v", err))
	}
	if out.GetNodeId() == "" {
		// No node takes it: say what an elastic tier of its pool would
		// create, and why cheaper instance types would not do.
		req := placement.RequestForJob(h.b.PlacementConfig(), rec.GetJob(), bundle, role)
		if m.GetPool() != "" {
			req.Pool = m.GetPool()
		}
		out.Elastic = automanager.ExplainElastic(automanager.Policy{Placement: h.b.PlacementConfig(), Elastic: h.b.ElasticTiers()}, req)
	}
	return connect.NewResponse(out), nil
}
