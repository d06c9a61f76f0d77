package docker

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/registry"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/internal/localregistry"
	"github.com/norsk-go/norsk-manager/internal/runtime"
)

// progressLog records the progress a Prepare or a pull reports.
type progressLog struct {
	mu sync.Mutex
	ps []runtime.PullProgress
}

func (l *progressLog) add(p runtime.PullProgress) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ps = append(l.ps, p)
}

func (l *progressLog) all() []runtime.PullProgress {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]runtime.PullProgress(nil), l.ps...)
}

// untag removes one tag from the engine (never the image of another tag).
func untag(t *testing.T, rt *Runtime, ref string) {
	t.Helper()
	_, err := rt.cli.ImageRemove(context.Background(), ref, image.RemoveOptions{})
	if err != nil && !cerrdefs.IsNotFound(err) {
		t.Fatalf("untag %s: %v", ref, err)
	}
}

// TestPullPolicies starts services whose images are present, absent (and
// pulled from a real registry on a loopback port), absent from the registry
// too, and absent with pull policy never; and always pulls again.
func TestPullPolicies(t *testing.T) {
	t.Parallel()
	rt := newRuntime(t, "node-pull")
	reg := localregistry.ForTest(t)
	ref, err := reg.Push(t.Context(), rt.cli, testImage, "norsk/testprog:v1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { untag(t, rt, ref) })
	missing := reg.Ref("norsk/absent:v1")

	cases := []struct {
		name    string
		image   string
		policy  managerv1.PullPolicy
		untag   bool     // remove the ref from the engine first
		pulls   bool     // a pull is reported, and ends well
		err     error    // Prepare's error wraps it
		mention []string // words the error must carry
	}{
		{name: "present", image: ref},
		{name: "absent", image: ref, untag: true, pulls: true},
		{name: "absent-never", image: ref, untag: true, policy: managerv1.PullPolicy_PULL_POLICY_NEVER, err: runtime.ErrImageNotFound, mention: []string{ref, "never"}},
		{name: "always", image: ref, policy: managerv1.PullPolicy_PULL_POLICY_ALWAYS, pulls: true},
		{name: "failing", image: missing, err: runtime.ErrImagePull, mention: []string{missing, "manifest unknown"}},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.untag {
				untag(t, rt, tc.image)
			}
			key := runtime.Key{JobID: "job-pull-" + tc.name, Role: "primary"}
			var log progressLog
			spec := runtime.InstanceSpec{
				Key: key, NodeID: "node-pull", Token: uint64(i + 1),
				Job: &managerv1.Job{JobId: key.JobID, Services: []*managerv1.Service{{
					Name: "main", Image: tc.image, PullPolicy: tc.policy,
				}}},
				PullProgress: log.add,
			}
			t.Cleanup(func() { _ = rt.Remove(context.Background(), key) })
			err := rt.Prepare(t.Context(), spec)
			if tc.err != nil {
				if !errors.Is(err, tc.err) {
					t.Fatalf("Prepare = %v, want %v", err, tc.err)
				}
				for _, w := range tc.mention {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("Prepare's error %q does not mention %q", err, w)
					}
				}
				if cs, _ := rt.instanceContainers(t.Context(), key); len(cs) != 0 {
					t.Errorf("a failed Prepare left %d container(s)", len(cs))
				}
				return
			}
			if err != nil {
				t.Fatalf("Prepare: %v", err)
			}
			ps := log.all()
			if !tc.pulls {
				if len(ps) != 0 {
					t.Errorf("a present image was pulled: %+v", ps)
				}
				return
			}
			if len(ps) == 0 || !ps[len(ps)-1].Done || ps[len(ps)-1].Image != tc.image || ps[len(ps)-1].Service != "main" {
				t.Fatalf("pull progress = %+v, want it to end Done for %s", ps, tc.image)
			}
			if _, err := rt.cli.ImageInspect(t.Context(), tc.image); err != nil {
				t.Errorf("image %s not present after its pull: %v", tc.image, err)
			}
		})
	}
}

