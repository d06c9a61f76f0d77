package api

import (
	"context"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/internal/auth"
	"github.com/norsk-go/norsk-manager/internal/rpcerr"
	"github.com/norsk-go/norsk-manager/pkg/apierr"
	"github.com/norsk-go/norsk-manager/pkg/jobspec"
	"github.com/norsk-go/norsk-manager/pkg/placement"
)

// Bounds of RenewBundleLease's ttl.
const (
	MinBundleLeaseTTL = jobspec.MinBundleLeaseTTL
	MaxBundleLeaseTTL = jobspec.MaxBundleLeaseTTL
)

// knownPool reports whether a pool names something placement can use: a
// pool or a tier of the configuration, a pool a provider creates nodes in,
// or the pool tag of a node.
func (h *Handler) knownPool(pool string) bool {
	if pool == "" {
		return true
	}
	if _, ok := h.cfg.Pools[pool]; ok {
		return true
	}
	for _, tiers := range h.cfg.Pools {
		for _, t := range tiers {
			if t == pool {
				return true
			}
		}
	}
	for _, et := range h.b.ElasticTiers() {
		if et.Tier == pool {
			return true // a tier a provider creates nodes in
		}
	}
	for _, n := range h.read().Nodes(nil) {
		if n.GetNode().GetTags()[placement.TagPool] == pool {
			return true
		}
	}
	return false
}

// checkBundle validates a bundle and its pools (which depend on this
// member's configuration, so the FSM cannot check them).
func (h *Handler) checkBundle(b *managerv1.Bundle) error {
	if err := jobspec.ValidateBundle(b); err != nil {
		return err
	}
	if err := jobspec.CheckBundleLimits(b); err != nil {
		return err
	}
	if !h.knownPool(b.GetPool()) {
		return apierr.Invalid("bundle.pool", "%s is neither a pool of the Manager's configuration nor the pool of any node", apierr.Quote(b.GetPool()))
	}
	if p := b.GetResiliencePolicy(); p != nil && !h.knownPool(p.GetPool()) {
		return apierr.Invalid("bundle.resiliencePolicy.pool", "%s is neither a pool of the Manager's configuration nor the pool of any node", apierr.Quote(p.GetPool()))
	}
	return nil
}

func (h *Handler) CreateBundle(ctx context.Context, req *connect.Request[managerv1.CreateBundleRequest]) (*connect.Response[managerv1.CreateBundleResponse], error) {
	if req.Msg.GetBundle() == nil {
		return nil, rpcerr.ToConnect(apierr.Invalid("bundle", "is required"))
	}
	b := proto.Clone(req.Msg.GetBundle()).(*managerv1.Bundle)
	if b.GetBundleId() == "" {
		b.BundleId = auth.RandomToken("b-", 5)
	}
	if err := h.checkBundle(b); err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	// An obvious duplicate is refused before anything is proposed; the
	// store checks again, race-free.
	snap := h.read()
	if snap.Bundle(nil, b.GetBundleId()) != nil {
		return nil, rpcerr.ToConnect(apierr.AlreadyExistsf("bundle %s already exists", apierr.Quote(b.GetBundleId())))
	}
	for _, id := range jobspec.BundleJobIDs(b) {
		if snap.Job(nil, id) != nil {
			return nil, rpcerr.ToConnect(apierr.AlreadyExistsf("job %s (of bundle %s) already exists", apierr.Quote(id), apierr.Quote(b.GetBundleId())))
		}
	}
	b.State, b.StopAt, b.LeaseExpiresAt, b.Revision, b.CreatedAt, b.DeletingReason = 0, nil, nil, 0, nil, ""
	if _, err := h.apply(ctx, &storev1.Command{Cmd: &storev1.Command_CreateBundle{CreateBundle: &storev1.CreateBundle{Bundle: b}}}); err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	return connect.NewResponse(&managerv1.CreateBundleResponse{BundleId: b.GetBundleId()}), nil
}

func (h *Handler) UpdateBundle(ctx context.Context, req *connect.Request[managerv1.UpdateBundleRequest]) (*connect.Response[managerv1.UpdateBundleResponse], error) {
	b := req.Msg.GetBundle()
	if err := h.checkBundle(b); err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	if h.read().Bundle(nil, b.GetBundleId()) == nil {
		return nil, rpcerr.ToConnect(apierr.NotFoundf("no bundle %s", apierr.Quote(b.GetBundleId())))
	}
	res, err := h.apply(ctx, &storev1.Command{Cmd: &storev1.Command_UpdateBundle{UpdateBundle: &storev1.UpdateBundle{Bundle: b}}})
	if err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	return connect.NewResponse(&managerv1.UpdateBundleResponse{Revision: res.Index}), nil
}

// requireBundle checks an id and that the bundle exists.
func (h *Handler) requireBundle(id string) error {
	if err := jobspec.ValidateBundleName("bundleId", id); err != nil {
		return err
	}
	if h.read().Bundle(nil, id) == nil {
		return apierr.NotFoundf("no bundle %s", apierr.Quote(id))
	}
	return nil
}

