package runtime

import (
	"context"
	"time"
)

// PullProgress is how far one image pull has got.
type PullProgress struct {
	// Image is the reference being pulled.
	Image string
	// Service is the service whose image it is ("" for a prefetch).
	Service string
	// Layers is how many layers the pull has seen, LayersDone how many of
	// them are complete (downloaded and extracted, or already present).
	Layers, LayersDone int
	// Bytes is how much of the layers being downloaded has arrived, of
	// BytesTotal (both 0 until the engine reports sizes).
	Bytes, BytesTotal int64
	// Done is set on the last call, when the pull has ended well; Err is
	// set when it failed.
	Done bool
	Err  error
	// Elapsed is how long the pull has taken so far.
	Elapsed time.Duration
}

// HeldImage is one image reference a runtime holds.
type HeldImage struct {
	// Ref is the normalised reference (NormalizeRef): a tag, or
	// repository@digest for an image held by digest only.
	Ref string
	// Digest is the repository digest when the image came from a
	// registry, else the image id.
	Digest string
	// ImageID is the engine's id of the image.
	ImageID string
	// Size is the image's size in bytes.
	Size int64
}

// PullResult is what a pull (or a look-up that found the image) gives.
type PullResult struct {
	// Image is the image now held under the reference asked for.
	Image HeldImage
	// Pulled is false when the image was already held and nothing was
	// pulled.
	Pulled bool
}

// Images is implemented by runtimes that hold images (docker): the worker
// reports what they hold, prefetches into them and watches them change. A
// runtime without images (process) does not implement it.
type Images interface {
	// HeldImages lists every tagged (or digest-referenced) image the
	// engine holds, one entry per reference, sorted by Ref. Untagged
	// images without a repository digest are left out.
	HeldImages(ctx context.Context) ([]HeldImage, error)

	// EnsureImage makes ref present: a held image is only looked up
	// (Pulled false), unless ref is a moving tag (`latest`, written or
	// implied), which is pulled again so that it names the registry's
	// current image (Pulled says whether that changed what is held); an
	// absent one is pulled with the registry
	// credentials of the worker's Docker config, progress told along the
	// way. A failed pull wraps ErrImagePull and carries the registry's
	// answer.
	EnsureImage(ctx context.Context, ref string, progress func(PullProgress)) (PullResult, error)

	// WatchImages calls changed (from its own goroutine, never
	// concurrently) whenever the engine reports an image event (pull, tag,
	// untag, delete, load, import), and once each time it (re)connects to
	// the engine's event stream, since events may have been missed while
	// it was down. It returns when ctx ends.
	WatchImages(ctx context.Context, changed func())
}
