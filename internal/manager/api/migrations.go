package api

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"connectrpc.com/connect"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1/managerv1connect"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/internal/automanager"
	"github.com/norsk-go/norsk-manager/internal/cluster"
	"github.com/norsk-go/norsk-manager/internal/manager/intercept"
	"github.com/norsk-go/norsk-manager/internal/rpcerr"
	"github.com/norsk-go/norsk-manager/pkg/apierr"
	"github.com/norsk-go/norsk-manager/pkg/jobspec"
)

// Migrator is the AutoManager's migration surface the Manager serves
// (MigrateJob and the saga form of AbortMigration). The primary's running
// AutoManager registers itself; a member with none answers UNAVAILABLE.
type Migrator interface {
	MigrateJob(ctx context.Context, jobID string, opts automanager.MigrateOptions) (*managerv1.MigrationState, error)
	CancelMigration(ctx context.Context, migrationID, reason string) error
}

// MigratorRef holds the running AutoManager's Migrator.
type MigratorRef struct{ p atomic.Pointer[Migrator] }

func (r *MigratorRef) Get() Migrator {
	if p := r.p.Load(); p != nil {
		return *p
	}
	return nil
}

func (r *MigratorRef) Set(m Migrator) (clear func()) {
	p := &m
	r.p.Store(p)
	return func() { r.p.CompareAndSwap(p, nil) }
}

// relay sends a migration command to the worker holding the instance key,
// on the primary (a follower asks it through ask).
func (h *Handler) relay(ctx context.Context, key *managerv1.JobKey, build func(in *managerv1.Instance) *managerv1.ControllerMessage) (string, error) {
	in := h.read().Instance(nil, key.GetJobId(), key.GetRole())
	if in == nil || in.GetPhase() == managerv1.InstancePhase_INSTANCE_PHASE_STOPPED {
		return "", apierr.NotFoundf("job %s has no live instance %s", key.GetJobId(), key.GetRole())
	}
	ctl := h.b.Controller()
	if ctl == nil {
		return "", apierr.Unavailablef("this member is not driving the workers (no primary term running); retry")
	}
	if err := ctl.SendMigration(ctx, in.GetNodeId(), build(in)); err != nil {
		return in.GetNodeId(), fmt.Errorf("instance %s/%s on node %s: %w", key.GetJobId(), key.GetRole(), in.GetNodeId(), err)
	}
	return in.GetNodeId(), nil
}

// notify serves one relay RPC: it checks the key, the migration id and the
// payload, asks the primary from a follower, and sends build's command to
// the worker holding the instance.
func notify[Req any](ctx context.Context, h *Handler, req *connect.Request[Req], field string, key *managerv1.JobKey, id string, payload []byte,
	forward func(managerv1connect.ManagerClient, context.Context, *connect.Request[Req]) (*connect.Response[managerv1.NotifyMigrationResponse], error),
	build func(in *managerv1.Instance) *managerv1.ControllerMessage) (*connect.Response[managerv1.NotifyMigrationResponse], error) {
	if err := jobspec.ValidateMigrationRelay(field, key, id, payload); err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	if out, ok, err := askPrimary(ctx, h, req.Header(), func(ctx context.Context, c managerv1connect.ManagerClient) (*connect.Response[managerv1.NotifyMigrationResponse], error) {
		return forward(c, ctx, cluster.WithAuth(req, connect.NewRequest(req.Msg)))
	}); ok {
		return out, err
	}
	node, err := h.relay(ctx, key, build)
	if err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	return connect.NewResponse(&managerv1.NotifyMigrationResponse{NodeId: node}), nil
}

func (h *Handler) NotifyMigrationGetState(ctx context.Context, req *connect.Request[managerv1.NotifyMigrationGetStateRequest]) (*connect.Response[managerv1.NotifyMigrationResponse], error) {
	m := req.Msg
	return notify(ctx, h, req, "sourceJobKey", m.GetSourceJobKey(), m.GetMigrationId(), nil, managerv1connect.ManagerClient.NotifyMigrationGetState,
		func(in *managerv1.Instance) *managerv1.ControllerMessage {
			return &managerv1.ControllerMessage{Msg: &managerv1.ControllerMessage_MigrationGetState{MigrationGetState: &managerv1.MigrationGetState{
				JobId: in.GetJobId(), Role: in.GetRole(), FencingToken: in.GetFencingToken(), MigrationId: m.GetMigrationId(),
			}}}
		})
}

