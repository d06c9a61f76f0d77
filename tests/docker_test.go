package tests

import (
	"errors"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"

	"github.com/norsk-go/norsk-manager/examples/jobs"
	"github.com/norsk-go/norsk-manager/examples/sample-media/frames"
	"github.com/norsk-go/norsk-manager/internal/runtime"
	"github.com/norsk-go/norsk-manager/internal/runtime/docker"
	"github.com/norsk-go/norsk-manager/internal/runtime/runtimetest"
	"github.com/norsk-go/norsk-manager/internal/testcluster"
	"github.com/norsk-go/norsk-manager/internal/testimage"
	"github.com/norsk-go/norsk-manager/sdk/norsk"
	"google.golang.org/protobuf/proto"
)

// A job with a port runs as a container: named and labelled as the docker
// runtime promises, its published port (the one the Manager reports) answers;
// a stop removes the container and the history tells the story.
func TestDockerJobRunsWithPortAndStops(t *testing.T) {
	t.Parallel()
	d := newDockerCluster(t, testcluster.Options{})
	cl, x := d.Client(), ctx(t)
	const id = "dk-port"
	if _, err := cl.CreateJob(x, imageJob(id, runtimetest.Behaviour{Listen: 8080})); err != nil {
		t.Fatal(err)
	}
	token, err := cl.StartJob(x, id, "primary", d.worker, norsk.StartJobOptions{})
	if err != nil {
		t.Fatal(err)
	}
	in := d.WaitPhase(id, "primary", norsk.InstancePhaseRunning)
	if in.GetNodeId() != d.worker || in.GetFencingToken() != token {
		t.Fatalf("instance = %v, want token %d on %s", in, token, d.worker)
	}

	info := d.onlyContainer(t, d.worker, id)
	if want := "/" + docker.ContainerName(d.ClusterID(), d.worker, runtime.Key{JobID: id, Role: "primary"}, "main"); info.Name != want {
		t.Errorf("container name = %q, want %q", info.Name, want)
	}
	wantLabels := map[string]string{
		runtime.LabelNode:    d.worker,
		runtime.LabelJob:     id,
		runtime.LabelRole:    "primary",
		runtime.LabelService: "main",
		runtime.LabelToken:   strconv.FormatUint(token, 10),
		runtime.LabelCluster: d.ClusterID(),
	}
	if d.ClusterID() == "" {
		t.Error("the Manager's store has no cluster id")
	}
	for k, v := range wantLabels {
		if got := info.Config.Labels[k]; got != v {
			t.Errorf("label %s = %q, want %q", k, got, v)
		}
	}
	if info.Config.Image != testProgImage || !info.State.Running {
		t.Errorf("container image %q running %v, want %s running", info.Config.Image, info.State.Running, testProgImage)
	}

	// The port published on every IPv4 address is reported at the worker's
	// address, and answers there.
	var v4 string
	for _, b := range info.NetworkSettings.Ports["8080/tcp"] {
		if b.HostIP == "0.0.0.0" {
			v4 = b.HostPort
		}
	}
	url := "127.0.0.1:" + v4
	if v4 == "" || !slices.Equal(portURLs(in), []string{url}) {
		t.Fatalf("the engine publishes 8080/tcp at %v, the Manager reports %v", info.NetworkSettings.Ports["8080/tcp"], portURLs(in))
	}
	d.Eventually("the container's service to answer at "+url, func() bool { return answers(url) })

	if err := cl.StopJob(x, id, "primary", d.worker, norsk.StopJobOptions{Grace: 2 * time.Second}); err != nil {
		t.Fatal(err)
	}
	in = d.WaitPhase(id, "primary", norsk.InstancePhaseStopped)
	if in.GetStopReason() != norsk.StoppingReasonUserRequested {
		t.Errorf("stop reason = %v, want userRequested", in.GetStopReason())
	}
	d.Eventually("the container to be removed", func() bool { return len(d.containers(t, d.worker, id)) == 0 })
	if answers(url) {
		t.Errorf("%s still answers after the stop", url)
	}

	jh := d.Job(id)
	if kinds := historyKinds(jh); !slices.Equal(kinds, []string{"stopped", "stopping", "running", "provisioned", "created"}) {
		t.Fatalf("history = %v", kinds)
	}
	h := jh.GetHistory()
	run := h[2].GetRunning()
	if run.GetInstance().GetNodeId() != d.worker || run.GetInstance().GetFencingToken() != token || run.GetAdopted() {
		t.Errorf("running entry = %v", run)
	}
	if got := run.GetServicePortMappings()["main"].GetMappings(); len(got) != 1 || got[0].GetUrl() != url || got[0].GetTarget() != 8080 {
		t.Errorf("running entry's ports = %v, want %s for 8080", got, url)
	}
	if s := h[1].GetStopping(); s.GetReason() != norsk.StoppingReasonUserRequested || s.GetInstance().GetFencingToken() != token {
		t.Errorf("stopping entry = %v", s)
	}
	if p := h[3].GetProvisioned(); p.GetInstance().GetNodeId() != d.worker || p.GetInstance().GetFencingToken() != token {
		t.Errorf("provisioned entry = %v", p)
	}
	if st := h[0].GetStopped(); st.GetInstance().GetNodeId() != d.worker || st.GetInstance().GetFencingToken() != token {
		t.Errorf("stopped entry = %v", st)
	}
	for i := 1; i < len(h); i++ {
		if h[i-1].GetIndex() < h[i].GetIndex() {
			t.Errorf("history not newest first at %d", i)
		}
	}
}

