package images

import (
	"context"
	"slices"

	"connectrpc.com/connect"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/internal/worker/ack"
)

// Prefetch handles a PrefetchImages command: acknowledged at once (reply
// nil: the worker has been told), the refs pulled one after the other in
// the background (until ctx ends), each on its own, and every outcome
// reported in one ImagesPrefetched with the inventory after them.
func (inv *Inventory) Prefetch(ctx context.Context, cmd *managerv1.PrefetchImages, reply func(*ack.Refusal)) {
	switch {
	case inv.rt == nil:
		reply(ack.Refuse(connect.CodeFailedPrecondition, "the %s runtime of this node holds no images", inv.cfg.Runtime.Name()))
		return
	case len(cmd.GetImageRefs()) == 0:
		reply(ack.Refuse(connect.CodeInvalidArgument, "no image refs to prefetch"))
		return
	case len(cmd.GetImageRefs()) > maxPrefetchRefs:
		reply(ack.Refuse(connect.CodeInvalidArgument, "%d image refs to prefetch (at most %d)", len(cmd.GetImageRefs()), maxPrefetchRefs))
		return
	}
	refs := slices.Clone(cmd.GetImageRefs())
	reqID := cmd.GetRequestId()
	inv.mu.Lock()
	inv.prefetching++
	inv.mu.Unlock()
	inv.cfg.Go(func() {
		defer func() {
			inv.mu.Lock()
			inv.prefetching--
			owed := inv.prefetching == 0 && inv.deferred
			if owed {
				inv.deferred = false
			}
			inv.mu.Unlock()
			if owed {
				inv.Changed()
			}
		}()
		for _, ref := range refs {
			if ctx.Err() != nil {
				return
			}
			inv.prefetchOne(ctx, reqID, ref)
		}
	})
	reply(nil)
}

// prefetchOne pulls one ref of a prefetch and reports its outcome with the
// inventory after it (kept for the next stream when none is up).
func (inv *Inventory) prefetchOne(ctx context.Context, reqID, ref string) {
	start := inv.cfg.Clock.Now()
	res := &managerv1.ImagePrefetchResult{Ref: ref}
	r, err := inv.rt.EnsureImage(ctx, ref, nil)
	res.DurationMs = uint32(min(max(inv.cfg.Clock.Now().Sub(start).Milliseconds(), 0), 1<<31))
	switch {
	case err != nil:
		res.Outcome = managerv1.ImagePrefetchOutcome_IMAGE_PREFETCH_OUTCOME_FAILED
		res.Error = err.Error()
	case r.Pulled:
		res.Outcome = managerv1.ImagePrefetchOutcome_IMAGE_PREFETCH_OUTCOME_PULLED
	default:
		res.Outcome = managerv1.ImagePrefetchOutcome_IMAGE_PREFETCH_OUTCOME_ALREADY_PRESENT
	}
	if err == nil {
		res.Digest, res.SizeBytes = r.Image.Digest, uint64(max(r.Image.Size, 0))
		if r.Pulled {
			inv.mu.Lock()
			inv.lastUsed[r.Image.Ref] = inv.cfg.Clock.Now().UTC()
			inv.saveLocked()
			inv.mu.Unlock()
		}
	}
	inv.cfg.Log.Info("prefetched image", "request", reqID, "image", ref, "outcome", res.GetOutcome().String(),
		"took_ms", res.GetDurationMs(), "err", res.GetError())
	// The inventory goes with the outcome, not before it: the Manager
	// records the outcome, then the images right behind it.
	if _, err := inv.relist(ctx); err != nil && ctx.Err() == nil {
		inv.cfg.Log.Warn("cannot list the runtime's images after a prefetch", "err", err)
	}
	out := &managerv1.ImagesPrefetched{NodeId: inv.cfg.NodeID(), RequestId: reqID, Results: []*managerv1.ImagePrefetchResult{res}, HeldImages: inv.Snapshot()}
	inv.cfg.Send(&managerv1.WorkerMessage{Msg: &managerv1.WorkerMessage_Prefetched{Prefetched: out}}, true)
}