func (h *Handler) NotifyMigrationCutoverReady(ctx context.Context, req *connect.Request[managerv1.NotifyMigrationCutoverReadyRequest]) (*connect.Response[managerv1.NotifyMigrationResponse], error) {
	m := req.Msg
	return notify(ctx, h, req, "sourceJobKey", m.GetSourceJobKey(), m.GetMigrationId(), m.GetPayload(), managerv1connect.ManagerClient.NotifyMigrationCutoverReady,
		func(in *managerv1.Instance) *managerv1.ControllerMessage {
			return &managerv1.ControllerMessage{Msg: &managerv1.ControllerMessage_MigrationCutoverReady{MigrationCutoverReady: &managerv1.MigrationCutoverReady{
				JobId: in.GetJobId(), Role: in.GetRole(), FencingToken: in.GetFencingToken(), MigrationId: m.GetMigrationId(), Payload: m.GetPayload(),
			}}}
		})
}

func (h *Handler) NotifyMigrationCutoverApply(ctx context.Context, req *connect.Request[managerv1.NotifyMigrationCutoverApplyRequest]) (*connect.Response[managerv1.NotifyMigrationResponse], error) {
	m := req.Msg
	return notify(ctx, h, req, "targetJobKey", m.GetTargetJobKey(), m.GetMigrationId(), m.GetPayload(), managerv1connect.ManagerClient.NotifyMigrationCutoverApply,
		func(in *managerv1.Instance) *managerv1.ControllerMessage {
			return &managerv1.ControllerMessage{Msg: &managerv1.ControllerMessage_MigrationCutoverApply{MigrationCutoverApply: &managerv1.MigrationCutoverApply{
				JobId: in.GetJobId(), Role: in.GetRole(), FencingToken: in.GetFencingToken(), MigrationId: m.GetMigrationId(), Payload: m.GetPayload(),
			}}}
		})
}

// AbortMigration serves both of the seed's forms: the wire dispatch to a
// job's source and target instances, and (with only a migration id) the
// AutoManager's rollback of an in-flight migration.
func (h *Handler) AbortMigration(ctx context.Context, req *connect.Request[managerv1.AbortMigrationRequest]) (*connect.Response[managerv1.AbortMigrationResponse], error) {
	m := req.Msg
	if err := jobspec.ValidateAbortMigration(m); err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	if out, ok, err := askPrimary(ctx, h, req.Header(), func(ctx context.Context, c managerv1connect.ManagerClient) (*connect.Response[managerv1.AbortMigrationResponse], error) {
		return c.AbortMigration(ctx, cluster.WithAuth(req, connect.NewRequest(m)))
	}); ok {
		return out, err
	}
	if m.GetSourceRole() == "" && m.GetTargetRole() == "" {
		if m.GetJobId() != "" {
			return nil, rpcerr.ToConnect(apierr.Invalid("sourceRole", "the wire form names the source and target roles; give only migrationId to roll a migration back"))
		}
		mg := h.cfg.Migrator.Get()
		if mg == nil {
			return nil, rpcerr.ToConnect(apierr.Unavailablef("no AutoManager runs on this member; it runs on the primary once its term has begun"))
		}
		if err := mg.CancelMigration(ctx, m.GetMigrationId(), m.GetReason()); err != nil {
			return nil, rpcerr.ToConnect(err)
		}
		return connect.NewResponse(&managerv1.AbortMigrationResponse{}), nil
	}
	if err := jobspec.ValidateID("jobId", m.GetJobId()); err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	out := &managerv1.AbortMigrationResponse{}
	var errs []error
	found := 0
	for i, role := range []string{m.GetSourceRole(), m.GetTargetRole()} {
		if role == "" {
			continue
		}
		field := []string{"sourceRole", "targetRole"}[i]
		if err := jobspec.ValidateRole(field, role); err != nil {
			return nil, rpcerr.ToConnect(err)
		}
		node, err := h.relay(ctx, &managerv1.JobKey{JobId: m.GetJobId(), Role: role}, func(in *managerv1.Instance) *managerv1.ControllerMessage {
			return &managerv1.ControllerMessage{Msg: &managerv1.ControllerMessage_MigrationAbort{MigrationAbort: &managerv1.MigrationAbort{
				JobId: in.GetJobId(), Role: in.GetRole(), MigrationId: m.GetMigrationId(), Reason: m.GetReason(),
			}}}
		})
		switch {
		case err == nil:
			found++
			out.NodeIds = append(out.NodeIds, node)
		case apierr.Is(err, apierr.NotFound):
		default:
			found++
			errs = append(errs, err)
		}
	}
	switch {
	case found == 0:
		return nil, rpcerr.ToConnect(apierr.NotFoundf("job %s has no live instance %s or %s", m.GetJobId(), m.GetSourceRole(), m.GetTargetRole()))
	case len(out.GetNodeIds()) == 0:
		return nil, rpcerr.ToConnect(errors.Join(errs...))
	}
	for _, err := range errs {
		h.cfg.Log.Warn("abort migration: one side could not be told", "migration", m.GetMigrationId(), "err", err)
	}
	return connect.NewResponse(out), nil
}