// TestEnsureImageAndHeld pulls through EnsureImage (the prefetch path),
// sees the inventory change through the engine's events, and sees an image
// removed by hand leave it.
func TestEnsureImageAndHeld(t *testing.T) {
	t.Parallel()
	rt := newRuntime(t, "node-held")
	reg := localregistry.ForTest(t)
	ref, err := reg.Push(t.Context(), rt.cli, testImage, "norsk/held:v1")
	if err != nil {
		t.Fatal(err)
	}
	untag(t, rt, ref)
	t.Cleanup(func() { untag(t, rt, ref) })

	ctx, cancel := context.WithCancel(t.Context())
	changes := make(chan struct{}, 64)
	done := make(chan struct{})
	go func() {
		defer close(done)
		rt.WatchImages(ctx, func() { changes <- struct{}{} })
	}()
	defer func() { cancel(); <-done }()
	waitChange := func(what string) {
		t.Helper()
		select {
		case <-changes:
		case <-time.After(30 * time.Second):
			t.Fatalf("no image event for %s", what)
		}
	}
	waitChange("the watch's start")

	held := func() map[string]runtime.HeldImage {
		hs, err := rt.HeldImages(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]runtime.HeldImage{}
		for _, h := range hs {
			out[h.Ref] = h
		}
		return out
	}
	if _, ok := held()[ref]; ok {
		t.Fatalf("%s held before its pull", ref)
	}
	res, err := rt.EnsureImage(t.Context(), ref, nil)
	if err != nil || !res.Pulled || !strings.HasPrefix(res.Image.Digest, "sha256:") || res.Image.Size <= 0 {
		t.Fatalf("EnsureImage = %+v, %v; want pulled with digest and size", res, err)
	}
	waitChange("the pull")
	h, ok := held()[ref]
	if !ok || h.Digest != res.Image.Digest {
		t.Fatalf("held after the pull: %+v (ok %v), want digest %s", h, ok, res.Image.Digest)
	}
	again, err := rt.EnsureImage(t.Context(), ref, nil)
	if err != nil || again.Pulled || again.Image.Digest != res.Image.Digest {
		t.Fatalf("EnsureImage of a held image = %+v, %v; want already present", again, err)
	}
	untag(t, rt, ref) // by hand, as an operator would
	waitChange("the removal")
	if _, ok := held()[ref]; ok {
		t.Errorf("%s still held after its removal", ref)
	}
	if _, err := rt.EnsureImage(t.Context(), reg.Ref("norsk/none:v1"), nil); !errors.Is(err, runtime.ErrImagePull) {
		t.Errorf("EnsureImage of a ref the registry lacks = %v, want ErrImagePull", err)
	}
}

