package cluster

import (
	"context"
	"fmt"
	"time"

	"connectrpc.com/connect"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/internal/rpcerr"
	"github.com/norsk-go/norsk-manager/pkg/apierr"
	"github.com/norsk-go/norsk-manager/pkg/jobspec"
)

// RPCs serves the Manager service's cluster-membership calls (the
// handlers' api.ClusterRPCs): they change raft's configuration and the
// member's recovery files, so they are the member's, not the handlers'.
type RPCs struct{ m *Member }

// RPCs is the member's side of the Manager service.
func (m *Member) RPCs() *RPCs { return &RPCs{m} }

// AddClusterMember expects a new member: it joins when it starts with
// clusterState: existing.
func (h *RPCs) AddClusterMember(ctx context.Context, req *connect.Request[managerv1.AddClusterMemberRequest]) (*connect.Response[managerv1.AddClusterMemberResponse], error) {
	j := req.Msg
	if err := jobspec.ValidateID("node", j.GetNode()); err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	if err := h.m.requireClustered("add a member"); err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	res, err := h.m.ApplyCall(ctx, &storev1.Command{Cmd: &storev1.Command_ExpectMember{ExpectMember: &storev1.ExpectMember{
		Name: j.GetNode(), Witness: j.GetWitness(), By: j.GetBy(),
	}}})
	if err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	h.m.events.Record("member-expected", fmt.Sprintf("%s %s was added by %s; it joins when it starts with clusterState: existing",
		witnessOrMember(j.GetWitness()), j.GetNode(), orNone(j.GetBy())), h.m.Store().Term(), h.m.Store().State().Snapshot().Generation())
	return connect.NewResponse(res.Value.(*managerv1.AddClusterMemberResponse)), nil
}

// RemoveClusterMember takes a member out of the raft configuration and
// retires it; a follower passes the call to the primary, and a primary
// removing itself hands its role over first.
func (h *RPCs) RemoveClusterMember(ctx context.Context, req *connect.Request[managerv1.RemoveClusterMemberRequest]) (*connect.Response[managerv1.RemoveClusterMemberResponse], error) {
	m := h.m
	node := req.Msg.GetNode()
	if err := jobspec.ValidateID("node", node); err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	if err := m.requireClustered("remove a member"); err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	for attempt := 0; ; attempt++ {
		st := m.Store()
		if st.IsLeader() {
			err := m.removeMember(ctx, st, node)
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
		if leader != "" && leader != m.cfg.Name {
			out, err := m.ManagerClient(m.MemberAPI(leader)).RemoveClusterMember(ctx, WithAuth(req, connect.NewRequest(req.Msg)))
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

// ForceStandalone restarts this member, cut off from its quorum, as a
// cluster of one at the next generation.
func (h *RPCs) ForceStandalone(ctx context.Context, req *connect.Request[managerv1.ForceStandaloneRequest]) (*connect.Response[managerv1.ForceStandaloneResponse], error) {
	gen, err := h.m.forceStandalone(ctx, req.Msg.GetBy())
	if err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	return connect.NewResponse(&managerv1.ForceStandaloneResponse{Generation: gen}), nil
}

// LeaveQuorum discards this member's copy: it rejoins empty, as a follower.
func (h *RPCs) LeaveQuorum(ctx context.Context, req *connect.Request[managerv1.LeaveQuorumRequest]) (*connect.Response[managerv1.LeaveQuorumResponse], error) {
	if err := h.m.leaveQuorum(req.Msg.GetBy()); err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	return connect.NewResponse(&managerv1.LeaveQuorumResponse{}), nil
}

// AnnounceControlPlane records this member's norsk-mgr URL; the primary
// tells the workers.
func (h *RPCs) AnnounceControlPlane(ctx context.Context, req *connect.Request[managerv1.AnnounceControlPlaneRequest]) (*connect.Response[managerv1.AnnounceControlPlaneResponse], error) {
	raw := req.Msg.GetUrl()
	if err := jobspec.ValidateControlPlaneURL(raw); err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	m := h.m
	m.mu.Lock()
	m.announce = announcement{url: raw, interval: time.Duration(req.Msg.GetIntervalMs()) * time.Millisecond, at: h.m.cfg.Clock.Now()}
	m.mu.Unlock()
	h.m.pokeControlPlanes()
	return connect.NewResponse(&managerv1.AnnounceControlPlaneResponse{}), nil
}

// GetClusterEvents reads this member's cluster-event log.
func (h *RPCs) GetClusterEvents(ctx context.Context, req *connect.Request[managerv1.GetClusterEventsRequest]) (*connect.Response[managerv1.GetClusterEventsResponse], error) {
	limit, since, err := jobspec.ClusterEventsQuery(req.Msg)
	if err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	return connect.NewResponse(&managerv1.GetClusterEventsResponse{
		Member: h.m.cfg.Name,
		Events: h.m.events.Query(limit, req.Msg.GetKinds(), since),
	}), nil
}

// GetClusterStatus gathers every member's own view into the cluster's.
func (h *RPCs) GetClusterStatus(ctx context.Context, req *connect.Request[managerv1.GetClusterStatusRequest]) (*connect.Response[managerv1.ClusterStatus], error) {
	return connect.NewResponse(h.m.clusterStatus(ctx)), nil
}