// DeleteBundle starts a bundle's deletion: it is marked DELETING and every
// instance of its jobs is asked to stop; the AutoManager removes the jobs
// and the bundle once they have (resuming after a restart). Deleting a
// bundle already being deleted changes nothing.
func (h *Handler) DeleteBundle(ctx context.Context, req *connect.Request[managerv1.DeleteBundleRequest]) (*connect.Response[managerv1.DeleteBundleResponse], error) {
	if err := h.requireBundle(req.Msg.GetBundleId()); err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	if _, err := h.apply(ctx, &storev1.Command{Cmd: &storev1.Command_DeleteBundle{DeleteBundle: &storev1.DeleteBundle{
		BundleId: req.Msg.GetBundleId(), Reason: "deleted by DeleteBundle",
	}}}); err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	return connect.NewResponse(&managerv1.DeleteBundleResponse{}), nil
}

func (h *Handler) BundleById(ctx context.Context, req *connect.Request[managerv1.BundleByIdRequest]) (*connect.Response[managerv1.BundleWithJobs], error) {
	if err := h.requireBundle(req.Msg.GetBundleId()); err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	r := h.read()
	return connect.NewResponse(r.BundleView(r.Bundle(nil, req.Msg.GetBundleId()))), nil
}

func (h *Handler) ListBundles(ctx context.Context, req *connect.Request[managerv1.ListBundlesRequest]) (*connect.Response[managerv1.ListBundlesResponse], error) {
	r := h.read()
	out := &managerv1.ListBundlesResponse{}
	for _, b := range r.Bundles(nil) {
		out.Bundles = append(out.Bundles, r.BundleView(b))
	}
	return connect.NewResponse(out), nil
}

func (h *Handler) StartBundleJob(ctx context.Context, req *connect.Request[managerv1.StartBundleJobRequest]) (*connect.Response[managerv1.StartBundleJobResponse], error) {
	m := req.Msg
	if err := h.requireBundle(m.GetBundleId()); err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	if _, err := h.apply(ctx, &storev1.Command{Cmd: &storev1.Command_SetBundleJobDormant{SetBundleJobDormant: &storev1.SetBundleJobDormant{
		BundleId: m.GetBundleId(), ReplicaIndex: m.GetReplicaIndex(), JobName: m.GetJobName(), Dormant: false,
	}}}); err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	return connect.NewResponse(&managerv1.StartBundleJobResponse{}), nil
}

func (h *Handler) StopBundleJob(ctx context.Context, req *connect.Request[managerv1.StopBundleJobRequest]) (*connect.Response[managerv1.StopBundleJobResponse], error) {
	m := req.Msg
	if err := h.requireBundle(m.GetBundleId()); err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	if err := jobspec.ValidateGrace("graceMs", m.GetGraceMs()); err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	if _, err := h.apply(ctx, &storev1.Command{Cmd: &storev1.Command_SetBundleJobDormant{SetBundleJobDormant: &storev1.SetBundleJobDormant{
		BundleId: m.GetBundleId(), ReplicaIndex: m.GetReplicaIndex(), JobName: m.GetJobName(), Dormant: true, GraceMs: m.GetGraceMs(),
	}}}); err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	return connect.NewResponse(&managerv1.StopBundleJobResponse{}), nil
}

// SetBundleStopTime sets (or, with no stop_at, clears) when the bundle is
// deleted; no job is touched. A time already past deletes it at once.
func (h *Handler) SetBundleStopTime(ctx context.Context, req *connect.Request[managerv1.SetBundleStopTimeRequest]) (*connect.Response[managerv1.SetBundleStopTimeResponse], error) {
	m := req.Msg
	if err := h.requireBundle(m.GetBundleId()); err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	if m.StopAt != nil {
		if err := m.GetStopAt().CheckValid(); err != nil {
			return nil, rpcerr.ToConnect(apierr.Invalid("stopAt", "%v", err))
		}
	}
	if _, err := h.apply(ctx, &storev1.Command{Cmd: &storev1.Command_SetBundleStopTime{SetBundleStopTime: &storev1.SetBundleStopTime{
		BundleId: m.GetBundleId(), StopAt: m.GetStopAt(),
	}}}); err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	return connect.NewResponse(&managerv1.SetBundleStopTimeResponse{}), nil
}

// RenewBundleLease moves the bundle's lease to ttl from now. A bundle whose
// lease runs out unrenewed is deleted by the AutoManager, as if by
// DeleteBundle.
func (h *Handler) RenewBundleLease(ctx context.Context, req *connect.Request[managerv1.RenewBundleLeaseRequest]) (*connect.Response[managerv1.RenewBundleLeaseResponse], error) {
	m := req.Msg
	if err := h.requireBundle(m.GetBundleId()); err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	if err := jobspec.ValidateLeaseTTL(m.GetTtlMs()); err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	ttl := time.Duration(m.GetTtlMs()) * time.Millisecond
	at := timestamppb.New(h.cfg.Clock.Now().Add(ttl))
	if _, err := h.apply(ctx, &storev1.Command{Cmd: &storev1.Command_RenewBundleLease{RenewBundleLease: &storev1.RenewBundleLease{
		BundleId: m.GetBundleId(), ExpiresAt: at,
	}}}); err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	return connect.NewResponse(&managerv1.RenewBundleLeaseResponse{ExpiresAt: at}), nil
}
