package api

import (
	"context"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/internal/manager/intercept"
	"github.com/norsk-go/norsk-manager/internal/rpcerr"
	"github.com/norsk-go/norsk-manager/internal/store/state"
	"github.com/norsk-go/norsk-manager/pkg/apierr"
	"github.com/norsk-go/norsk-manager/pkg/jobspec"
)

// Drain bounds and defaults (DrainNode; jobspec.ValidateDrainRequest).
const (
	// DefaultDrainDeadline is a drain's deadline when the request gives none.
	DefaultDrainDeadline = jobspec.DefaultDrainDeadline
	// MaxDrainDeadline is the longest deadline DrainNode takes.
	MaxDrainDeadline = jobspec.MaxDrainDeadline
	// DefaultDrainParallel is how many migrations a drain runs at once by
	// default.
	DefaultDrainParallel = 2
	// MaxDrainParallel bounds a drain's parallelism.
	MaxDrainParallel = jobspec.MaxDrainParallel
)

// DrainNode starts, re-attaches to, or undoes a node's drain (see the RPC's
// contract in manager.proto). It writes; the primary's AutoManager runs the
// drain from the store.
func (h *Handler) DrainNode(ctx context.Context, req *connect.Request[managerv1.DrainNodeRequest]) (*connect.Response[managerv1.DrainNodeResponse], error) {
	m := req.Msg
	rec, err := h.requireNode(m.GetNodeId())
	if err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	if err := jobspec.ValidateDrainRequest(m); err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	if m.GetUndo() {
		if _, err := h.apply(ctx, &storev1.Command{Cmd: &storev1.Command_SetNodeDraining{SetNodeDraining: &storev1.SetNodeDraining{
			NodeId: m.GetNodeId(), Draining: false,
		}}}); err != nil {
			return nil, rpcerr.ToConnect(err)
		}
		return h.drainAnswer(m.GetNodeId(), false)
	}
	if state.DrainRunning(rec.GetNode().GetDrain()) {
		// A client re-attaching: the drain as it stands.
		return h.drainAnswer(m.GetNodeId(), true)
	}
	d := &managerv1.NodeDrain{
		NodeId:   m.GetNodeId(),
		Strategy: m.GetStrategy(),
		Parallel: m.GetParallel(),
	}
	if d.Strategy == managerv1.MigrationStrategy_MIGRATION_STRATEGY_UNSPECIFIED {
		d.Strategy = managerv1.MigrationStrategy_MIGRATION_STRATEGY_OVERLAP // make-before-break
	}
	if d.Parallel == 0 {
		d.Parallel = DefaultDrainParallel
	}
	if !m.GetNoDeadline() {
		dl := DefaultDrainDeadline
		if m.GetDeadlineMs() > 0 {
			dl = time.Duration(m.GetDeadlineMs()) * time.Millisecond
		}
		d.Deadline = timestamppb.New(h.cfg.Clock.Now().Add(dl))
	}
	if who, ok := intercept.Who(ctx); ok {
		d.RequestedBy = who
	}
	res, err := h.apply(ctx, &storev1.Command{Cmd: &storev1.Command_StartNodeDrain{StartNodeDrain: &storev1.StartNodeDrain{Drain: d}}})
	if apierr.Is(err, apierr.FailedPrecondition) && res.Index > 0 {
		// A drain runs that this member's copy did not show yet (another
		// call started it, or a follower lags): once the refusal's index
		// is applied here, attach to it.
		if st := h.b.Store(); st != nil {
			_ = st.WaitApplied(ctx, res.Index)
		}
		if state.DrainRunning(h.read().Node(nil, m.GetNodeId()).GetNode().GetDrain()) {
			return h.drainAnswer(m.GetNodeId(), true)
		}
	}
	if err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	return h.drainAnswer(m.GetNodeId(), false)
}

// drainAnswer renders the node and its drain as the store now holds them.
func (h *Handler) drainAnswer(nodeID string, attached bool) (*connect.Response[managerv1.DrainNodeResponse], error) {
	r := h.read()
	rec := r.Node(nil, nodeID)
	if rec == nil {
		return nil, rpcerr.ToConnect(apierr.NotFoundf("node %s was removed meanwhile", apierr.Quote(nodeID)))
	}
	n := h.NodeView(r, rec)
	return connect.NewResponse(&managerv1.DrainNodeResponse{Drain: n.GetDrain(), Attached: attached, Node: n}), nil
}

// RecordNodeDrain writes the AutoManager's progress of a drain.
func (h *Handler) RecordNodeDrain(ctx context.Context, req *connect.Request[managerv1.RecordNodeDrainRequest]) (*connect.Response[managerv1.RecordNodeDrainResponse], error) {
	d := req.Msg.GetDrain()
	if d == nil {
		return nil, rpcerr.ToConnect(apierr.Invalid("drain", "is required"))
	}
	if err := jobspec.ValidateDrain(d); err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	if _, err := h.requireNode(d.GetNodeId()); err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	res, err := h.apply(ctx, &storev1.Command{Cmd: &storev1.Command_PutNodeDrain{PutNodeDrain: &storev1.PutNodeDrain{
		Drain: d, ExpectedRevision: req.Msg.GetExpectedRevision(),
	}}})
	if err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	return connect.NewResponse(&managerv1.RecordNodeDrainResponse{Revision: res.Index}), nil
}
