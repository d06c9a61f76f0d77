package worker

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/internal/runtime"
	"github.com/norsk-go/norsk-manager/internal/runtime/docker"
	"github.com/norsk-go/norsk-manager/internal/worker/ack"
)

// imagesFile keeps, in the data directory, when this worker last used each
// image (pulled it or created a container from it): the engine does not
// know.
const imagesFile = "images.json"

// maxHeldImages bounds the inventory a worker reports (the newest used
// first, then by ref); a node holding more reports the first ones only.
const maxHeldImages = 512

// imageSettle is how long the inventory waits after an image event before
// listing the engine, so that a burst (a pull's tag and pull events) is
// reported once.
const imageSettle = 100 * time.Millisecond

// maxPrefetchRefs bounds one PrefetchImages command.
const maxPrefetchRefs = 64

// imageInventory is what the worker's runtime holds, as last reported.
type imageInventory struct {
	a  *Agent
	rt runtime.Images // nil: the runtime holds no images

	wake chan struct{}

	mu       sync.Mutex
	held     []*managerv1.HeldImage // as last listed (with last used)
	lastUsed map[string]time.Time   // by normalised ref
	// prefetching counts the prefetch commands in flight: while one runs,
	// its outcomes carry the inventory (so the Manager records each
	// outcome before the images it changed) and refresh only notes that
	// it is owed (deferred).
	prefetching int
	deferred    bool
}

func newImageInventory(a *Agent, rt runtime.Runtime) *imageInventory {
	inv := &imageInventory{a: a, wake: make(chan struct{}, 1), lastUsed: map[string]time.Time{}}
	if im, ok := rt.(runtime.Images); ok {
		inv.rt = im
	}
	inv.load()
	return inv
}

func (inv *imageInventory) path() string { return filepath.Join(inv.a.cfg.DataDir, imagesFile) }

// load reads the last-used times; a missing or unreadable file loses them
// only (logged).
func (inv *imageInventory) load() {
	raw, err := os.ReadFile(inv.path())
	if errors.Is(err, os.ErrNotExist) {
		return
	}
	if err == nil {
		err = json.Unmarshal(raw, &inv.lastUsed)
	}
	if err != nil {
		inv.a.logger().Warn("cannot read when images were last used; starting afresh", "file", inv.path(), "err", err)
		inv.lastUsed = map[string]time.Time{}
	}
}

// saveLocked writes the last-used times (atomically); mu held.
func (inv *imageInventory) saveLocked() {
	raw, err := json.Marshal(inv.lastUsed)
	if err == nil {
		tmp := inv.path() + ".tmp"
		if err = os.WriteFile(tmp, raw, 0o600); err == nil {
			err = os.Rename(tmp, inv.path())
		}
	}
	if err != nil {
		inv.a.logger().Warn("cannot record when images were last used", "err", err)
	}
}

// snapshot is the inventory as last listed, for a hello.
func (inv *imageInventory) snapshot() []*managerv1.HeldImage {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	out := make([]*managerv1.HeldImage, len(inv.held))
	for i, h := range inv.held {
		out[i] = proto.Clone(h).(*managerv1.HeldImage)
	}
	return out
}

// changed asks the inventory to list the engine again (coalesced).
func (inv *imageInventory) changed() {
	select {
	case inv.wake <- struct{}{}:
	default:
	}
}

// markUsed records that the images of these refs were used now (a pull,
// a container created from them) and has the inventory reported again.
func (inv *imageInventory) markUsed(refs ...string) {
	if inv.rt == nil || len(refs) == 0 {
		return
	}
	now := inv.a.clock.Now().UTC()
	inv.mu.Lock()
	for _, ref := range refs {
		if ref != "" {
			inv.lastUsed[docker.NormalizeRef(ref)] = now
		}
	}
	inv.saveLocked()
	inv.mu.Unlock()
	inv.changed()
}

// run keeps the inventory current until ctx ends: it lists the engine at
// start, on every image event the runtime reports, and when markUsed asks,
// and sends the inventory on the current stream whenever it changed (a
// hello carries it too).
func (inv *imageInventory) run(ctx context.Context) {
	if inv.rt == nil {
		return
	}
	inv.a.goOwned(func() { inv.rt.WatchImages(ctx, inv.changed) })
	for {
		select {
		case <-ctx.Done():
			return
		case <-inv.wake:
		}
		t := inv.a.clock.NewTimer(imageSettle)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
		if err := inv.refresh(ctx); err != nil && ctx.Err() == nil {
			inv.a.logger().Warn("cannot list the runtime's images", "err", err)
		}
	}
}

// refresh lists the engine; when the inventory changed it is sent on the
// current stream.
func (inv *imageInventory) refresh(ctx context.Context) error {
	inv.mu.Lock()
	if inv.prefetching > 0 {
		inv.deferred = true
		inv.mu.Unlock()
		return nil
	}
	inv.mu.Unlock()
	changed, err := inv.relist(ctx)
	if err != nil || !changed {
		return err
	}
	inv.a.logger().Info("the runtime's images changed", "images", len(inv.snapshot()))
	inv.a.sendOrKeep(&managerv1.WorkerMessage{Msg: &managerv1.WorkerMessage_Images{Images: &managerv1.HeldImages{Images: inv.snapshot()}}}, false)
	return nil
}

