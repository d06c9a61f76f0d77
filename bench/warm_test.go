package bench

// Warm-node benchmarks: what a warm spare saves a channel whose node dies,
// and how fast a node prefetches. Real pieces only: a Manager member, a
// process-runtime worker running the job, a docker-runtime worker as the
// spare (a local server tagged spare=true), the local Docker engine, and
// Debian's docker-registry on a loopback port holding the image. Nothing is
// pulled from outside the machine: the images are built here, FROM scratch.
//
//	go test ./bench -run '^$' -bench 'WarmRecovery|Prefetch' -benchtime=3x -timeout 30m
//
// # BenchmarkWarmRecovery/spare=warm|cold
//
// The job's one service has a command (the runtime test program, at the
// same absolute path on the host and in the image) and an image of about
// 200 MB (the program and 200 MB of random bytes, in the registry only), so
// it runs on the process worker first and can run on the docker spare. The
// process worker is killed (testcluster's Worker.Kill: agent and instances
// SIGKILLed) and the clock runs until the job is RUNNING on the spare.
// warm: the spare prefetched the image first (PrefetchImages, untimed), so
// the start pulls nothing; cold: the engine holds none of the image's
// layers, so the start pulls 200 MB from the registry. testcluster's quick
// settings (LostGrace 2 s). Reported: recovery-p50-s, recovery-max-s.
//
// # BenchmarkPrefetch10
//
// One PrefetchImages of 10 distinct images (8 MiB of random bytes each,
// one layer) on a docker worker whose engine holds none of them, timed
// until the 10th imagesPrefetched event. Reported: refs/s, MB/s.

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/build"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"

	"github.com/norsk-go/norsk-manager/internal/localregistry"
	"github.com/norsk-go/norsk-manager/internal/runtime"
	"github.com/norsk-go/norsk-manager/internal/runtime/runtimetest"
	"github.com/norsk-go/norsk-manager/internal/testcluster"
	"github.com/norsk-go/norsk-manager/internal/testimage"
	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

// buildBlobImage builds tag FROM scratch with files (path in the image →
// content, executable when exec names it).
func buildBlobImage(ctx context.Context, cli *client.Client, tag string, files map[string][]byte, exec string) error {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	var df strings.Builder
	df.WriteString("FROM scratch\n")
	add := func(name string, mode int64, data []byte) error {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: mode, Size: int64(len(data)), ModTime: time.Unix(0, 0)}); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	i := 0
	for path, data := range files {
		name := fmt.Sprintf("f%d", i)
		i++
		mode := int64(0o644)
		if path == exec {
			mode = 0o755
		}
		if err := add(name, mode, data); err != nil {
			return err
		}
		fmt.Fprintf(&df, "COPY %s %s\n", name, path)
	}
	if err := add("Dockerfile", 0o644, []byte(df.String())); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	resp, err := cli.ImageBuild(ctx, &buf, build.ImageBuildOptions{Tags: []string{tag}, Dockerfile: "Dockerfile", Remove: true, ForceRemove: true})
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	dec := json.NewDecoder(resp.Body)
	for {
		var m struct {
			Error string `json:"error"`
		}
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			return nil
		} else if err != nil {
			return err
		}
		if m.Error != "" {
			return errors.New(m.Error)
		}
	}
}

func randomBytes(b testing.TB, n int) []byte {
	out := make([]byte, n)
	if _, err := rand.Read(out); err != nil {
		b.Fatal(err)
	}
	return out
}

// forget removes the images of refs from the engine, by id (every tag,
// and its layers: no container may use them any more).
func forget(ctx context.Context, cli *client.Client, refs ...string) {
	for _, r := range refs {
		id := r
		if im, err := cli.ImageInspect(ctx, r); err == nil {
			id = im.ID
		}
		_, _ = cli.ImageRemove(ctx, id, image.RemoveOptions{Force: true, PruneChildren: true})
	}
}

// removeNodeContainers removes the containers of a docker worker's node.
func removeNodeContainers(ctx context.Context, cli *client.Client, node string) {
	cs, err := cli.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", runtime.LabelNode+"="+node))})
	if err != nil {
		return
	}
	for _, c := range cs {
		_ = cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true})
	}
}

func BenchmarkWarmRecovery(b *testing.B) {
	cli := testimage.Engine(b)
	reg := localregistry.ForTest(b)
	prog := testcluster.TestProg(b)
	bin, err := os.ReadFile(prog)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	local := "norsk-bench/warm-200m:local"
	if err := buildBlobImage(ctx, cli, local, map[string][]byte{prog: bin, "/blob": randomBytes(b, 200<<20)}, prog); err != nil {
		b.Fatal(err)
	}
	ref, err := reg.Push(ctx, cli, local, "norsk/warm-200m:v1")
	if err != nil {
		b.Fatal(err)
	}
	forget(ctx, cli, local, ref) // in the registry only
	for _, warm := range []bool{true, false} {
		name := "spare=cold"
		if warm {
			name = "spare=warm"
		}
		b.Run(name, func(b *testing.B) {
			var samples []time.Duration
			for range b.N {
				b.StopTimer()
				samples = append(samples, warmRecoveryOnce(b, cli, ref, prog, warm))
			}
			slices.Sort(samples)
			b.ReportMetric(samples[len(samples)/2].Seconds(), "recovery-p50-s")
			b.ReportMetric(samples[len(samples)-1].Seconds(), "recovery-max-s")
		})
	}
}