func (h *Handler) MigrateJob(ctx context.Context, req *connect.Request[managerv1.MigrateJobRequest]) (*connect.Response[managerv1.MigrateJobResponse], error) {
	m := req.Msg
	if err := jobspec.ValidateID("jobId", m.GetJobId()); err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	if m.GetTargetNodeId() != "" {
		if err := jobspec.ValidateID("targetNodeId", m.GetTargetNodeId()); err != nil {
			return nil, rpcerr.ToConnect(err)
		}
	}
	if m.GetSourceRole() != "" {
		if err := jobspec.ValidateRole("sourceRole", m.GetSourceRole()); err != nil {
			return nil, rpcerr.ToConnect(err)
		}
	}
	if _, ok := managerv1.MigrationStrategy_name[int32(m.GetStrategy())]; !ok {
		return nil, rpcerr.ToConnect(apierr.Invalid("strategy", "%d is not a strategy (stopThenStart, overlap, handover)", m.GetStrategy()))
	}
	if h.read().Job(nil, m.GetJobId()) == nil {
		return nil, rpcerr.ToConnect(apierr.NotFoundf("no job %s", apierr.Quote(m.GetJobId())))
	}
	if out, ok, err := askPrimary(ctx, h, req.Header(), func(ctx context.Context, c managerv1connect.ManagerClient) (*connect.Response[managerv1.MigrateJobResponse], error) {
		return c.MigrateJob(ctx, cluster.WithAuth(req, connect.NewRequest(m)))
	}); ok {
		return out, err
	}
	mg := h.cfg.Migrator.Get()
	if mg == nil {
		return nil, rpcerr.ToConnect(apierr.Unavailablef("no AutoManager runs on this member; it runs on the primary once its term has begun"))
	}
	who := ""
	if w, ok := intercept.Who(ctx); ok {
		who = w
	}
	st, err := mg.MigrateJob(ctx, m.GetJobId(), automanager.MigrateOptions{
		TargetNodeID: m.GetTargetNodeId(), Strategy: m.GetStrategy(), SourceRole: m.GetSourceRole(),
		OverrideReservation: m.GetOverrideReservation(), RequestedBy: who,
	})
	if err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	return connect.NewResponse(&managerv1.MigrateJobResponse{MigrationId: st.GetMigrationId(), Migration: st}), nil
}

func (h *Handler) ListMigrations(ctx context.Context, req *connect.Request[managerv1.ListMigrationsRequest]) (*connect.Response[managerv1.ListMigrationsResponse], error) {
	if id := req.Msg.GetJobId(); id != "" {
		if err := jobspec.ValidateID("jobId", id); err != nil {
			return nil, rpcerr.ToConnect(err)
		}
	}
	return connect.NewResponse(&managerv1.ListMigrationsResponse{Migrations: h.read().Migrations(nil, req.Msg.GetJobId())}), nil
}

func (h *Handler) GetMigration(ctx context.Context, req *connect.Request[managerv1.GetMigrationRequest]) (*connect.Response[managerv1.MigrationState], error) {
	if err := jobspec.ValidateMigrationID(req.Msg.GetMigrationId()); err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	m := h.read().Migration(nil, req.Msg.GetMigrationId())
	if m == nil {
		return nil, rpcerr.ToConnect(apierr.NotFoundf("no migration %s (never started, or forgotten)", apierr.Quote(req.Msg.GetMigrationId())))
	}
	return connect.NewResponse(m), nil
}

