package api

import (
	"context"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1/managerv1connect"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/internal/cluster"
	"github.com/norsk-go/norsk-manager/internal/providers"
	"github.com/norsk-go/norsk-manager/internal/rpcerr"
	"github.com/norsk-go/norsk-manager/internal/store/state"
	"github.com/norsk-go/norsk-manager/pkg/apierr"
	"github.com/norsk-go/norsk-manager/pkg/jobspec"
)

// NodeView renders a node with the live facts of its connection.
func (h *Handler) NodeView(r *state.Read, rec *storev1.NodeRecord) *managerv1.Node {
	n := r.NodeView(rec)
	ctl := h.b.Controller()
	if ctl == nil {
		// A follower: the streams are the primary's (ListNodes there shows
		// them live).
		return n
	}
	live := ctl.Live(n.GetNodeId())
	n.Connected = live.Connected
	n.Load = live.Load
	if !live.LastSeen.IsZero() {
		n.LastSeen = timestamppb.New(live.LastSeen)
	}
	return n
}

func (h *Handler) ListNodes(ctx context.Context, req *connect.Request[managerv1.ListNodesRequest]) (*connect.Response[managerv1.ListNodesResponse], error) {
	// Only the primary holds the workers' streams and their live load:
	// a follower asks it, and answers from its own copy (live facts
	// absent) when it cannot.
	if out, ok, err := askPrimary(ctx, h, req.Header(), func(ctx context.Context, c managerv1connect.ManagerClient) (*connect.Response[managerv1.ListNodesResponse], error) {
		return c.ListNodes(ctx, cluster.WithAuth(req, connect.NewRequest(req.Msg)))
	}); ok {
		return out, err
	}
	r := h.read()
	out := &managerv1.ListNodesResponse{}
	for _, rec := range r.Nodes(nil) {
		out.Nodes = append(out.Nodes, h.NodeView(r, rec))
	}
	return connect.NewResponse(out), nil
}

func (h *Handler) TerminateNode(ctx context.Context, req *connect.Request[managerv1.TerminateNodeRequest]) (*connect.Response[managerv1.TerminateNodeResponse], error) {
	if _, err := h.requireNode(req.Msg.GetNodeId()); err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	if _, err := h.apply(ctx, &storev1.Command{Cmd: &storev1.Command_TerminateNode{TerminateNode: &storev1.TerminateNode{NodeId: req.Msg.GetNodeId()}}}); err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	return connect.NewResponse(&managerv1.TerminateNodeResponse{}), nil
}

func (h *Handler) SetNodeTags(ctx context.Context, req *connect.Request[managerv1.SetNodeTagsRequest]) (*connect.Response[managerv1.SetNodeTagsResponse], error) {
	if _, err := h.requireNode(req.Msg.GetNodeId()); err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	if err := jobspec.ValidateNodeTags(req.Msg.GetTags()); err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	if _, err := h.apply(ctx, &storev1.Command{Cmd: &storev1.Command_SetNodeTags{SetNodeTags: &storev1.SetNodeTags{NodeId: req.Msg.GetNodeId(), Tags: req.Msg.GetTags(),
		ByReconciler: providers.IsSpareReconciler(spareReconcilerContext(ctx))}}}); err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	r := h.read()
	rec := r.Node(nil, req.Msg.GetNodeId())
	if rec == nil {
		return nil, rpcerr.ToConnect(apierr.NotFoundf("node %s was removed meanwhile", apierr.Quote(req.Msg.GetNodeId())))
	}
	return connect.NewResponse(&managerv1.SetNodeTagsResponse{Node: h.NodeView(r, rec)}), nil
}

func (h *Handler) idleExpiry(rec *storev1.NodeRecord) *managerv1.NodeIdleExpiry {
	out := &managerv1.NodeIdleExpiry{
		NodeId:                rec.GetNode().GetNodeId(),
		IdleExpiryMs:          rec.GetNode().GetIdleExpiryMs(),
		EffectiveIdleExpiryMs: h.cfg.DefaultIdleExpiry.Milliseconds(),
	}
	if out.IdleExpiryMs > 0 {
		out.EffectiveIdleExpiryMs = out.IdleExpiryMs
	}
	return out
}

func (h *Handler) GetNodeIdleExpiry(ctx context.Context, req *connect.Request[managerv1.GetNodeIdleExpiryRequest]) (*connect.Response[managerv1.NodeIdleExpiry], error) {
	rec, err := h.requireNode(req.Msg.GetNodeId())
	if err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	return connect.NewResponse(h.idleExpiry(rec)), nil
}

func (h *Handler) SetNodeIdleExpiry(ctx context.Context, req *connect.Request[managerv1.SetNodeIdleExpiryRequest]) (*connect.Response[managerv1.NodeIdleExpiry], error) {
	if _, err := h.requireNode(req.Msg.GetNodeId()); err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	if err := jobspec.ValidateIdleExpiry(req.Msg.GetIdleExpiryMs()); err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	if _, err := h.apply(ctx, &storev1.Command{Cmd: &storev1.Command_SetNodeIdleExpiry{SetNodeIdleExpiry: &storev1.SetNodeIdleExpiry{
		NodeId: req.Msg.GetNodeId(), IdleExpiryMs: req.Msg.GetIdleExpiryMs(),
	}}}); err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	rec := h.read().Node(nil, req.Msg.GetNodeId())
	if rec == nil {
		return nil, rpcerr.ToConnect(apierr.NotFoundf("node %s was removed meanwhile", apierr.Quote(req.Msg.GetNodeId())))
	}
	return connect.NewResponse(h.idleExpiry(rec)), nil
}