func TestRegistryAuth(t *testing.T) {
	t.Parallel()
	basic := base64.StdEncoding.EncodeToString([]byte("alice:s3cret"))
	cases := []struct {
		name, config, ref string
		want              *registry.AuthConfig // nil: no credentials
		err               string
	}{
		{name: "no config", ref: "127.0.0.1:5000/x:1"},
		{name: "auth for the host", config: `{"auths":{"127.0.0.1:5000":{"auth":"` + basic + `"}}}`, ref: "127.0.0.1:5000/x:1",
			want: &registry.AuthConfig{Username: "alice", Password: "s3cret", ServerAddress: "127.0.0.1:5000"}},
		{name: "https key", config: `{"auths":{"https://reg.example.com":{"username":"bob","password":"pw"}}}`, ref: "reg.example.com/a/b:2",
			want: &registry.AuthConfig{Username: "bob", Password: "pw", ServerAddress: "reg.example.com"}},
		{name: "docker hub", config: `{"auths":{"https://index.docker.io/v1/":{"auth":"` + basic + `"}}}`, ref: "nginx",
			want: &registry.AuthConfig{Username: "alice", Password: "s3cret", ServerAddress: dockerHubAuthKey}},
		{name: "another registry", config: `{"auths":{"reg.example.com":{"auth":"` + basic + `"}}}`, ref: "127.0.0.1:5000/x:1"},
		{name: "bad auth", config: `{"auths":{"127.0.0.1:5000":{"auth":"!!"}}}`, ref: "127.0.0.1:5000/x:1", err: "not base64"},
		{name: "bad json", config: `{`, ref: "x", err: "read the Docker config"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			if tc.config != "" {
				if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(tc.config), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			got, err := registryAuth(t.Context(), dir, tc.ref)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("registryAuth = %q, %v; want an error with %q", got, err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.want == nil {
				if got != "" {
					t.Errorf("registryAuth = %q, want none", got)
				}
				return
			}
			raw, err := base64.URLEncoding.DecodeString(got)
			if err != nil {
				t.Fatal(err)
			}
			var ac registry.AuthConfig
			if err := json.Unmarshal(raw, &ac); err != nil {
				t.Fatal(err)
			}
			if ac.Username != tc.want.Username || ac.Password != tc.want.Password || ac.ServerAddress != tc.want.ServerAddress {
				t.Errorf("registryAuth = %+v, want %+v", ac, *tc.want)
			}
		})
	}
}

func TestPullTracker(t *testing.T) {
	t.Parallel()
	tr := newPullTracker("r", "s", time.Now())
	msgs := []string{
		`{"status":"Pulling from norsk/x","id":"v1"}`,
		`{"status":"Pulling fs layer","id":"a"}`,
		`{"status":"Already exists","id":"b"}`,
		`{"status":"Downloading","id":"a","progressDetail":{"current":100,"total":400}}`,
		`{"status":"Downloading","id":"a","progressDetail":{"current":300,"total":400}}`,
		`{"status":"Download complete","id":"a"}`,
		`{"status":"Pull complete","id":"a"}`,
		`{"status":"Digest: sha256:abc"}`,
	}
	for _, m := range msgs {
		var pm pullMessage
		if err := json.Unmarshal([]byte(m), &pm); err != nil {
			t.Fatal(err)
		}
		tr.take(pm)
	}
	p := tr.progress()
	if p.Layers != 2 || p.LayersDone != 2 || p.Bytes != 400 || p.BytesTotal != 400 {
		t.Errorf("progress = %+v, want 2/2 layers, 400/400 bytes", p)
	}
}

func TestHeldRefs(t *testing.T) {
	t.Parallel()
	got := heldRefs("sha256:id", []string{"nginx:1.27", "127.0.0.1:5000/a/b:v1"},
		[]string{"nginx@sha256:d1", "127.0.0.1:5000/c@sha256:d2"}, 10)
	want := map[string]string{
		"docker.io/library/nginx:1.27": "sha256:d1",
		"127.0.0.1:5000/a/b:v1":        "sha256:id",
		"127.0.0.1:5000/c@sha256:d2":   "sha256:d2",
	}
	if len(got) != len(want) {
		t.Fatalf("heldRefs = %+v", got)
	}
	for _, h := range got {
		if want[h.Ref] != h.Digest || h.Size != 10 || h.ImageID != "sha256:id" {
			t.Errorf("held %+v, want digest %q", h, want[h.Ref])
		}
	}
}

// A held moving tag (`latest`) is pulled again: the registry's current
// image replaces the one held (Pulled), the same one is no pull (not
// Pulled); a refresh the registry cannot answer fails and says the held
// copy stays.
func TestEnsureImageRefreshesAMovingTag(t *testing.T) {
	t.Parallel()
	rt := newRuntime(t, "node-moving")
	reg := localregistry.ForTest(t)
	ctx := t.Context()
	ref, err := reg.Push(ctx, rt.cli, testImage, "norsk/moving:latest")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { untag(t, rt, ref) })
	first, err := rt.EnsureImage(ctx, ref, nil)
	if err != nil || first.Pulled {
		t.Fatalf("EnsureImage of a held moving tag the registry still resolves to it = %+v, %v; want no new image", first, err)
	}

	// The tag moves in the registry to another image (a commit of the
	// test image with a label: nothing is pulled from outside).
	c, err := rt.cli.ContainerCreate(ctx, &container.Config{Image: testImage}, nil, nil, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	moved := "norsk-moving-b:" + strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-"))
	_, err = rt.cli.ContainerCommit(ctx, c.ID, container.CommitOptions{Reference: moved, Changes: []string{"LABEL norsk.test.moved=b"}})
	_ = rt.cli.ContainerRemove(context.Background(), c.ID, container.RemoveOptions{Force: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { untag(t, rt, moved) })
	if _, err := reg.Push(ctx, rt.cli, moved, "norsk/moving:latest"); err != nil {
		t.Fatal(err)
	}
	if err := rt.cli.ImageTag(ctx, testImage, ref); err != nil { // the node still holds the old one
		t.Fatal(err)
	}
	res, err := rt.EnsureImage(ctx, ref, nil)
	if err != nil || !res.Pulled || res.Image.ImageID == first.Image.ImageID {
		t.Fatalf("EnsureImage after the tag moved = %+v, %v; want the new image pulled (old %s)", res, err, first.Image.ImageID)
	}

	// A moving tag held but unknown to its registry: the refresh fails.
	local := reg.Ref("norsk/local-only:latest")
	if err := rt.cli.ImageTag(ctx, testImage, local); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { untag(t, rt, local) })
	if _, err := rt.EnsureImage(ctx, local, nil); !errors.Is(err, runtime.ErrImagePull) || !strings.Contains(err.Error(), "stays") {
		t.Errorf("refresh of a tag the registry lacks = %v; want ErrImagePull saying the held copy stays", err)
	}
}

func TestMovingTag(t *testing.T) {
	t.Parallel()
	for ref, want := range map[string]bool{
		"nginx": true, "nginx:latest": true, "127.0.0.1:5000/enc": true, "127.0.0.1:5000/enc:latest": true,
		"nginx:1.27": false, "127.0.0.1:5000/enc:v3": false,
		"nginx@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef": false,
		"NOT A REF": false,
	} {
		if got := MovingTag(ref); got != want {
			t.Errorf("MovingTag(%q) = %v, want %v", ref, got, want)
		}
	}
}