// relist lists the engine and reports whether the inventory changed.
func (inv *imageInventory) relist(ctx context.Context) (bool, error) {
	if inv.rt == nil {
		return false, nil
	}
	list, err := inv.rt.HeldImages(ctx)
	if err != nil {
		return false, err
	}
	inv.mu.Lock()
	held := make([]*managerv1.HeldImage, 0, len(list))
	present := map[string]bool{}
	for _, h := range list {
		present[h.Ref] = true
		m := &managerv1.HeldImage{Ref: h.Ref, Digest: h.Digest, SizeBytes: uint64(max(h.Size, 0)), ImageId: h.ImageID}
		if t, ok := inv.lastUsed[h.Ref]; ok {
			m.LastUsed = timestamppb.New(t)
		}
		held = append(held, m)
	}
	if len(held) > maxHeldImages {
		slices.SortStableFunc(held, func(a, b *managerv1.HeldImage) int {
			return b.GetLastUsed().AsTime().Compare(a.GetLastUsed().AsTime())
		})
		held = held[:maxHeldImages]
		slices.SortFunc(held, func(a, b *managerv1.HeldImage) int {
			switch {
			case a.GetRef() < b.GetRef():
				return -1
			case a.GetRef() > b.GetRef():
				return 1
			}
			return 0
		})
	}
	pruned := false
	for ref := range inv.lastUsed {
		if !present[ref] {
			delete(inv.lastUsed, ref)
			pruned = true
		}
	}
	if pruned {
		inv.saveLocked()
	}
	same := len(held) == len(inv.held)
	for i := 0; same && i < len(held); i++ {
		same = proto.Equal(held[i], inv.held[i])
	}
	inv.held = held
	inv.mu.Unlock()
	return !same, nil
}

// onPrefetch handles a PrefetchImages command: acknowledged at once (the
// worker has been told), the refs pulled one after the other in the
// background, each on its own, and every outcome reported in one
// ImagesPrefetched with the inventory after them.
func (a *Agent) onPrefetch(sess *session, seq uint64, cmd *managerv1.PrefetchImages) {
	reply := func(e *ack.Refusal) { sess.enqueue(ack.Message(seq, e)) }
	inv := a.images
	switch {
	case inv == nil || inv.rt == nil:
		reply(ack.Refuse(connect.CodeFailedPrecondition, "the %s runtime of this node holds no images", a.runtimeName))
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
	ctx := a.runCtx
	inv.mu.Lock()
	inv.prefetching++
	inv.mu.Unlock()
	a.goOwned(func() {
		defer func() {
			inv.mu.Lock()
			inv.prefetching--
			owed := inv.prefetching == 0 && inv.deferred
			if owed {
				inv.deferred = false
			}
			inv.mu.Unlock()
			if owed {
				inv.changed()
			}
		}()
		for _, ref := range refs {
			if ctx.Err() != nil {
				return
			}
			a.prefetchOne(ctx, inv, reqID, ref)
		}
	})
	reply(nil)
}

// prefetchOne pulls one ref of a prefetch and reports its outcome with the
// inventory after it (kept for the next stream when none is up).
func (a *Agent) prefetchOne(ctx context.Context, inv *imageInventory, reqID, ref string) {
	start := a.clock.Now()
	res := &managerv1.ImagePrefetchResult{Ref: ref}
	r, err := inv.rt.EnsureImage(ctx, ref, nil)
	res.DurationMs = uint32(min(max(a.clock.Now().Sub(start).Milliseconds(), 0), 1<<31))
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
			inv.lastUsed[r.Image.Ref] = a.clock.Now().UTC()
			inv.saveLocked()
			inv.mu.Unlock()
		}
	}
	a.logger().Info("prefetched image", "request", reqID, "image", ref, "outcome", res.GetOutcome().String(),
		"took_ms", res.GetDurationMs(), "err", res.GetError())
	// The inventory goes with the outcome, not before it: the Manager
	// records the outcome, then the images right behind it.
	if _, err := inv.relist(ctx); err != nil && ctx.Err() == nil {
		a.logger().Warn("cannot list the runtime's images after a prefetch", "err", err)
	}
	out := &managerv1.ImagesPrefetched{NodeId: a.NodeID(), RequestId: reqID, Results: []*managerv1.ImagePrefetchResult{res}, HeldImages: inv.snapshot()}
	a.sendOrKeep(&managerv1.WorkerMessage{Msg: &managerv1.WorkerMessage_Prefetched{Prefetched: out}}, true)
}

// sendOrKeep sends msg on the current stream; keep says to hold it for the
// next stream when none is up (an inventory need not be kept: the next
// hello carries it).
func (a *Agent) sendOrKeep(msg *managerv1.WorkerMessage, keep bool) {
	a.pubMu.Lock()
	defer a.pubMu.Unlock()
	if a.cur != nil && a.cur.ctx.Err() == nil {
		a.cur.enqueue(msg)
		return
	}
	if keep {
		a.keepNoticeLocked(msg)
	}
}