// A worker restart adopts its container: same container, same start time,
// no new history entry while the worker was away (within the grace).
func TestDockerWorkerRestartAdoptsContainer(t *testing.T) {
	t.Parallel()
	d := newDockerCluster(t, testcluster.Options{})
	cl, x := d.Client(), ctx(t)
	const id = "dk-adopt"
	if _, err := cl.CreateJob(x, imageJob(id, runtimetest.Behaviour{Listen: 8080})); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.StartJob(x, id, "primary", d.worker, norsk.StartJobOptions{}); err != nil {
		t.Fatal(err)
	}
	url := d.waitAnswer(d.WaitPhase(id, "primary", norsk.InstancePhaseRunning))
	before := d.onlyContainer(t, d.worker, id)
	hist := d.Job(id).GetHistory()

	d.Worker(d.worker).Restart()
	d.Eventually("the worker to reconnect", func() bool { return d.Node(d.worker).GetConnected() })
	// Give the reconnected worker's report time to land: nothing may change.
	consistently(t, time.Second, "the history", func() bool { return len(d.Job(id).GetHistory()) == len(hist) })

	after := d.onlyContainer(t, d.worker, id)
	if after.ID != before.ID || after.State.StartedAt != before.State.StartedAt || !after.State.Running {
		t.Fatalf("container after the worker restart: id %s started %s running %v; before: id %s started %s",
			after.ID, after.State.StartedAt, after.State.Running, before.ID, before.State.StartedAt)
	}
	jh := d.Job(id)
	if in := testcluster.Instance(jh, "primary"); in.GetPhase() != norsk.InstancePhaseRunning || !slices.Contains(portURLs(in), url) {
		t.Fatalf("instance after the worker restart: %v", in)
	}
	if h := jh.GetHistory(); h[0].GetIndex() != hist[0].GetIndex() {
		t.Errorf("newest entry after the worker restart = %v, was %v", h[0], hist[0])
	}
	if !answers(url) {
		t.Errorf("%s does not answer after the worker restart", url)
	}
}

// A Manager killed and started again (in process, on its data) finds the
// container still running and adopts it; the history is kept.
func TestDockerManagerRestartAdoptsContainer(t *testing.T) {
	t.Parallel()
	d := newDockerCluster(t, testcluster.Options{})
	cl, x := d.Client(), ctx(t)
	const id = "dk-mgr"
	if _, err := cl.CreateJob(x, imageJob(id, runtimetest.Behaviour{Listen: 8080})); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.StartJob(x, id, "primary", d.worker, norsk.StartJobOptions{}); err != nil {
		t.Fatal(err)
	}
	url := d.waitAnswer(d.WaitPhase(id, "primary", norsk.InstancePhaseRunning))
	before := d.onlyContainer(t, d.worker, id)
	hist := d.Job(id).GetHistory()

	d.StopManager()
	if during := d.onlyContainer(t, d.worker, id); !during.State.Running || during.ID != before.ID {
		t.Fatalf("container while the Manager is down: %+v", during.State)
	}
	if !answers(url) {
		t.Errorf("%s does not answer while the Manager is down", url)
	}
	d.StartManager()
	d.Eventually("the worker to be dialled again", func() bool { return d.Node(d.worker).GetConnected() })
	in := d.WaitPhase(id, "primary", norsk.InstancePhaseRunning)
	if !slices.Contains(portURLs(in), url) {
		t.Errorf("instance's ports after the Manager restart = %v, want %s among them", portURLs(in), url)
	}

	after := d.onlyContainer(t, d.worker, id)
	if after.ID != before.ID || after.State.StartedAt != before.State.StartedAt || !after.State.Running {
		t.Fatalf("container after the Manager restart: id %s started %s running %v; before: id %s started %s",
			after.ID, after.State.StartedAt, after.State.Running, before.ID, before.State.StartedAt)
	}
	// The history is kept as it was: the adopted container needs no new
	// entry.
	jh := d.Job(id)
	if !slices.EqualFunc(jh.GetHistory(), hist, func(a, b *norsk.JobHistoryEntry) bool { return proto.Equal(a, b) }) {
		t.Errorf("history after the Manager restart = %v\nbefore: %v", jh.GetHistory(), hist)
	}
}

