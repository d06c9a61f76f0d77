package tests

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/norsk-go/norsk-manager/internal/runtime/runtimetest"
	"github.com/norsk-go/norsk-manager/internal/testcluster"
	"github.com/norsk-go/norsk-manager/internal/worker"
	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

// A job walks its whole life: created, started (running, with ports),
// searched, updated (and a stale update refused), stopped with grace,
// started again under a new fencing token, completed, and refused a start
// once completed. History is newest first throughout.
func TestJobLifecycle(t *testing.T) {
	t.Parallel()
	c := testcluster.New(t, testcluster.Options{Workers: 1})
	cl, x := c.Client(), ctx(t)
	job := progJob(t, "news-1", runtimetest.Behaviour{Listen: 8080}, map[string]string{"channel": "news", "tier": "gold"})
	hash, err := cl.CreateJob(x, job)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.CreateJob(x, progJob(t, "sport-1", runtimetest.Behaviour{}, map[string]string{"channel": "sport"})); err != nil {
		t.Fatal(err)
	}
	token, err := cl.StartJob(x, "news-1", "primary", "worker-1", norsk.StartJobOptions{})
	if err != nil {
		t.Fatal(err)
	}
	in := c.WaitPhase("news-1", "primary", norsk.InstancePhaseRunning)
	if in.GetFencingToken() != token || in.GetNodeId() != "worker-1" {
		t.Fatalf("instance = %v, want token %d on worker-1", in, token)
	}
	url := firstURL(in)
	c.Eventually("the service to answer at "+url, func() bool { return reachable(url) })

	// Search: tags AND id.
	got, err := cl.JobSearch(x, norsk.JobSearchSettings{Filters: []*norsk.JobFilter{norsk.TagEq("channel", "news"), norsk.IdRegex("news-.*")}})
	if err != nil || len(got) != 1 || got[0].GetJob().GetJobId() != "news-1" {
		t.Fatalf("search = %v, %v", got, err)
	}
	got, err = cl.JobSearch(x, norsk.JobSearchSettings{Filters: []*norsk.JobFilter{norsk.TagExists("tier")}})
	if err != nil || len(got) != 1 {
		t.Fatalf("search tag exists = %d jobs, %v", len(got), err)
	}
	got, err = cl.JobSearch(x, norsk.JobSearchSettings{Filters: []*norsk.JobFilter{norsk.TagNeq("channel", "news")}})
	if err != nil || len(got) != 1 || got[0].GetJob().GetJobId() != "sport-1" {
		t.Fatalf("search tag neq = %v, %v", got, err)
	}

	// Optimistic concurrency.
	job.CurrentHash = hash
	job.Description = "news channel"
	newHash, err := cl.UpdateJob(x, job)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.UpdateJob(x, job); !errors.Is(err, norsk.ErrFailedPrecondition) {
		t.Fatalf("stale update: %v, want FAILED_PRECONDITION", err)
	}
	if newHash <= hash {
		t.Fatalf("hash did not move: %d -> %d", hash, newHash)
	}
	// The running instance is handed the new spec (without a restart).
	pid := pidOf(t, c, "worker-1", "news-1", "primary")
	c.WaitJob("news-1", "the instance to hold the new spec", func(jh *norsk.JobWithHistory) bool {
		return testcluster.Instance(jh, "primary").GetJobHash() == newHash
	})
	if got := pidOf(t, c, "worker-1", "news-1", "primary"); got != pid {
		t.Fatalf("an update restarted the running service (pid %d -> %d)", pid, got)
	}

	if err := cl.StopJob(x, "news-1", "primary", "worker-1", norsk.StopJobOptions{Grace: 2 * time.Second}); err != nil {
		t.Fatal(err)
	}
	c.WaitPhase("news-1", "primary", norsk.InstancePhaseStopped)
	token2, err := cl.StartJob(x, "news-1", "primary", "worker-1", norsk.StartJobOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if token2 <= token {
		t.Fatalf("new binding's token %d is not above %d", token2, token)
	}
	c.WaitPhase("news-1", "primary", norsk.InstancePhaseRunning)
	if err := cl.CompleteJob(x, "news-1"); err != nil {
		t.Fatal(err)
	}
	jh := c.WaitJob("news-1", "stopped after complete", func(jh *norsk.JobWithHistory) bool {
		in := testcluster.Instance(jh, "primary")
		return in.GetPhase() == norsk.InstancePhaseStopped
	})
	if jh.GetJob().GetState() != norsk.JobStatePost {
		t.Errorf("state after complete = %v, want post", jh.GetJob().GetState())
	}
	if _, err := cl.StartJob(x, "news-1", "primary", "worker-1", norsk.StartJobOptions{}); !errors.Is(err, norsk.ErrFailedPrecondition) {
		t.Fatalf("start of a completed job: %v, want FAILED_PRECONDITION", err)
	}
	// CompleteJob records the stopping of the instance and the completion
	// in one write; the worker then reports the stop.
	want := []string{"stopped", "completed", "stopping", "running", "provisioned", "stopped", "stopping", "updated", "running", "provisioned", "created"}
	if kinds := historyKinds(jh); !slices.Equal(kinds, want) {
		t.Errorf("history = %v\nwant      %v", kinds, want)
	}
	for i := 1; i < len(jh.GetHistory()); i++ {
		if jh.GetHistory()[i-1].GetIndex() < jh.GetHistory()[i].GetIndex() {
			t.Errorf("history not newest first at %d", i)
		}
	}
}

// deferStart creates the containers without starting them; the instance is
// prepared until StartPreparedJob.
func TestDeferStartThenStartPrepared(t *testing.T) {
	t.Parallel()
	c := testcluster.New(t, testcluster.Options{Workers: 1})
	cl, x := c.Client(), ctx(t)
	if _, err := cl.CreateJob(x, progJob(t, "j", runtimetest.Behaviour{}, nil)); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.StartJob(x, "j", "primary", "worker-1", norsk.StartJobOptions{DeferStart: true}); err != nil {
		t.Fatal(err)
	}
	c.WaitPhase("j", "primary", norsk.InstancePhasePrepared)
	if pid := pidOf(t, c, "worker-1", "j", "primary"); pid != 0 {
		t.Fatalf("a prepared instance runs (pid %d)", pid)
	}
	if err := cl.StartPreparedJob(x, "j", "primary", "worker-1"); err != nil {
		t.Fatal(err)
	}
	c.WaitPhase("j", "primary", norsk.InstancePhaseRunning)
	kinds := historyKinds(c.Job("j"))
	if !slices.Equal(kinds, []string{"running", "prepared", "provisioned", "created"}) {
		t.Errorf("history = %v", kinds)
	}
}

// A worker restart adopts its running instance: same process, no new
// history entry.
func TestWorkerRestartAdoptsInstances(t *testing.T) {
	t.Parallel()
	c := testcluster.New(t, testcluster.Options{Workers: 1})
	cl, x := c.Client(), ctx(t)
	if _, err := cl.CreateJob(x, progJob(t, "j", runtimetest.Behaviour{}, nil)); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.StartJob(x, "j", "primary", "worker-1", norsk.StartJobOptions{}); err != nil {
		t.Fatal(err)
	}
	c.WaitPhase("j", "primary", norsk.InstancePhaseRunning)
	pid := pidOf(t, c, "worker-1", "j", "primary")
	before := len(c.Job("j").GetHistory())

	c.Worker("worker-1").Restart()
	c.Eventually("the worker to reconnect", func() bool { return c.Node("worker-1").GetConnected() })
	if got := pidOf(t, c, "worker-1", "j", "primary"); got != pid {
		t.Fatalf("pid after worker restart = %d, want %d (adopted, not restarted)", got, pid)
	}
	if in := testcluster.Instance(c.Job("j"), "primary"); in.GetPhase() != norsk.InstancePhaseRunning {
		t.Fatalf("instance after worker restart: %v", in)
	}
	if after := len(c.Job("j").GetHistory()); after != before {
		t.Errorf("history grew from %d to %d across a worker restart within the grace", before, after)
	}
}

// A Manager restart keeps jobs, history and running instances (adopted).
func TestManagerRestartKeepsJobsAndInstances(t *testing.T) {
	t.Parallel()
	c := testcluster.New(t, testcluster.Options{Workers: 1})
	cl, x := c.Client(), ctx(t)
	if _, err := cl.CreateJob(x, progJob(t, "j", runtimetest.Behaviour{}, nil)); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.StartJob(x, "j", "primary", "worker-1", norsk.StartJobOptions{}); err != nil {
		t.Fatal(err)
	}
	c.WaitPhase("j", "primary", norsk.InstancePhaseRunning)
	pid := pidOf(t, c, "worker-1", "j", "primary")
	hist := historyKinds(c.Job("j"))

	c.RestartManager()
	c.Eventually("the worker to be dialled again", func() bool { return c.Node("worker-1").GetConnected() })
	jh := c.Job("j")
	if !slices.Equal(historyKinds(jh), hist) {
		t.Errorf("history after restart = %v, want %v", historyKinds(jh), hist)
	}
	if in := testcluster.Instance(jh, "primary"); in.GetPhase() != norsk.InstancePhaseRunning {
		t.Fatalf("instance after manager restart: %v", in)
	}
	if got := pidOf(t, c, "worker-1", "j", "primary"); got != pid {
		t.Fatalf("pid after manager restart = %d, want %d", got, pid)
	}
}

// A worker gone longer than the grace makes its node lost and its instances
// stopping(nodeStopped); when it returns with the instance still running,
// the instance is adopted (running, adopted).
func TestNodeLostAndRecovered(t *testing.T) {
	t.Parallel()
	c := testcluster.New(t, testcluster.Options{Workers: 1, LostGrace: 500 * time.Millisecond})
	cl, x := c.Client(), ctx(t)
	if _, err := cl.CreateJob(x, progJob(t, "j", runtimetest.Behaviour{}, nil)); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.StartJob(x, "j", "primary", "worker-1", norsk.StartJobOptions{}); err != nil {
		t.Fatal(err)
	}
	c.WaitPhase("j", "primary", norsk.InstancePhaseRunning)
	pid := pidOf(t, c, "worker-1", "j", "primary")
	if err := c.Worker("worker-1").Stop(); err != nil {
		t.Fatal(err)
	}
	c.WaitNodeState("worker-1", norsk.NodeStateLost)
	jh := c.Job("j")
	top := jh.GetHistory()[0].GetStopping()
	if top == nil || top.GetReason() != norsk.StoppingReasonNodeStopped {
		t.Fatalf("newest history entry after node loss = %v, want stopping(nodeStopped)", jh.GetHistory()[0])
	}
	if _, err := cl.StartJob(x, "j", "primary", "worker-1", norsk.StartJobOptions{}); !errors.Is(err, norsk.ErrFailedPrecondition) {
		t.Fatalf("start on a lost node: %v, want FAILED_PRECONDITION", err)
	}
	c.Worker("worker-1").Start()
	c.WaitNodeState("worker-1", norsk.NodeStateOnline)
	c.WaitPhase("j", "primary", norsk.InstancePhaseRunning) // adopted
	if got := pidOf(t, c, "worker-1", "j", "primary"); got != pid {
		t.Fatalf("pid after recovery = %d, want %d", got, pid)
	}
	r := c.Job("j").GetHistory()[0].GetRunning()
	if r == nil || !r.GetAdopted() {
		t.Fatalf("newest entry after recovery = %v, want running(adopted)", c.Job("j").GetHistory()[0])
	}
}

// Fencing: the instance of a partitioned node is superseded by a new
// binding elsewhere, and when the old node comes back the Manager stops its
// copy — the job never runs twice.
func TestFencingStopsSupersededInstance(t *testing.T) {
	t.Parallel()
	c := testcluster.New(t, testcluster.Options{Workers: 2, LostGrace: 500 * time.Millisecond})
	cl, x := c.Client(), ctx(t)
	if _, err := cl.CreateJob(x, progJob(t, "j", runtimetest.Behaviour{}, nil)); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.StartJob(x, "j", "primary", "worker-1", norsk.StartJobOptions{}); err != nil {
		t.Fatal(err)
	}
	c.WaitPhase("j", "primary", norsk.InstancePhaseRunning)
	if err := c.Worker("worker-1").Stop(); err != nil { // partitioned: its process keeps running
		t.Fatal(err)
	}
	c.WaitNodeState("worker-1", norsk.NodeStateLost)
	if pidOf(t, c, "worker-1", "j", "primary") == 0 {
		t.Fatal("the partitioned copy should still run")
	}
	token2, err := cl.StartJob(x, "j", "primary", "worker-2", norsk.StartJobOptions{})
	if err != nil {
		t.Fatalf("rebind to worker-2 while worker-1 is lost: %v", err)
	}
	in := c.WaitPhase("j", "primary", norsk.InstancePhaseRunning)
	if in.GetNodeId() != "worker-2" || in.GetFencingToken() != token2 {
		t.Fatalf("instance = %v", in)
	}
	c.Worker("worker-1").Start()
	c.WaitNodeState("worker-1", norsk.NodeStateOnline)
	c.Eventually("the superseded copy on worker-1 to be stopped", func() bool {
		return pidOf(t, c, "worker-1", "j", "primary") == 0
	})
	if pidOf(t, c, "worker-2", "j", "primary") == 0 {
		t.Fatal("the current copy on worker-2 stopped")
	}
	if in := testcluster.Instance(c.Job("j"), "primary"); in.GetNodeId() != "worker-2" || in.GetPhase() != norsk.InstancePhaseRunning {
		t.Fatalf("instance after the old node came back: %v", in)
	}
}

// A service that keeps failing exhausts its restart policy; the instance
// fails with the exit code in the reason.
func TestRestartPolicyExhaustedFailsInstance(t *testing.T) {
	t.Parallel()
	c := testcluster.New(t, testcluster.Options{Workers: 1})
	cl, x := c.Client(), ctx(t)
	job := progJob(t, "crashy", runtimetest.Behaviour{ExitCode: 3, Run: 10 * time.Millisecond}, nil)
	job.Services[0].Restart = &norsk.RestartPolicy{Mode: norsk.RestartModeOnFailure, Count: 1, PeriodS: 60}
	if _, err := cl.CreateJob(x, job); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.StartJob(x, "crashy", "primary", "worker-1", norsk.StartJobOptions{}); err != nil {
		t.Fatal(err)
	}
	in := c.WaitPhase("crashy", "primary", norsk.InstancePhaseStopped)
	if in.GetStopReason() != norsk.StoppingReasonJobFailed {
		t.Fatalf("stop reason = %v, want jobFailed (%s)", in.GetStopReason(), in.GetStopAdditionalReason())
	}
	jh := c.Job("crashy")
	var stopping *norsk.InstanceStopping
	for _, e := range jh.GetHistory() {
		if s := e.GetStopping(); s != nil {
			stopping = s
			break
		}
	}
	if stopping == nil || !strings.Contains(stopping.GetAdditionalReason(), "code 3") {
		t.Fatalf("stopping entry = %v, want the exit code in its reason", stopping)
	}
}

// Deleting a job stops its instances.
func TestDeleteJobStopsInstances(t *testing.T) {
	t.Parallel()
	c := testcluster.New(t, testcluster.Options{Workers: 1})
	cl, x := c.Client(), ctx(t)
	if _, err := cl.CreateJob(x, progJob(t, "j", runtimetest.Behaviour{}, nil)); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.StartJob(x, "j", "primary", "worker-1", norsk.StartJobOptions{}); err != nil {
		t.Fatal(err)
	}
	c.WaitPhase("j", "primary", norsk.InstancePhaseRunning)
	if err := cl.DeleteJob(x, "j"); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.JobById(x, "j"); !errors.Is(err, norsk.ErrNotFound) {
		t.Fatalf("deleted job: %v", err)
	}
	c.Eventually("the deleted job's process to stop", func() bool { return pidOf(t, c, "worker-1", "j", "primary") == 0 })
	c.Eventually("the node to hold no instance", func() bool { return len(c.Node("worker-1").GetInstances()) == 0 })
}

// Deregistering a slot stops its jobs, closes the worker's stream and voids
// its token; the worker stops.
func TestDeregisterClusterNode(t *testing.T) {
	t.Parallel()
	c := testcluster.New(t, testcluster.Options{Workers: 1})
	cl, x := c.Client(), ctx(t)
	if _, err := cl.CreateJob(x, progJob(t, "j", runtimetest.Behaviour{}, nil)); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.StartJob(x, "j", "primary", "worker-1", norsk.StartJobOptions{}); err != nil {
		t.Fatal(err)
	}
	c.WaitPhase("j", "primary", norsk.InstancePhaseRunning)
	if err := cl.DeregisterClusterNode(x, "worker-1"); err != nil {
		t.Fatal(err)
	}
	in := c.WaitPhase("j", "primary", norsk.InstancePhaseStopped)
	if in.GetStopReason() != norsk.StoppingReasonNodeTerminated {
		t.Errorf("stop reason = %v, want nodeTerminated", in.GetStopReason())
	}
	err, ok := c.Worker("worker-1").Exited(30 * time.Second)
	if !ok {
		t.Fatal("worker still running 30s after deregistration")
	}
	if !errors.Is(err, worker.ErrDeregistered) {
		t.Fatalf("worker ended with %v, want ErrDeregistered", err)
	}
	// The slot goes once the Manager has recorded the worker's end, which
	// may come after the worker has heard of it.
	c.Eventually("the slot to be gone", func() bool {
		slots, err := cl.ListClusterNodes(x)
		return err == nil && len(slots) == 0
	})
	if pidOf(t, c, "worker-1", "j", "primary") != 0 {
		t.Fatal("the deregistered node's process still runs")
	}
}

// TerminateNode stops every instance on the node and ends its worker.
func TestTerminateNode(t *testing.T) {
	t.Parallel()
	c := testcluster.New(t, testcluster.Options{Workers: 1})
	cl, x := c.Client(), ctx(t)
	if _, err := cl.CreateJob(x, progJob(t, "j", runtimetest.Behaviour{}, nil)); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.StartJob(x, "j", "primary", "worker-1", norsk.StartJobOptions{}); err != nil {
		t.Fatal(err)
	}
	c.WaitPhase("j", "primary", norsk.InstancePhaseRunning)
	if err := cl.TerminateNode(x, "worker-1"); err != nil {
		t.Fatal(err)
	}
	c.WaitNodeState("worker-1", norsk.NodeStateTerminated)
	in := c.WaitPhase("j", "primary", norsk.InstancePhaseStopped)
	if in.GetStopReason() != norsk.StoppingReasonNodeTerminated {
		t.Errorf("stop reason = %v", in.GetStopReason())
	}
	err, ok := c.Worker("worker-1").Exited(30 * time.Second)
	if !ok {
		t.Fatal("worker still running 30s after termination")
	}
	if !errors.Is(err, worker.ErrTerminated) {
		t.Fatalf("worker ended with %v, want ErrTerminated", err)
	}
}

// Changing a slot's pool cycles the node's lifecycle events while its
// instance keeps running.
func TestSetClusterNodePoolKeepsInstance(t *testing.T) {
	t.Parallel()
	c := testcluster.New(t, testcluster.Options{Workers: 1})
	cl, x := c.Client(), ctx(t)
	if _, err := cl.CreateJob(x, progJob(t, "j", runtimetest.Behaviour{}, nil)); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.StartJob(x, "j", "primary", "worker-1", norsk.StartJobOptions{}); err != nil {
		t.Fatal(err)
	}
	c.WaitPhase("j", "primary", norsk.InstancePhaseRunning)
	pid := pidOf(t, c, "worker-1", "j", "primary")
	stream := cl.EventStream(x, norsk.EventStreamSettings{})
	defer stream.Close()
	for stream.Next() && stream.Event().GetInitialDataComplete() == nil {
	}
	if err := cl.SetClusterNodePool(x, "worker-1", "gold"); err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for len(kinds) < 4 && stream.Next() {
		switch {
		case stream.Event().GetNodeStopping() != nil:
			kinds = append(kinds, "stopping")
		case stream.Event().GetNodeTerminated() != nil:
			kinds = append(kinds, "terminated")
		case stream.Event().GetNodeOnline() != nil:
			kinds = append(kinds, "online")
		case stream.Event().GetNodeTagsUpdated() != nil:
			kinds = append(kinds, "tags")
			if p := stream.Event().GetNodeTagsUpdated().GetNode().GetTags()["pool"]; p != "gold" {
				t.Errorf("pool tag in the event = %q", p)
			}
		}
	}
	if !slices.Equal(kinds, []string{"stopping", "terminated", "online", "tags"}) {
		t.Errorf("events = %v (stream err %v)", kinds, stream.Err())
	}
	if got := pidOf(t, c, "worker-1", "j", "primary"); got != pid {
		t.Fatalf("pid after pool change = %d, want %d", got, pid)
	}
	if n := c.Node("worker-1"); n.GetState() != norsk.NodeStateOnline || n.GetTags()["pool"] != "gold" {
		t.Fatalf("node after pool change: %v", n)
	}
}

// Tags merge and persist; idle expiry override and effective value.
func TestNodeTagsAndIdleExpiry(t *testing.T) {
	t.Parallel()
	c := testcluster.New(t, testcluster.Options{Workers: 1})
	cl, x := c.Client(), ctx(t)
	if _, err := cl.SetNodeTags(x, "worker-1", map[string]string{"rack": "r1", "zone": "a"}); err != nil {
		t.Fatal(err)
	}
	n, err := cl.SetNodeTags(x, "worker-1", map[string]string{"zone": "b"})
	if err != nil {
		t.Fatal(err)
	}
	if n.GetTags()["rack"] != "r1" || n.GetTags()["zone"] != "b" {
		t.Fatalf("tags after merge = %v", n.GetTags())
	}
	ie, err := cl.SetNodeIdleExpiry(x, "worker-1", 90*time.Second)
	if err != nil || ie.GetIdleExpiryMs() != 90000 || ie.GetEffectiveIdleExpiryMs() != 90000 {
		t.Fatalf("set idle expiry = %v, %v", ie, err)
	}
	c.RestartManager()
	ie, err = c.Client().GetNodeIdleExpiry(x, "worker-1")
	if err != nil || ie.GetIdleExpiryMs() != 90000 {
		t.Fatalf("idle expiry after restart = %v, %v", ie, err)
	}
	if n := c.Node("worker-1"); n.GetTags()["rack"] != "r1" {
		t.Fatalf("tags after restart = %v", n.GetTags())
	}
	ie, err = c.Client().SetNodeIdleExpiry(x, "worker-1", 0)
	if err != nil || ie.GetIdleExpiryMs() != 0 || ie.GetEffectiveIdleExpiryMs() != (10*time.Minute).Milliseconds() {
		t.Fatalf("cleared idle expiry = %v, %v", ie, err)
	}
	if _, err := c.Client().SetNodeTags(x, "nope", map[string]string{"a": "b"}); !errors.Is(err, norsk.ErrNotFound) {
		t.Fatalf("tags on an unknown node: %v", err)
	}
}

// A worker cannot register without a valid token: a reused one, a forged
// one and one of a deregistered slot are all refused, whether presented in
// the request or as the call's bearer.
func TestRegistrationTokens(t *testing.T) {
	t.Parallel()
	c := testcluster.New(t, testcluster.Options{Workers: 1})
	cl, x := c.Client(), ctx(t)
	slots, err := cl.ListClusterNodes(x)
	if err != nil || len(slots) != 1 || !slots[0].GetTokenUsed() {
		t.Fatalf("slots = %v, %v", slots, err)
	}
	spare, err := cl.RegisterClusterNode(x, "spare", "")
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.DeregisterClusterNode(x, "spare"); err != nil {
		t.Fatal(err)
	}
	for name, token := range map[string]string{
		"reused":       slots[0].GetToken(),
		"forged":       "nrt_" + strings.Repeat("ab", 24),
		"deregistered": spare.GetToken(),
	} {
		req := &norsk.ClusterMemberRegisterRequest{Token: token, Address: "127.0.0.1:9"}
		if _, err := cl.ClusterMemberRegister(x, req); !errors.Is(err, norsk.ErrUnauthenticated) {
			t.Errorf("%s token in the request: %v, want UNAUTHENTICATED", name, err)
		}
		// The same token as the call's only credential (what a worker does).
		w, err := norsk.Connect(x, norsk.Settings{URL: c.URL(), Token: token})
		if err == nil {
			_, err = w.ClusterMemberRegister(x, req)
			_ = w.Close()
		}
		if !errors.Is(err, norsk.ErrUnauthenticated) {
			t.Errorf("%s token as the bearer: %v, want UNAUTHENTICATED", name, err)
		}
	}
}
