package tests

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/image"

	"github.com/norsk-go/norsk-manager/internal/cli"
	"github.com/norsk-go/norsk-manager/internal/localregistry"
	"github.com/norsk-go/norsk-manager/internal/runtime/runtimetest"
	"github.com/norsk-go/norsk-manager/internal/testcluster"
	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

// holds reports whether a node's held images name ref.
func holds(n *norsk.Node, ref string) *norsk.HeldImage {
	for _, h := range n.GetHeldImages() {
		if h.GetRef() == ref {
			return h
		}
	}
	return nil
}

// untagImage removes one tag from the engine, as an operator would.
func (d *dockerCluster) untagImage(t testing.TB, ref string) {
	t.Helper()
	if _, err := d.cli.ImageRemove(context.Background(), ref, image.RemoveOptions{}); err != nil && !cerrdefs.IsNotFound(err) {
		t.Fatalf("remove image %s: %v", ref, err)
	}
}

// Warm nodes against a real registry on a loopback port: a start pulls
// its absent image (progress in the job's history), a prefetch of several
// refs where one is bad reports each on its own with heldImages right
// behind, heldImages follow an image removed by hand and survive a worker
// restart, and a pull that fails (or is forbidden) fails the start with a
// reason naming the image.
func TestWarmPullsPrefetchAndHeldImages(t *testing.T) {
	t.Parallel()
	d := newDockerCluster(t, testcluster.Options{})
	reg := localregistry.ForTest(t)
	cl, x := d.Client(), ctx(t)
	pushed := func(repoTag string) string {
		ref, err := reg.Push(x, d.cli, testProgImage, repoTag)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.untagImage(t, ref) })
		d.untagImage(t, ref) // held by the registry only
		return ref
	}
	onStart, warm := pushed("norsk/onstart:v1"), pushed("norsk/warm:v1")
	missing := reg.Ref("norsk/missing:v1")
	d.WaitNodeConnected(d.worker)

	// A start pulls the absent image; the history tells how it went.
	job := imageJob("warm-pull", runtimetest.Behaviour{})
	job.Services[0].Image = onStart
	if _, err := cl.CreateJob(x, job); err != nil {
		t.Fatal(err)
	}
	// norsk-ctl job start --wait shows the pull as it goes.
	var out, errOut bytes.Buffer
	if code := cli.Main(x, []string{"--manager-url", d.URL(), "--token", d.Token(), "job", "start", job.GetJobId(), "--node", d.worker, "--wait"},
		strings.NewReader(""), &out, &errOut); code != 0 {
		t.Fatalf("job start --wait: exit %d\n%s\n%s", code, out.String(), errOut.String())
	}
	if !strings.Contains(errOut.String(), "pulled "+onStart) {
		t.Errorf("job start --wait did not show the pull:\nstdout:\n%s\nstderr:\n%s", out.String(), errOut.String())
	}
	d.WaitPhase(job.GetJobId(), "primary", norsk.InstancePhaseRunning)
	jh := d.WaitJob(job.GetJobId(), "the pull's notice", func(jh *norsk.JobWithHistory) bool {
		return slices.ContainsFunc(jh.GetHistory(), func(e *norsk.JobHistoryEntry) bool {
			n := e.GetNotice()
			return n.GetKind() == "image-pull" && strings.Contains(n.GetMessage(), "pulled "+onStart)
		})
	})
	_ = jh
	d.Eventually("the pulled image in heldImages, with its last use", func() bool {
		h := holds(d.Node(d.worker), onStart)
		return h != nil && h.GetLastUsed() != nil && strings.HasPrefix(h.GetDigest(), "sha256:")
	})

	// A prefetch of three refs, one bad: each says for itself.
	res, err := cl.PrefetchImages(x, d.worker, []string{warm, onStart, missing})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]*norsk.ImagePrefetchResult{}
	var order []string // event kinds after the request
	fx, cancel := context.WithTimeout(x, 2*time.Minute)
	defer cancel()
	s := cl.EventStream(fx, norsk.EventStreamSettings{AfterIndex: res.GetIndex()})
	defer s.Close()
	for len(got) < 3 && s.Next() {
		ev := s.Event()
		if p := ev.GetImagesPrefetched(); p != nil && p.GetRequestId() == res.GetRequestId() {
			for _, r := range p.GetResults() {
				got[r.GetRef()] = r
				order = append(order, "prefetched "+r.GetRef())
			}
		}
		if n := ev.GetNodeImagesUpdated(); n != nil && n.GetNode().GetNodeId() == d.worker {
			order = append(order, "images")
		}
	}
	if len(got) < 3 {
		t.Fatalf("prefetch outcomes: %v (stream: %v)", got, s.Err())
	}
	if r := got[warm]; r.GetOutcome() != norsk.ImagePrefetchPulled || !strings.HasPrefix(r.GetDigest(), "sha256:") || r.GetSizeBytes() == 0 {
		t.Errorf("%s: %v, want pulled with digest and size", warm, r)
	}
	if r := got[onStart]; r.GetOutcome() != norsk.ImagePrefetchAlreadyPresent {
		t.Errorf("%s: %v, want already present", onStart, r)
	}
	if r := got[missing]; r.GetOutcome() != norsk.ImagePrefetchFailed || !strings.Contains(r.GetError(), missing) || !strings.Contains(r.GetError(), "manifest unknown") {
		t.Errorf("%s: %v, want failed with the registry's answer", missing, r)
	}
	// The images the warm pull changed come right behind its outcome, in
	// the same write.
	if i := slices.Index(order, "prefetched "+warm); i < 0 || i+1 >= len(order) || order[i+1] != "images" {
		t.Errorf("events after the prefetch: %v; want node_images_updated right behind %s", order, warm)
	}
	if holds(d.Node(d.worker), warm) == nil {
		t.Errorf("%s not in the node's heldImages after its prefetch", warm)
	}
	// Refused before the worker is told.
	if _, err := cl.PrefetchImages(x, d.worker, []string{"Not A Ref"}); !strings.Contains(err.Error(), "imageRefs[0]") {
		t.Errorf("a bad ref: %v", err)
	}

	// Removed by hand: gone from heldImages, without the Manager asking.
	d.untagImage(t, warm)
	d.Eventually("the removed image gone from heldImages", func() bool { return holds(d.Node(d.worker), warm) == nil })

	// A worker restart reports what it holds in its hello.
	d.Worker(d.worker).Restart()
	d.WaitNodeConnected(d.worker)
	if holds(d.Node(d.worker), onStart) == nil {
		t.Errorf("%s not in heldImages after the worker's restart: %v", onStart, d.Node(d.worker).GetHeldImages())
	}

	// A pull that fails fails the start, naming the image and the answer;
	// policy never refuses an absent image without pulling.
	for _, tc := range []struct {
		id, image string
		policy    norsk.PullPolicy
		want      []string
	}{
		{"warm-fail", missing, norsk.PullPolicyIfNotPresent, []string{missing, "manifest unknown"}},
		{"warm-never", warm, norsk.PullPolicyNever, []string{warm, "pull policy is never"}},
	} {
		j := imageJob(tc.id, runtimetest.Behaviour{})
		j.Services[0].Image, j.Services[0].PullPolicy = tc.image, tc.policy
		if _, err := cl.CreateJob(x, j); err != nil {
			t.Fatal(err)
		}
		if _, err := cl.StartJob(x, tc.id, "primary", d.worker, norsk.StartJobOptions{}); err != nil {
			t.Fatal(err)
		}
		jh := d.WaitJob(tc.id, "a failed start", func(jh *norsk.JobWithHistory) bool { return stoppingEntry(jh) != nil })
		st := stoppingEntry(jh)
		for _, w := range tc.want {
			if !strings.Contains(st.GetAdditionalReason(), w) {
				t.Errorf("%s: stopping reason %q lacks %q", tc.id, st.GetAdditionalReason(), w)
			}
		}
	}
	if holds(d.Node(d.worker), warm) != nil {
		t.Errorf("policy never pulled %s", warm)
	}
}