// A service whose image is not on the node and whose pull policy is never
// fails the instance at once (stopping(jobFailed), then stopped) with a
// reason naming the image; the worker does not pull. (Pulls from a
// registry: warm_test.go.)
func TestDockerMissingImageFailsWithoutPull(t *testing.T) {
	t.Parallel()
	d := newDockerCluster(t, testcluster.Options{})
	cl, x := d.Client(), ctx(t)
	const image = "norsk-missing:never"
	imageAbsent := func() bool {
		_, err := d.cli.ImageInspect(x, image)
		if err != nil && !cerrdefs.IsNotFound(err) {
			t.Fatalf("inspect %s: %v", image, err)
		}
		return err != nil
	}
	if !imageAbsent() {
		t.Fatalf("image %s exists on the engine; remove it (docker rmi %s) to run this test", image, image)
	}
	const id = "dk-missing"
	job := &norsk.Job{JobId: id, Services: []*norsk.Service{{Name: "main", Image: image, PullPolicy: norsk.PullPolicyNever}}}
	if _, err := cl.CreateJob(x, job); err != nil {
		t.Fatal(err)
	}
	token, err := cl.StartJob(x, id, "primary", d.worker, norsk.StartJobOptions{})
	if err != nil && !errors.Is(err, norsk.ErrFailedPrecondition) {
		t.Fatalf("start with a missing image: %v, want success (the failure shows in the history) or FAILED_PRECONDITION", err)
	}
	in := d.WaitPhase(id, "primary", norsk.InstancePhaseStopped)
	if in.GetStopReason() != norsk.StoppingReasonJobFailed || !strings.Contains(in.GetStopAdditionalReason(), image) {
		t.Errorf("stopped instance: reason %v (%q), want jobFailed naming %s", in.GetStopReason(), in.GetStopAdditionalReason(), image)
	}
	jh := d.Job(id)
	if kinds := historyKinds(jh); !slices.Equal(kinds, []string{"stopped", "stopping", "provisioned", "created"}) {
		t.Errorf("history = %v, want stopped, stopping, provisioned, created", kinds)
	}
	s := stoppingEntry(jh)
	if s.GetReason() != norsk.StoppingReasonJobFailed || !strings.Contains(s.GetAdditionalReason(), image) {
		t.Errorf("stopping entry = %v, want jobFailed with a reason naming %s", s, image)
	}
	if err == nil && s.GetInstance().GetFencingToken() != token {
		t.Errorf("stopping entry's token = %d, want %d", s.GetInstance().GetFencingToken(), token)
	}
	if !imageAbsent() {
		t.Errorf("image %s exists after the start: the worker pulled it", image)
	}
	if cs := d.containers(t, d.worker, id); len(cs) != 0 {
		t.Errorf("containers of the failed job: %v", cs)
	}
}

// The hello example, its image built from examples/hello and its job from
// examples/jobs/hello.yaml, answers GET / naming the job.
func TestDockerHelloExample(t *testing.T) {
	t.Parallel()
	const tag = "norsk-examples/hello:test"
	testimage.EnsureImage(t, tag, "github.com/norsk-go/norsk-manager/examples/hello")
	d := newDockerCluster(t, testcluster.Options{})
	cl, x := d.Client(), ctx(t)
	job, err := jobs.Load("hello")
	if err != nil {
		t.Fatal(err)
	}
	if len(job.GetServices()) != 1 {
		t.Fatalf("hello.yaml has %d services, want 1", len(job.GetServices()))
	}
	job.Services[0].Image = tag
	id := job.GetJobId()
	if _, err := cl.CreateJob(x, job); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.StartJob(x, id, "primary", d.worker, norsk.StartJobOptions{}); err != nil {
		t.Fatal(err)
	}
	in := d.WaitPhase(id, "primary", norsk.InstancePhaseRunning)
	if len(portURLs(in)) == 0 {
		t.Fatal("the hello instance has no resolved port")
	}
	hc := &http.Client{Timeout: 2 * time.Second}
	var body string
	d.Eventually("GET / to answer at one of "+strings.Join(portURLs(in), ", "), func() bool {
		for _, url := range portURLs(in) {
			resp, err := hc.Get("http://" + url + "/")
			if err != nil {
				continue
			}
			b, err := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if err == nil && resp.StatusCode == http.StatusOK {
				body = string(b)
				return true
			}
		}
		return false
	})
	want := "hello from job " + id + " role primary (runtime role primary) on node " + d.worker + "\n"
	if body != want {
		t.Errorf("GET / = %q, want %q", body, want)
	}
}

