package docker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/distribution/reference"
	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"

	"github.com/norsk-go/norsk-manager/internal/runtime"
)

var _ runtime.Images = (*Runtime)(nil)

// HeldImages lists the engine's images, one entry per tag, and per
// repository digest for an image that has no tag of that repository
// (runtime.Images).
func (r *Runtime) HeldImages(ctx context.Context) ([]runtime.HeldImage, error) {
	list, err := r.cli.ImageList(ctx, image.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list the engine's images: %w", err)
	}
	var out []runtime.HeldImage
	for _, im := range list {
		out = append(out, heldRefs(im.ID, im.RepoTags, im.RepoDigests, im.Size)...)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Ref < out[j].Ref })
	return out, nil
}

// heldRefs is one image's entries: a tag's digest is the repository digest
// of the same repository (else the image id).
func heldRefs(id string, tags, digests []string, size int64) []runtime.HeldImage {
	repoDigest := map[string]string{} // normalised repository → digest
	for _, d := range digests {
		repo, dg, ok := strings.Cut(d, "@")
		if !ok {
			continue
		}
		repoDigest[repoOf(NormalizeRef(repo))] = dg
	}
	var out []runtime.HeldImage
	tagged := map[string]bool{}
	for _, t := range tags {
		if t == "" || t == "<none>:<none>" {
			continue
		}
		ref := NormalizeRef(t)
		repo := repoOf(ref)
		tagged[repo] = true
		dg := repoDigest[repo]
		if dg == "" {
			dg = id
		}
		out = append(out, runtime.HeldImage{Ref: ref, Digest: dg, ImageID: id, Size: size})
	}
	for _, d := range digests {
		repo, dg, ok := strings.Cut(d, "@")
		if !ok || tagged[repoOf(NormalizeRef(repo))] || repo == "<none>" {
			continue
		}
		out = append(out, runtime.HeldImage{Ref: repoOf(NormalizeRef(repo)) + "@" + dg, Digest: dg, ImageID: id, Size: size})
	}
	return out
}

// repoOf is a normalised reference without its tag or digest.
func repoOf(ref string) string {
	if i := strings.IndexByte(ref, '@'); i >= 0 {
		ref = ref[:i]
	}
	if i := strings.LastIndexByte(ref, ':'); i > strings.LastIndexByte(ref, '/') {
		ref = ref[:i]
	}
	return ref
}

// inspectHeld looks ref up on the engine: its HeldImage, or an error
// matching cerrdefs.IsNotFound when the engine does not hold it.
func (r *Runtime) inspectHeld(ctx context.Context, ref string) (runtime.HeldImage, error) {
	im, err := r.cli.ImageInspect(ctx, ref)
	if err != nil {
		return runtime.HeldImage{}, err
	}
	h := runtime.HeldImage{Ref: NormalizeRef(ref), Digest: im.ID, ImageID: im.ID, Size: im.Size}
	repo := repoOf(h.Ref)
	for _, d := range im.RepoDigests {
		if rp, dg, ok := strings.Cut(d, "@"); ok && repoOf(NormalizeRef(rp)) == repo {
			h.Digest = dg
			break
		}
	}
	return h, nil
}

// EnsureImage makes ref present, pulling it when the engine does not hold
// it (runtime.Images).
func (r *Runtime) EnsureImage(ctx context.Context, ref string, progress func(runtime.PullProgress)) (runtime.PullResult, error) {
	if ref == "" {
		return runtime.PullResult{}, fmt.Errorf("no image reference: %w", runtime.ErrInvalidSpec)
	}
	held, err := r.inspectHeld(ctx, ref)
	switch {
	case err == nil && !MovingTag(ref):
		return runtime.PullResult{Image: held}, nil
	case err != nil && !cerrdefs.IsNotFound(err):
		return runtime.PullResult{}, fmt.Errorf("inspect image %q: %w", ref, err)
	}
	present := err == nil
	if err := r.pull(ctx, ref, "", progress); err != nil {
		if present {
			return runtime.PullResult{}, fmt.Errorf("refresh the moving tag %q (the copy held, %s, stays): %w", ref, held.Digest, err)
		}
		return runtime.PullResult{}, err
	}
	h, err := r.inspectHeld(ctx, ref)
	if err != nil {
		return runtime.PullResult{}, fmt.Errorf("inspect image %q after its pull: %w", ref, err)
	}
	// A moving tag the registry still resolves to the copy held: nothing
	// new was pulled.
	return runtime.PullResult{Image: h, Pulled: !present || h.ImageID != held.ImageID}, nil
}

// MovingTag reports whether ref names a tag that is expected to move — it
// is `latest`, explicitly or by default — rather than a fixed release tag
// or a digest: the convention Kubernetes' default pull policy follows. A
// prefetch re-resolves a held moving tag against its registry.
func MovingTag(ref string) bool {
	named, err := reference.ParseNormalizedNamed(ref)
	if err != nil {
		return false
	}
	if _, ok := named.(reference.Digested); ok {
		return false
	}
	t, ok := named.(reference.Tagged)
	return !ok || t.Tag() == "latest"
}

