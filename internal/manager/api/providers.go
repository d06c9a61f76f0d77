package api

import (
	"context"
	"strings"

	"connectrpc.com/connect"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1/managerv1connect"
	"github.com/norsk-go/norsk-manager/internal/auth"
	"github.com/norsk-go/norsk-manager/internal/cluster"
	"github.com/norsk-go/norsk-manager/internal/providers"
	"github.com/norsk-go/norsk-manager/internal/providers/mock"
	"github.com/norsk-go/norsk-manager/internal/rpcerr"
	"github.com/norsk-go/norsk-manager/internal/store/state"
	"github.com/norsk-go/norsk-manager/pkg/apierr"
	"github.com/norsk-go/norsk-manager/pkg/jobspec"
)

// CreateMockNode creates an elastic node on a free mock host. The primary
// chooses the host (a follower asks it), so two calls never pick the same.
func (h *Handler) CreateMockNode(ctx context.Context, req *connect.Request[managerv1.CreateMockNodeRequest]) (*connect.Response[managerv1.CreateMockNodeResponse], error) {
	p := h.b.MockProvider()
	if p == nil {
		return nil, rpcerr.ToConnect(apierr.FailedPreconditionf("this Manager has no mock provider (configure providers.mock in config.yaml)"))
	}
	m := req.Msg
	pool := m.GetPool()
	if pool == "" {
		pool = p.Config().Pools[0]
	}
	if !p.Config().Serves(pool) {
		return nil, rpcerr.ToConnect(apierr.Invalid("pool", "the mock provider does not create nodes in pool %s (it serves %s)", apierr.Quote(pool), strings.Join(p.Config().Pools, ", ")))
	}
	if err := jobspec.ValidateTags("tags", m.GetTags()); err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	ctx = spareReconcilerContext(ctx)
	if _, spare := m.GetTags()[state.SpareTag]; spare && !providers.IsSpareReconciler(ctx) {
		return nil, rpcerr.ToConnect(apierr.Invalid("tags", "the %s tag of an elastic node belongs to the AutoManager's reconciler", apierr.Quote(state.SpareTag)))
	}
	nodeID := m.GetNodeId()
	if nodeID == "" {
		nodeID = auth.RandomToken("mock-", 4)
	} else if err := jobspec.ValidateID("nodeId", nodeID); err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	if h.read().Node(nil, nodeID) != nil || h.read().NodeByName(nil, nodeID) != nil {
		return nil, rpcerr.ToConnect(apierr.AlreadyExistsf("node %s already exists", apierr.Quote(nodeID)))
	}
	if out, ok, err := askPrimary(ctx, h, req.Header(), func(ctx context.Context, c managerv1connect.ManagerClient) (*connect.Response[managerv1.CreateMockNodeResponse], error) {
		msg := &managerv1.CreateMockNodeRequest{NodeId: nodeID, Pool: pool, Tags: m.GetTags()}
		return c.CreateMockNode(ctx, cluster.WithAuth(req, connect.NewRequest(msg)))
	}); ok {
		return out, err
	}
	created, err := h.b.Fleet().CreateReserved(ctx, mock.Name, nodeID, pool, m.GetTags())
	if err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	return connect.NewResponse(&managerv1.CreateMockNodeResponse{NodeId: nodeID, Host: created.Instance.ID}), nil
}

// spareReconcilerContext marks ctx as the spare reconciler's when the
// caller is this member's own AutoManager (its internal credential): only
// it may give an elastic node the spare tags.
func spareReconcilerContext(ctx context.Context) context.Context {
	if id, ok := auth.CallerOf(ctx); ok && id.Name == auth.AutoManagerCaller {
		return providers.AsSpareReconciler(ctx)
	}
	return ctx
}