func (h *Handler) MigrationForJob(ctx context.Context, req *connect.Request[managerv1.MigrationForJobRequest]) (*connect.Response[managerv1.MigrationState], error) {
	if err := h.requireJob("jobId", req.Msg.GetJobId()); err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	m := h.read().MigrationInFlight(nil, req.Msg.GetJobId())
	if m == nil {
		return nil, rpcerr.ToConnect(apierr.NotFoundf("job %s has no migration in flight", req.Msg.GetJobId()))
	}
	return connect.NewResponse(m), nil
}

func (h *Handler) ForgetMigration(ctx context.Context, req *connect.Request[managerv1.ForgetMigrationRequest]) (*connect.Response[managerv1.ForgetMigrationResponse], error) {
	id := req.Msg.GetMigrationId()
	if err := jobspec.ValidateMigrationID(id); err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	if h.read().Migration(nil, id) == nil {
		return nil, rpcerr.ToConnect(apierr.NotFoundf("no migration %s", apierr.Quote(id)))
	}
	res, err := h.apply(ctx, &storev1.Command{Cmd: &storev1.Command_ForgetMigrations{ForgetMigrations: &storev1.ForgetMigrations{MigrationIds: []string{id}}}})
	if err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	out, _ := res.Value.(*managerv1.ForgetTerminalMigrationsResponse)
	if len(out.GetMigrationIds()) == 0 {
		// Forgotten meanwhile by another call.
		return nil, rpcerr.ToConnect(apierr.NotFoundf("no migration %s", apierr.Quote(id)))
	}
	return connect.NewResponse(&managerv1.ForgetMigrationResponse{Forgotten: true}), nil
}

func (h *Handler) ForgetTerminalMigrations(ctx context.Context, req *connect.Request[managerv1.ForgetTerminalMigrationsRequest]) (*connect.Response[managerv1.ForgetTerminalMigrationsResponse], error) {
	res, err := h.apply(ctx, &storev1.Command{Cmd: &storev1.Command_ForgetMigrations{ForgetMigrations: &storev1.ForgetMigrations{AllTerminal: true}}})
	if err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	out, _ := res.Value.(*managerv1.ForgetTerminalMigrationsResponse)
	if out == nil {
		out = &managerv1.ForgetTerminalMigrationsResponse{}
	}
	return connect.NewResponse(out), nil
}

func (h *Handler) RecordMigration(ctx context.Context, req *connect.Request[managerv1.RecordMigrationRequest]) (*connect.Response[managerv1.RecordMigrationResponse], error) {
	m := req.Msg
	if err := jobspec.ValidateMigration(m.GetMigration()); err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	res, err := h.apply(ctx, &storev1.Command{Cmd: &storev1.Command_PutMigration{PutMigration: &storev1.PutMigration{
		Migration: m.GetMigration(), ExpectedRevision: m.GetExpectedRevision(), Create: m.GetCreate(),
	}}})
	if err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	return connect.NewResponse(&managerv1.RecordMigrationResponse{Revision: res.Index}), nil
}

func (h *Handler) SetNodeDraining(ctx context.Context, req *connect.Request[managerv1.SetNodeDrainingRequest]) (*connect.Response[managerv1.SetNodeDrainingResponse], error) {
	if _, err := h.requireNode(req.Msg.GetNodeId()); err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	if _, err := h.apply(ctx, &storev1.Command{Cmd: &storev1.Command_SetNodeDraining{SetNodeDraining: &storev1.SetNodeDraining{
		NodeId: req.Msg.GetNodeId(), Draining: req.Msg.GetDraining(),
	}}}); err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	r := h.read()
	rec := r.Node(nil, req.Msg.GetNodeId())
	if rec == nil {
		return nil, rpcerr.ToConnect(apierr.NotFoundf("node %s was removed meanwhile", apierr.Quote(req.Msg.GetNodeId())))
	}
	return connect.NewResponse(&managerv1.SetNodeDrainingResponse{Node: h.NodeView(r, rec)}), nil
}
