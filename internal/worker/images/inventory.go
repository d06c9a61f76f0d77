package images

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/internal/clock"
	"github.com/norsk-go/norsk-manager/internal/runtime"
	"github.com/norsk-go/norsk-manager/internal/runtime/docker"
)

// HoldsImages reports whether the runtime holds images (docker).
func (inv *Inventory) HoldsImages() bool { return inv.rt != nil }

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

// Config configures an Inventory.
type Config struct {
	// Runtime is the worker's runtime; one that holds no images
	// (runtime.Images) makes an Inventory that reports none.
	Runtime runtime.Runtime
	// DataDir is the worker's data directory (imagesFile is kept there).
	DataDir string
	Clock   clock.Clock
	Log     *slog.Logger
	// Go runs fn on a goroutine the worker's Run waits for.
	Go func(fn func())
	// Send sends msg on the current Control stream; keep says to hold it
	// for the next stream when none is up.
	Send func(msg *managerv1.WorkerMessage, keep bool)
	// NodeID is the worker's node (named in prefetch outcomes).
	NodeID func() string
}

// Inventory is what the worker's runtime holds, as last reported.
type Inventory struct {
	cfg Config
	rt  runtime.Images // nil: the runtime holds no images

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

// New returns the inventory of cfg.Runtime, with the last-used times kept
// in the data directory.
func New(cfg Config) *Inventory {
	inv := &Inventory{cfg: cfg, wake: make(chan struct{}, 1), lastUsed: map[string]time.Time{}}
	if im, ok := cfg.Runtime.(runtime.Images); ok {
		inv.rt = im
	}
	inv.load()
	return inv
}

func (inv *Inventory) path() string { return filepath.Join(inv.cfg.DataDir, imagesFile) }

// load reads the last-used times; a missing or unreadable file loses them
// only (logged).
func (inv *Inventory) load() {
	raw, err := os.ReadFile(inv.path())
	if errors.Is(err, os.ErrNotExist) {
		return
	}
	if err == nil {
		err = json.Unmarshal(raw, &inv.lastUsed)
	}
	if err != nil {
		inv.cfg.Log.Warn("cannot read when images were last used; starting afresh", "file", inv.path(), "err", err)
		inv.lastUsed = map[string]time.Time{}
	}
}

// saveLocked writes the last-used times (atomically); mu held.
func (inv *Inventory) saveLocked() {
	raw, err := json.Marshal(inv.lastUsed)
	if err == nil {
		tmp := inv.path() + ".tmp"
		if err = os.WriteFile(tmp, raw, 0o600); err == nil {
			err = os.Rename(tmp, inv.path())
		}
	}
	if err != nil {
		inv.cfg.Log.Warn("cannot record when images were last used", "err", err)
	}
}

// Snapshot is the inventory as last listed, for a hello.
func (inv *Inventory) Snapshot() []*managerv1.HeldImage {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	out := make([]*managerv1.HeldImage, len(inv.held))
	for i, h := range inv.held {
		out[i] = proto.Clone(h).(*managerv1.HeldImage)
	}
	return out
}

// Changed asks the inventory to list the engine again (coalesced).
func (inv *Inventory) Changed() {
	select {
	case inv.wake <- struct{}{}:
	default:
	}
}

// MarkUsed records that the images of these refs were used now (a pull,
// a container created from them) and has the inventory reported again.
func (inv *Inventory) MarkUsed(refs ...string) {
	if inv.rt == nil || len(refs) == 0 {
		return
	}
	now := inv.cfg.Clock.Now().UTC()
	inv.mu.Lock()
	for _, ref := range refs {
		if ref != "" {
			inv.lastUsed[docker.NormalizeRef(ref)] = now
		}
	}
	inv.saveLocked()
	inv.mu.Unlock()
	inv.Changed()
}

// Run keeps the inventory current until ctx ends: it lists the engine at
// start, on every image event the runtime reports, and when markUsed asks,
// and sends the inventory on the current stream whenever it changed (a
// hello carries it too).
func (inv *Inventory) Run(ctx context.Context) {
	if inv.rt == nil {
		return
	}
	inv.cfg.Go(func() { inv.rt.WatchImages(ctx, inv.Changed) })
	for {
		select {
		case <-ctx.Done():
			return
		case <-inv.wake:
		}
		t := inv.cfg.Clock.NewTimer(imageSettle)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
		if err := inv.Refresh(ctx); err != nil && ctx.Err() == nil {
			inv.cfg.Log.Warn("cannot list the runtime's images", "err", err)
		}
	}
}

// Refresh lists the engine; when the inventory changed it is sent on the
// current stream.
func (inv *Inventory) Refresh(ctx context.Context) error {
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
	inv.cfg.Log.Info("the runtime's images changed", "images", len(inv.Snapshot()))
	inv.cfg.Send(&managerv1.WorkerMessage{Msg: &managerv1.WorkerMessage_Images{Images: &managerv1.HeldImages{Images: inv.Snapshot()}}}, false)
	return nil
}

// relist lists the engine and reports whether the inventory changed.
func (inv *Inventory) relist(ctx context.Context) (bool, error) {
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