// The sample media example, its image built from examples/sample-media,
// sends frames at 200 frames/s to a UDP listener of the test (reached from
// the container at the bridge network's gateway); what arrives in about a
// second is one continuous run: no gap, no duplicate.
func TestDockerSampleMediaFrames(t *testing.T) {
	t.Parallel()
	const tag = "norsk-examples/sample-media:test"
	testimage.EnsureImage(t, tag, "github.com/norsk-go/norsk-manager/examples/sample-media")
	d := newDockerCluster(t, testcluster.Options{})
	cl, x := d.Client(), ctx(t)

	pc, err := net.ListenPacket("udp4", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pc.Close() })
	if uc, ok := pc.(*net.UDPConn); ok {
		_ = uc.SetReadBuffer(4 << 20)
	}
	port := pc.LocalAddr().(*net.UDPAddr).Port
	sink := "udp://" + net.JoinHostPort(bridgeGateway(t, d.cli), strconv.Itoa(port))

	job, err := jobs.Load("sample-media")
	if err != nil {
		t.Fatal(err)
	}
	job.JobId = "dk-media"
	job.Services[0].Image = tag
	job.Services[0].Env["SINK"] = sink
	job.Services[0].Env["FRAME_RATE"] = "200"
	if _, err := cl.CreateJob(x, job); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.StartJob(x, job.JobId, "primary", d.worker, norsk.StartJobOptions{}); err != nil {
		t.Fatal(err)
	}
	d.WaitPhase(job.JobId, "primary", norsk.InstancePhaseRunning)

	var chk frames.Checker
	buf := make([]byte, frames.MaxRecordLen)
	var first time.Time
	var payload string
	_ = pc.SetReadDeadline(time.Now().Add(testcluster.WaitTimeout))
	for first.IsZero() || time.Since(first) < time.Second {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			t.Fatalf("receiving frames at %s: %v (after %s)", sink, err, chk.Report())
		}
		f, err := frames.Decode(buf[:n])
		if err != nil {
			t.Fatalf("datagram from %s: %v", from, err)
		}
		now := time.Now()
		if first.IsZero() {
			first = now
			payload = string(f.Payload)
			_ = pc.SetReadDeadline(now.Add(10 * time.Second))
		}
		chk.Add(f, now)
	}
	rep := chk.Report()
	if !rep.Continuous() || rep.OutOfOrder != 0 {
		t.Errorf("frames over a second: %s, want one continuous run", rep)
	}
	if rep.Unique < 100 {
		t.Errorf("only %d frames in a second at 200 frames/s: %s", rep.Unique, rep)
	}
	if len(rep.Streams) != 1 || rep.Streams[job.JobId] == 0 {
		t.Errorf("streams = %v, want only %q", rep.Streams, job.JobId)
	}
	if !strings.Contains(payload, "node="+d.worker+" role=primary") {
		t.Errorf("frame payload = %q, want the node and runtime role", payload)
	}
	t.Logf("received %s", rep)

	if err := cl.StopJob(x, job.JobId, "primary", d.worker, norsk.StopJobOptions{Grace: 5 * time.Second}); err != nil {
		t.Fatal(err)
	}
	d.WaitPhase(job.JobId, "primary", norsk.InstancePhaseStopped)
	d.Eventually("the container to be removed", func() bool { return len(d.containers(t, d.worker, job.JobId)) == 0 })
}

// Every port URL the Manager reports for an instance answers, and a
// container port published on every address is reported once: Docker 20.10
// binds an ephemeral port for IPv4 and for IPv6 with different host ports,
// and the IPv6 listener (v6-only) is not reachable at the worker's IPv4
// address.
func TestDockerEveryResolvedPortAnswers(t *testing.T) {
	t.Parallel()
	d := newDockerCluster(t, testcluster.Options{})
	cl, x := d.Client(), ctx(t)
	const id = "dk-ports"
	if _, err := cl.CreateJob(x, imageJob(id, runtimetest.Behaviour{Listen: 8080})); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.StartJob(x, id, "primary", d.worker, norsk.StartJobOptions{}); err != nil {
		t.Fatal(err)
	}
	in := d.WaitPhase(id, "primary", norsk.InstancePhaseRunning)
	d.waitAnswer(in)
	urls := portURLs(in)
	if len(urls) != 1 {
		t.Errorf("resolved ports of one container port: %v, want one", urls)
	}
	for _, u := range urls {
		if !answers(u) {
			t.Errorf("reported port %s does not answer (engine bindings: %v)", u, d.onlyContainer(t, d.worker, id).NetworkSettings.Ports)
		}
	}
}