// pull pulls ref through the engine with the Docker config's credentials
// for its registry, telling progress (when set) as the engine reports
// layers and bytes. A failure wraps runtime.ErrImagePull and carries the
// engine's (the registry's) answer.
func (r *Runtime) pull(ctx context.Context, ref, service string, progress func(runtime.PullProgress)) error {
	start := time.Now()
	fail := func(err error) error {
		// The registry's answer, without the engine's wrapping.
		msg := strings.TrimPrefix(err.Error(), "Error response from daemon: ")
		err = fmt.Errorf("pull image %q: %s: %w", ref, msg, runtime.ErrImagePull)
		if progress != nil {
			progress(runtime.PullProgress{Image: ref, Service: service, Err: err, Elapsed: time.Since(start)})
		}
		return err
	}
	auth, err := registryAuth(ctx, r.dockerConfig, ref)
	if err != nil {
		return fail(fmt.Errorf("registry credentials: %w", err))
	}
	r.log.Info("pulling image", "image", ref, "service", service, "credentials", auth != "")
	rc, err := r.cli.ImagePull(ctx, ref, image.PullOptions{RegistryAuth: auth})
	if err != nil {
		return fail(err)
	}
	defer rc.Close()
	t := newPullTracker(ref, service, start)
	dec := json.NewDecoder(rc)
	for {
		var m pullMessage
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			if ctx.Err() != nil {
				return fail(ctx.Err())
			}
			return fail(fmt.Errorf("read the engine's pull progress: %w", err))
		}
		if m.Error != nil && m.Error.Message != "" {
			return fail(errors.New(m.Error.Message))
		}
		if m.ErrorMessage != "" {
			return fail(errors.New(m.ErrorMessage))
		}
		if t.take(m) && progress != nil {
			progress(t.progress())
		}
	}
	p := t.progress()
	p.Done = true
	if progress != nil {
		progress(p)
	}
	r.log.Info("pulled image", "image", ref, "service", service, "layers", p.Layers, "bytes", p.BytesTotal, "took", p.Elapsed.Round(time.Millisecond))
	return nil
}

// pullMessage is one message of the engine's pull stream (the fields of
// Docker's jsonmessage the runtime reads).
type pullMessage struct {
	Status   string `json:"status"`
	ID       string `json:"id"`
	Progress *struct {
		Current int64 `json:"current"`
		Total   int64 `json:"total"`
	} `json:"progressDetail"`
	Error *struct {
		Message string `json:"message"`
	} `json:"errorDetail"`
	ErrorMessage string `json:"error"`
}

// pullTracker folds the engine's pull messages into layer and byte counts.
type pullTracker struct {
	ref, service string
	start        time.Time
	order        []string
	layers       map[string]*layerState
}

type layerState struct {
	done           bool
	current, total int64
}

func newPullTracker(ref, service string, start time.Time) *pullTracker {
	return &pullTracker{ref: ref, service: service, start: start, layers: map[string]*layerState{}}
}

// take folds one message in and reports whether the counts changed.
func (t *pullTracker) take(m pullMessage) bool {
	if m.ID == "" {
		return false
	}
	var done bool
	switch m.Status {
	case "Pulling fs layer", "Waiting", "Downloading", "Verifying Checksum", "Download complete", "Extracting":
	case "Pull complete", "Already exists":
		done = true
	default:
		return false // "Pulling from …", digests, status lines
	}
	l := t.layers[m.ID]
	if l == nil {
		l = &layerState{}
		t.layers[m.ID] = l
		t.order = append(t.order, m.ID)
	}
	changed := false
	if done && !l.done {
		l.done, changed = true, true
		if l.total > 0 {
			l.current = l.total
		}
	}
	if m.Status == "Downloading" && m.Progress != nil {
		if m.Progress.Total > 0 && m.Progress.Total != l.total {
			l.total, changed = m.Progress.Total, true
		}
		if m.Progress.Current != l.current {
			l.current, changed = m.Progress.Current, true
		}
	}
	if m.Status == "Download complete" && l.total > 0 && l.current != l.total {
		l.current, changed = l.total, true
	}
	return changed || len(t.order) == 1 && l.current == 0
}

func (t *pullTracker) progress() runtime.PullProgress {
	p := runtime.PullProgress{Image: t.ref, Service: t.service, Layers: len(t.order), Elapsed: time.Since(t.start)}
	for _, id := range t.order {
		l := t.layers[id]
		if l.done {
			p.LayersDone++
		}
		p.Bytes += l.current
		p.BytesTotal += l.total
	}
	return p
}

// WatchImages calls changed on every image event of the engine and after
// every (re)connection to its event stream (runtime.Images).
func (r *Runtime) WatchImages(ctx context.Context, changed func()) {
	backoff := 250 * time.Millisecond
	for ctx.Err() == nil {
		sub, cancel := context.WithCancel(ctx)
		msgs, errs := r.cli.Events(sub, events.ListOptions{Filters: filters.NewArgs(filters.Arg("type", string(events.ImageEventType)))})
		changed()
		connected := time.Now()
	loop:
		for {
			select {
			case <-ctx.Done():
				cancel()
				return
			case m := <-msgs:
				switch m.Action {
				case events.ActionPull, events.ActionTag, events.ActionUnTag, events.ActionDelete, events.ActionLoad, events.ActionImport:
					changed()
				}
			case err := <-errs:
				if ctx.Err() == nil {
					r.log.Warn("the engine's event stream ended; watching images again", "err", err, "retry_in", backoff)
				}
				break loop
			}
		}
		cancel()
		if time.Since(connected) > time.Minute {
			backoff = 250 * time.Millisecond
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 30*time.Second)
	}
}