func warmRecoveryOnce(b *testing.B, cli *client.Client, ref, prog string, warm bool) time.Duration {
	ctx := context.Background()
	c := testcluster.New(b, testcluster.Options{Workers: 1})
	spare := fmt.Sprintf("warm-spare-%d", time.Now().UnixNano()%1e9)
	c.AddWorker(spare, "docker")
	defer func() {
		// The spare's worker first (it would restart the job's
		// container), then its containers, then the image they used.
		_ = c.Worker(spare).Stop()
		removeNodeContainers(ctx, cli, spare)
		forget(ctx, cli, ref)
	}()
	c.WaitNodeConnected(spare)
	cl := c.Client()
	if _, err := cl.SetNodeTags(ctx, spare, map[string]string{"spare": "true"}); err != nil {
		b.Fatal(err)
	}
	job := &norsk.Job{JobId: "warm-channel", AutoPlacement: &norsk.AutoPlacement{}, Services: []*norsk.Service{{
		Name: "main", Image: ref, Command: []string{prog}, Args: runtimetest.Behaviour{}.Args(),
	}}}
	if _, err := cl.CreateJob(ctx, job); err != nil {
		b.Fatal(err)
	}
	first := c.WaitPhase(job.GetJobId(), "primary", norsk.InstancePhaseRunning)
	if first.GetNodeId() != "worker-1" {
		b.Fatalf("the job started on %s, not the process worker", first.GetNodeId())
	}
	if _, err := cli.ImageInspect(ctx, ref); err == nil {
		b.Fatalf("the engine holds %s before the spare pulls it", ref)
	}
	if warm {
		if _, err := cl.PrefetchImages(ctx, spare, []string{ref}); err != nil {
			b.Fatal(err)
		}
		c.Eventually("the spare holds the image", func() bool {
			n := c.Node(spare)
			return slices.ContainsFunc(n.GetHeldImages(), func(h *norsk.HeldImage) bool { return h.GetRef() == ref })
		})
	}
	b.StartTimer()
	start := time.Now()
	if err := c.Worker("worker-1").Kill(); err != nil {
		b.Fatal(err)
	}
	for {
		jh, err := cl.JobById(ctx, job.GetJobId())
		if err == nil {
			if in := testcluster.Instance(jh, "primary"); in != nil && in.GetNodeId() == spare && in.GetPhase() == norsk.InstancePhaseRunning {
				break
			}
		}
		if time.Since(start) > 5*time.Minute {
			b.Fatalf("the job is not running on the spare 5 min after the kill")
		}
		time.Sleep(10 * time.Millisecond)
	}
	took := time.Since(start)
	b.StopTimer()
	return took
}

func BenchmarkPrefetch10(b *testing.B) {
	cli := testimage.Engine(b)
	reg := localregistry.ForTest(b)
	ctx := context.Background()
	const size = 8 << 20
	var refs []string
	for i := range 10 {
		local := fmt.Sprintf("norsk-bench/prefetch-%d:local", i)
		if err := buildBlobImage(ctx, cli, local, map[string][]byte{"/blob": randomBytes(b, size)}, ""); err != nil {
			b.Fatal(err)
		}
		ref, err := reg.Push(ctx, cli, local, fmt.Sprintf("norsk/prefetch-%d:v1", i))
		if err != nil {
			b.Fatal(err)
		}
		forget(ctx, cli, local, ref)
		refs = append(refs, ref)
	}
	c := testcluster.New(b, testcluster.Options{Workers: 0})
	node := fmt.Sprintf("prefetch-%d", time.Now().UnixNano()%1e9)
	c.AddWorker(node, "docker")
	c.WaitNodeConnected(node)
	cl := c.Client()
	var total time.Duration
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		forget(ctx, cli, refs...)
		b.StartTimer()
		start := time.Now()
		res, err := cl.PrefetchImages(ctx, node, refs)
		if err != nil {
			b.Fatal(err)
		}
		x, cancel := context.WithTimeout(ctx, 5*time.Minute)
		s := cl.EventStream(x, norsk.EventStreamSettings{AfterIndex: res.GetIndex()})
		got := 0
		for got < len(refs) && s.Next() {
			if p := s.Event().GetImagesPrefetched(); p != nil && p.GetRequestId() == res.GetRequestId() {
				for _, r := range p.GetResults() {
					if r.GetOutcome() != norsk.ImagePrefetchPulled {
						b.Fatalf("%s: %v", r.GetRef(), r)
					}
					got++
				}
			}
		}
		s.Close()
		cancel()
		if got < len(refs) {
			b.Fatalf("%d of %d outcomes: %v", got, len(refs), s.Err())
		}
		total += time.Since(start)
	}
	b.StopTimer()
	forget(ctx, cli, refs...)
	per := total.Seconds() / float64(b.N)
	b.ReportMetric(float64(len(refs))/per, "refs/s")
	b.ReportMetric(float64(len(refs)*size)/(1<<20)/per, "MB/s")
}
