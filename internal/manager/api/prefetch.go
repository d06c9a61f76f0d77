package api

import (
	"context"
	"fmt"

	"connectrpc.com/connect"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1/managerv1connect"
	"github.com/norsk-go/norsk-manager/internal/auth"
	"github.com/norsk-go/norsk-manager/internal/cluster"
	"github.com/norsk-go/norsk-manager/internal/rpcerr"
	"github.com/norsk-go/norsk-manager/pkg/apierr"
	"github.com/norsk-go/norsk-manager/pkg/jobspec"
)

// MaxPrefetchRefs bounds one PrefetchImages call (jobspec.ValidateImageRefs).
const MaxPrefetchRefs = jobspec.MaxPrefetchRefs

// PrefetchImages tells a node's worker to pull images now; it answers once
// the worker has acknowledged. The outcome comes on the event stream.
func (h *Handler) PrefetchImages(ctx context.Context, req *connect.Request[managerv1.PrefetchImagesRequest]) (*connect.Response[managerv1.PrefetchImagesResponse], error) {
	m := req.Msg
	rec, err := h.requireNode(m.GetNodeId())
	if err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	if err := jobspec.ValidateImageRefs(m.GetImageRefs()); err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	if out, ok, err := askPrimary(ctx, h, req.Header(), func(ctx context.Context, c managerv1connect.ManagerClient) (*connect.Response[managerv1.PrefetchImagesResponse], error) {
		return c.PrefetchImages(ctx, cluster.WithAuth(req, connect.NewRequest(req.Msg)))
	}); ok {
		return out, err
	}
	n := rec.GetNode()
	switch {
	case n.GetState() != managerv1.NodeState_NODE_STATE_ONLINE:
		return nil, rpcerr.ToConnect(apierr.FailedPreconditionf("node %s is %s, not online: its worker cannot pull",
			apierr.Quote(n.GetNodeId()), stateWord(n.GetState())))
	case n.GetRuntime() == "process":
		return nil, rpcerr.ToConnect(apierr.FailedPreconditionf("node %s runs the process runtime, which holds no images", apierr.Quote(n.GetNodeId())))
	}
	ctl := h.b.Controller()
	if ctl == nil {
		return nil, rpcerr.ToConnect(apierr.Unavailablef("this member is not driving the workers (no primary term running); retry"))
	}
	id := auth.RandomToken("pf-", 8)
	index := h.read().Index()
	msg := &managerv1.ControllerMessage{Msg: &managerv1.ControllerMessage_PrefetchImages{PrefetchImages: &managerv1.PrefetchImages{
		ImageRefs: m.GetImageRefs(), RequestId: id,
	}}}
	if err := ctl.SendCommand(ctx, n.GetNodeId(), msg); err != nil {
		return nil, rpcerr.ToConnect(fmt.Errorf("prefetch on node %s: %w", n.GetNodeId(), err))
	}
	return connect.NewResponse(&managerv1.PrefetchImagesResponse{RequestId: id, Index: index}), nil
}

// stateWord names a node state as the CLI does ("lost", "starting").
func stateWord(s managerv1.NodeState) string {
	name := managerv1.NodeState_name[int32(s)]
	if len(name) > len("NODE_STATE_") {
		name = name[len("NODE_STATE_"):]
	}
	out := []byte(name)
	for i, c := range out {
		if c >= 'A' && c <= 'Z' {
			out[i] = c + 'a' - 'A'
		}
	}
	return string(out)
}
