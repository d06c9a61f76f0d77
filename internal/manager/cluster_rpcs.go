package manager

import (
	"context"
	"fmt"
	"time"

	"connectrpc.com/connect"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/internal/manager/api"
	"github.com/norsk-go/norsk-manager/internal/rpcerr"
	"github.com/norsk-go/norsk-manager/pkg/apierr"
	"github.com/norsk-go/norsk-manager/pkg/jobspec"
)

// clusterRPCs serves the Manager service's cluster-membership calls
// (api.ClusterRPCs) from this member's cluster side.
type clusterRPCs struct{ s *Server }

var _ api.ClusterRPCs = (*clusterRPCs)(nil)

func (h *clusterRPCs) AddClusterMember(ctx context.Context, req *connect.Request[managerv1.AddClusterMemberRequest]) (*connect.Response[managerv1.AddClusterMemberResponse], error) {
	m := req.Msg
	if err := jobspec.ValidateID("node", m.GetNode()); err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	if err := h.s.requireClustered("add a member"); err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	res, err := h.s.applyCall(ctx, &storev1.Command{Cmd: &storev1.Command_ExpectMember{ExpectMember: &storev1.ExpectMember{
		Name: m.GetNode(), Witness: m.GetWitness(), By: m.GetBy(),
	}}})
	if err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	h.s.member.events.Record("member-expected", fmt.Sprintf("%s %s was added by %s; it joins when it starts with clusterState: existing",
		witnessOrMember(m.GetWitness()), m.GetNode(), orNone(m.GetBy())), h.s.st().Term(), h.s.st().State().Snapshot().Generation())
	return connect.NewResponse(res.Value.(*managerv1.AddClusterMemberResponse)), nil
}

func (h *clusterRPCs) RemoveClusterMember(ctx context.Context, req *connect.Request[managerv1.RemoveClusterMemberRequest]) (*connect.Response[managerv1.RemoveClusterMemberResponse], error) {
	s := h.s
	node := req.Msg.GetNode()
	if err := jobspec.ValidateID("node", node); err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	if err := s.requireClustered("remove a member"); err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	for attempt := 0; ; attempt++ {
		st := s.st()
		if st.IsLeader() {
			err := s.removeMember(ctx, st, node)
			if err != errHandedOver {
				if err != nil {
					return nil, rpcerr.ToConnect(err)
				}
				return connect.NewResponse(&managerv1.RemoveClusterMemberResponse{}), nil
			}
		}
		if attempt >= 20 {
			return nil, rpcerr.ToConnect(apierr.Unavailablef("no primary to remove %s; retry once a quorum is up", node))
		}
		// The primary does it: pass the call on with the caller's own
		// credential.
		leader, _ := st.Leader()
		if leader != "" && leader != s.cfg.NodeName {
			out, err := s.managerClient(s.memberAPI(leader)).RemoveClusterMember(ctx, api.WithAuth(req, connect.NewRequest(req.Msg)))
			if err == nil || connect.CodeOf(err) != connect.CodeUnavailable {
				return out, err
			}
		}
		select {
		case <-ctx.Done():
			return nil, rpcerr.ToConnect(ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (h *clusterRPCs) ForceStandalone(ctx context.Context, req *connect.Request[managerv1.ForceStandaloneRequest]) (*connect.Response[managerv1.ForceStandaloneResponse], error) {
	gen, err := h.s.forceStandalone(ctx, req.Msg.GetBy())
	if err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	return connect.NewResponse(&managerv1.ForceStandaloneResponse{Generation: gen}), nil
}

func (h *clusterRPCs) LeaveQuorum(ctx context.Context, req *connect.Request[managerv1.LeaveQuorumRequest]) (*connect.Response[managerv1.LeaveQuorumResponse], error) {
	if err := h.s.leaveQuorum(req.Msg.GetBy()); err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	return connect.NewResponse(&managerv1.LeaveQuorumResponse{}), nil
}

func (h *clusterRPCs) AnnounceControlPlane(ctx context.Context, req *connect.Request[managerv1.AnnounceControlPlaneRequest]) (*connect.Response[managerv1.AnnounceControlPlaneResponse], error) {
	raw := req.Msg.GetUrl()
	if err := jobspec.ValidateControlPlaneURL(raw); err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	m := h.s.member
	m.mu.Lock()
	m.announce = announcement{url: raw, interval: time.Duration(req.Msg.GetIntervalMs()) * time.Millisecond, at: h.s.cfg.Clock.Now()}
	m.mu.Unlock()
	h.s.pokeControlPlanes()
	return connect.NewResponse(&managerv1.AnnounceControlPlaneResponse{}), nil
}

func (h *clusterRPCs) GetClusterEvents(ctx context.Context, req *connect.Request[managerv1.GetClusterEventsRequest]) (*connect.Response[managerv1.GetClusterEventsResponse], error) {
	limit, since, err := jobspec.ClusterEventsQuery(req.Msg)
	if err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	return connect.NewResponse(&managerv1.GetClusterEventsResponse{
		Member: h.s.cfg.NodeName,
		Events: h.s.member.events.Query(limit, req.Msg.GetKinds(), since),
	}), nil
}

func (h *clusterRPCs) GetClusterStatus(ctx context.Context, req *connect.Request[managerv1.GetClusterStatusRequest]) (*connect.Response[managerv1.ClusterStatus], error) {
	return connect.NewResponse(h.s.clusterStatus(ctx)), nil
}
