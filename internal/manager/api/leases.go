package api

import (
	"context"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1/managerv1connect"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/internal/cluster"
	"github.com/norsk-go/norsk-manager/internal/rpcerr"
	"github.com/norsk-go/norsk-manager/internal/store/state"
	"github.com/norsk-go/norsk-manager/pkg/apierr"
	"github.com/norsk-go/norsk-manager/pkg/jobspec"
)

// PauseLeases freezes leases for a Manager's maintenance: workers keep
// their lease-protected jobs without refreshing, and no such job whose
// holder was lost starts again until ResumeLeases.
func (h *Handler) PauseLeases(ctx context.Context, req *connect.Request[managerv1.PauseLeasesRequest]) (*connect.Response[managerv1.PauseLeasesResponse], error) {
	m := req.Msg
	if err := jobspec.ValidateLeasePause(m.GetReason(), m.GetBy()); err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	if _, err := h.apply(ctx, &storev1.Command{Cmd: &storev1.Command_SetLeasesPaused{SetLeasesPaused: &storev1.SetLeasesPaused{
		Paused: true, Reason: m.GetReason(), By: m.GetBy(),
	}}}); err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	return connect.NewResponse(&managerv1.PauseLeasesResponse{}), nil
}

// ResumeLeases ends a pause; every lease's grace then runs from now.
func (h *Handler) ResumeLeases(ctx context.Context, req *connect.Request[managerv1.ResumeLeasesRequest]) (*connect.Response[managerv1.ResumeLeasesResponse], error) {
	if err := jobspec.ValidateLeaseResume(req.Msg.GetBy()); err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	if _, err := h.apply(ctx, &storev1.Command{Cmd: &storev1.Command_SetLeasesPaused{SetLeasesPaused: &storev1.SetLeasesPaused{
		Paused: false, By: req.Msg.GetBy(),
	}}}); err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	return connect.NewResponse(&managerv1.ResumeLeasesResponse{}), nil
}

// GetLeaseStatus answers whether leases are paused and every lease held
// now. Only the primary hears the workers' refreshes: a follower asks it.
func (h *Handler) GetLeaseStatus(ctx context.Context, req *connect.Request[managerv1.GetLeaseStatusRequest]) (*connect.Response[managerv1.LeaseStatus], error) {
	if out, ok, err := askPrimary(ctx, h, req.Header(), func(ctx context.Context, c managerv1connect.ManagerClient) (*connect.Response[managerv1.LeaseStatus], error) {
		return c.GetLeaseStatus(ctx, cluster.WithAuth(req, connect.NewRequest(req.Msg)))
	}); ok {
		return out, err
	}
	ctl := h.b.Controller()
	if ctl == nil {
		return nil, rpcerr.ToConnect(apierr.New(apierr.Unavailable, "this member is not driving the workers yet (no primary term running); retry shortly"))
	}
	return connect.NewResponse(LeaseStatusOf(h.read(), ctl.LeaseRefreshes(), h.cfg.LeaseTTL, h.cfg.Clock.Now())), nil
}

// LeaseStatusOf computes every lease from the store and the primary's
// record of refreshes: a lease-protected instance that is not stopped is
// held by its node; its grace runs from the node's last refresh, or from
// when this primary began watching it, or from the last resume, whichever
// is latest. While paused nothing expires.
func LeaseStatusOf(r *state.Read, refreshes func(nodeID string) time.Time, ttl time.Duration, now time.Time) *managerv1.LeaseStatus {
	ls := r.LeaseState()
	out := &managerv1.LeaseStatus{Paused: ls.GetPaused(), Reason: ls.GetReason(), By: ls.GetBy(), Since: ls.GetSince(), TtlMs: ttl.Milliseconds()}
	r.Instances(nil, func(in *managerv1.Instance) bool {
		if in.GetPhase() == managerv1.InstancePhase_INSTANCE_PHASE_STOPPED {
			return true
		}
		rec := r.Job(nil, in.GetJobId())
		if rec == nil || !rec.GetJob().GetLeaseProtected() {
			return true
		}
		at := refreshes(in.GetNodeId())
		if !ls.GetPaused() && ls.GetSince() != nil && ls.GetSince().AsTime().After(at) {
			at = ls.GetSince().AsTime()
		}
		exp := at.Add(ttl)
		out.Leases = append(out.Leases, &managerv1.Lease{
			JobId: in.GetJobId(), Role: in.GetRole(), NodeId: in.GetNodeId(), FencingToken: in.GetFencingToken(),
			RefreshedAt: timestamppb.New(at), ExpiresAt: timestamppb.New(exp),
			Expired: !ls.GetPaused() && !now.Before(exp),
		})
		return true
	})
	return out
}
