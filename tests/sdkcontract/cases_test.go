package sdkcontract

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

// testCase is one behaviour of the SDK, checked on a runner.
type testCase struct {
	name string
	// serial cases touch something every case shares (the lease pause):
	// they run before the parallel ones.
	serial bool
	run    func(t *testing.T, e *env)
}

var cases = []testCase{
	{name: "jobs/create-read-update-delete", run: jobLifecycle},
	{name: "jobs/start-stop", run: jobStartStop},
	{name: "jobs/defer-start", run: jobDeferStart},
	{name: "jobs/stop-twice-and-start-again", run: jobStopTwice},
	{name: "jobs/fail-a-running-job", run: jobFailRunning},
	{name: "jobs/complete-a-running-job", run: jobCompleteRunning},
	{name: "jobs/complete-and-fail", run: jobTerminal},
	{name: "jobs/search", run: jobSearch},
	{name: "jobs/start-many", run: jobStartMany},
	{name: "jobs/start-on-a-node-not-online", run: jobStartOffline},
	{name: "errors/invalid-argument", run: invalidArguments},
	{name: "errors/not-found", run: notFound},
	{name: "nodes", run: nodes},
	{name: "slots", run: slots},
	{name: "slots/terminate-registered", run: terminateRegistered},
	{name: "kv", run: kv},
	{name: "leases", serial: true, run: leases},
	{name: "bundles", run: bundles},
	{name: "bundles/stop-time-and-clashes", run: bundleStopTime},
	{name: "events", run: events},
	{name: "events/live-only", run: eventsLiveOnly},
	{name: "events/snapshot", run: eventsSnapshot},
	{name: "cluster-status", run: clusterStatus},
	{name: "events/node-tags", run: eventsNodeTags},
	{name: "events/slot-life", run: eventsSlotLife},
	{name: "events/job-life", run: eventsJobLife},
	{name: "store-info", run: storeInfo},
	{name: "snapshot", run: snapshot},
	{name: "discovery", serial: true, run: discovery},
	{name: "tokens", run: tokens},
	{name: "tokens/roles", run: tokenRoles},
	{name: "audit", run: audit},
	{name: "version", run: version},
}

// must fails the test on err.
func must(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// wantCode checks that err is the SDK error of code want, its message naming
// every one of names.
func wantCode(t *testing.T, what string, err, want error, names ...string) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Errorf("%s = %v; want %v", what, err, want)
		return
	}
	for _, n := range names {
		if !strings.Contains(err.Error(), n) {
			t.Errorf("%s = %v; the message does not name %q", what, err, n)
		}
	}
}

// kinds lists a job's history, newest first, by event name.
func kinds(j *norsk.JobWithHistory) []string {
	var out []string
	for _, e := range j.GetHistory() {
		name := fmt.Sprintf("%T", e.GetEvent())
		name = strings.TrimPrefix(name, "*managerv1.JobHistoryEntry_")
		out = append(out, strings.ToLower(name))
	}
	return out
}

func jobLifecycle(t *testing.T, e *env) {
	c := ctx(t)
	job := e.job("life", map[string]string{"team": "live"})
	hash, err := e.m.CreateJob(c, job)
	must(t, "CreateJob", err)
	if hash <= 0 {
		t.Errorf("CreateJob hash = %d; want > 0", hash)
	}
	_, err = e.m.CreateJob(c, job)
	wantCode(t, "CreateJob of an existing id", err, norsk.ErrAlreadyExists, `"life"`)

	got, err := e.m.JobById(c, "life")
	must(t, "JobById", err)
	if got.GetJob().GetCurrentHash() != hash || got.GetJob().GetState() != norsk.JobStatePre || got.GetJob().GetTags()["team"] != "live" {
		t.Errorf("JobById = hash %d state %v tags %v; want hash %d, pre, team=live", got.GetJob().GetCurrentHash(), got.GetJob().GetState(), got.GetJob().GetTags(), hash)
	}
	if k := kinds(got); !slices.Equal(k, []string{"created"}) {
		t.Errorf("history = %v; want [created]", k)
	}

	upd := e.job("life", map[string]string{"team": "news"})
	upd.CurrentHash = hash - 1
	_, err = e.m.UpdateJob(c, upd)
	wantCode(t, "UpdateJob at a stale hash", err, norsk.ErrFailedPrecondition, `"life"`)
	upd.CurrentHash = hash
	hash2, err := e.m.UpdateJob(c, upd)
	must(t, "UpdateJob", err)
	if hash2 <= hash {
		t.Errorf("UpdateJob hash = %d; want > %d", hash2, hash)
	}
	got, err = e.m.JobById(c, "life")
	must(t, "JobById", err)
	if got.GetJob().GetTags()["team"] != "news" || !slices.Equal(kinds(got), []string{"updated", "created"}) {
		t.Errorf("after the update: tags %v history %v", got.GetJob().GetTags(), kinds(got))
	}
	if u := got.GetHistory()[0].GetUpdated(); u.GetPreviousHash() != hash || u.GetHash() != hash2 {
		t.Errorf("updated entry = %v; want %d → %d", u, hash, hash2)
	}

	must(t, "DeleteJob", e.m.DeleteJob(c, "life"))
	_, err = e.m.JobById(c, "life")
	wantCode(t, "JobById of a deleted job", err, norsk.ErrNotFound, `"life"`)
}

func jobStartStop(t *testing.T, e *env) {
	c := ctx(t)
	_, err := e.m.CreateJob(c, e.job("run", nil))
	must(t, "CreateJob", err)
	token, err := e.m.StartJob(c, "run", "primary", e.node, norsk.StartJobOptions{})
	must(t, "StartJob", err)
	j, err := e.m.WaitForJob(c, "run", "primary", norsk.InstancePhaseRunning)
	must(t, "WaitForJob running", err)
	in := j.GetInstances()[0]
	if in.GetNodeId() != e.node || in.GetFencingToken() != token || j.GetJob().GetState() != norsk.JobStateActive {
		t.Errorf("instance = node %s token %d (job %v); want %s, %d, active", in.GetNodeId(), in.GetFencingToken(), j.GetJob().GetState(), e.node, token)
	}
	_, err = e.m.StartJob(c, "run", "primary", e.node, norsk.StartJobOptions{})
	wantCode(t, "StartJob of a running instance", err, norsk.ErrFailedPrecondition, "run")
	nodes, err := e.m.ListNodes(c)
	must(t, "ListNodes", err)
	found := false
	for _, n := range nodes {
		for _, s := range n.GetInstances() {
			found = found || (n.GetNodeId() == e.node && s.GetJobId() == "run" && s.GetRole() == "primary" && s.GetFencingToken() == token)
		}
	}
	if !found {
		t.Errorf("ListNodes does not show run/primary on %s", e.node)
	}
	must(t, "StopJob", e.m.StopJob(c, "run", "primary", e.node, norsk.StopJobOptions{Reason: "done"}))
	_, err = e.m.WaitForJob(c, "run", "primary", norsk.InstancePhaseStopped)
	must(t, "WaitForJob stopped", err)
	// An event's job carries no history (the entry it added is beside it);
	// JobById has it all.
	j, err = e.m.JobById(c, "run")
	must(t, "JobById", err)
	if k := kinds(j); len(k) < 2 || k[0] != "stopped" || !slices.Contains(k, "stopping") || !slices.Contains(k, "provisioned") {
		t.Errorf("history = %v; want stopped, stopping, …, provisioned, created", k)
	}
	err = e.m.StopJob(c, "run", "primary", "elsewhere", norsk.StopJobOptions{})
	wantCode(t, "StopJob on the wrong node", err, norsk.ErrNotFound)
	must(t, "DeleteJob", e.m.DeleteJob(c, "run"))

	// Deleting a running job stops its instance (decision 0006).
	_, err = e.m.CreateJob(c, e.job("run-del", nil))
	must(t, "CreateJob", err)
	_, err = e.m.StartJob(c, "run-del", "primary", e.node, norsk.StartJobOptions{})
	must(t, "StartJob", err)
	_, err = e.m.WaitForJob(c, "run-del", "primary", norsk.InstancePhaseRunning)
	must(t, "WaitForJob running", err)
	must(t, "DeleteJob of a running job", e.m.DeleteJob(c, "run-del"))
	_, err = e.m.JobById(c, "run-del")
	wantCode(t, "JobById of a deleted job", err, norsk.ErrNotFound, "run-del")
	eventually(t, "the deleted job's instance leaves its node", func() error {
		nodes, err := e.m.ListNodes(c)
		if err != nil {
			return err
		}
		for _, n := range nodes {
			for _, s := range n.GetInstances() {
				if s.GetJobId() == "run-del" {
					return fmt.Errorf("node %s still holds run-del/%s", n.GetNodeId(), s.GetRole())
				}
			}
		}
		return nil
	})
}

func jobDeferStart(t *testing.T, e *env) {
	c := ctx(t)
	_, err := e.m.CreateJob(c, e.job("deferred", nil))
	must(t, "CreateJob", err)
	_, err = e.m.StartJob(c, "deferred", "primary", e.node, norsk.StartJobOptions{DeferStart: true})
	must(t, "StartJob deferred", err)
	_, err = e.m.WaitForJob(c, "deferred", "primary", norsk.InstancePhasePrepared)
	must(t, "WaitForJob prepared", err)
	must(t, "StartPreparedJob", e.m.StartPreparedJob(c, "deferred", "primary", e.node))
	_, err = e.m.WaitForJob(c, "deferred", "primary", norsk.InstancePhaseRunning)
	must(t, "WaitForJob running", err)
	must(t, "StopJob", e.m.StopJob(c, "deferred", "primary", e.node, norsk.StopJobOptions{}))
	_, err = e.m.WaitForJob(c, "deferred", "primary", norsk.InstancePhaseStopped)
	must(t, "WaitForJob stopped", err)
	err = e.m.StartPreparedJob(c, "deferred", "primary", e.node)
	wantCode(t, "StartPreparedJob of a stopped instance", err, norsk.ErrFailedPrecondition, "deferred")
}

func jobTerminal(t *testing.T, e *env) {
	c := ctx(t)
	for _, id := range []string{"done", "failed"} {
		_, err := e.m.CreateJob(c, e.job(id, nil))
		must(t, "CreateJob", err)
	}
	must(t, "CompleteJob", e.m.CompleteJob(c, "done"))
	must(t, "CompleteJob again (idempotent)", e.m.CompleteJob(c, "done"))
	j, err := e.m.JobById(c, "done")
	must(t, "JobById", err)
	if j.GetJob().GetTerminalState().GetKind() != norsk.TerminalKindCompleted || j.GetJob().GetState() != norsk.JobStatePost {
		t.Errorf("completed job: terminal %v state %v", j.GetJob().GetTerminalState(), j.GetJob().GetState())
	}
	_, err = e.m.StartJob(c, "done", "primary", e.node, norsk.StartJobOptions{})
	wantCode(t, "StartJob of a completed job", err, norsk.ErrFailedPrecondition, "done")

	must(t, "MarkJobFailed", e.m.MarkJobFailed(c, "failed", "gave up"))
	must(t, "MarkJobFailed again (idempotent)", e.m.MarkJobFailed(c, "failed", "still"))
	j, err = e.m.JobById(c, "failed")
	must(t, "JobById", err)
	if ts := j.GetJob().GetTerminalState(); ts.GetKind() != norsk.TerminalKindFailed || ts.GetReason() != "gave up" {
		t.Errorf("failed job: terminal %v", ts)
	}
	err = e.m.CompleteJob(c, "failed")
	wantCode(t, "CompleteJob of a failed job", err, norsk.ErrFailedPrecondition, "failed")
}

func jobSearch(t *testing.T, e *env) {
	c := ctx(t)
	for i, team := range []string{"red", "blue", "red"} {
		_, err := e.m.CreateJob(c, e.job(fmt.Sprintf("search-%d", i), map[string]string{"search": team}))
		must(t, "CreateJob", err)
	}
	ids := func(s norsk.JobSearchSettings) []string {
		t.Helper()
		jobs, err := e.m.JobSearch(c, s)
		must(t, "JobSearch", err)
		var out []string
		for _, j := range jobs {
			out = append(out, j.GetJob().GetJobId())
			if !s.IncludeHistory && len(j.GetHistory()) > 0 {
				t.Errorf("JobSearch without history returned %s's", j.GetJob().GetJobId())
			}
		}
		return out
	}
	tag := func(v string) *norsk.JobFilter { return norsk.TagEq("search", v) }
	if got := ids(norsk.JobSearchSettings{Filters: []*norsk.JobFilter{tag("red")}}); !slices.Equal(got, []string{"search-0", "search-2"}) {
		t.Errorf("tag search = %v", got)
	}
	if got := ids(norsk.JobSearchSettings{Filters: []*norsk.JobFilter{norsk.IdRegex("search-[01]")}}); !slices.Equal(got, []string{"search-0", "search-1"}) {
		t.Errorf("id regexp search = %v", got)
	}
	if got := ids(norsk.JobSearchSettings{Filters: []*norsk.JobFilter{norsk.IdRegex("search-.*")}, Limit: 1, AfterJobID: "search-0"}); !slices.Equal(got, []string{"search-1"}) {
		t.Errorf("paged search = %v", got)
	}
	if got := ids(norsk.JobSearchSettings{Filters: []*norsk.JobFilter{norsk.IdRegex("search-.*"), norsk.DateAfter(norsk.DateFieldCreated, time.Now().Add(-time.Hour))}}); len(got) != 3 {
		t.Errorf("created within the hour = %v", got)
	}
}

func jobStartMany(t *testing.T, e *env) {
	c := ctx(t)
	_, err := e.m.CreateJob(c, e.job("many", nil))
	must(t, "CreateJob", err)
	out, err := e.m.StartJobs(c, []norsk.Start{
		{JobID: "many", Role: "primary", NodeID: e.node},
		{JobID: "many-nope", Role: "primary", NodeID: e.node},
		{JobID: "many", Role: "backup", NodeID: "many-no-node"},
	})
	must(t, "StartJobs", err)
	if len(out) != 3 || out[0].Err != nil || out[0].FencingToken == 0 {
		t.Fatalf("StartJobs = %+v; want the first bound", out)
	}
	wantCode(t, "StartJobs of an unknown job", out[1].Err, norsk.ErrNotFound, "many-nope")
	wantCode(t, "StartJobs on an unknown node", out[2].Err, norsk.ErrNotFound, "many-no-node")
	if strings.Contains(out[1].Err.Error(), "not_found: ") {
		t.Errorf("a start's error repeats its code in the message: %v", out[1].Err)
	}
	_, err = e.m.WaitForJob(c, "many", "primary", norsk.InstancePhaseRunning)
	must(t, "WaitForJob", err)
	_, err = e.m.StartJobs(c, []norsk.Start{{JobID: "many", Role: "backup", NodeID: e.node}, {JobID: "many", Role: "backup", NodeID: e.node}})
	wantCode(t, "StartJobs of one instance twice", err, norsk.ErrInvalidArgument, "starts[1].role:")
	_, err = e.m.StartJobs(c, []norsk.Start{{JobID: "many", Role: "backup", NodeID: e.node}, {JobID: "many", Role: "", NodeID: e.node}})
	wantCode(t, "StartJobs with a malformed start", err, norsk.ErrInvalidArgument, "starts[1].role:")
	_, err = e.m.StartJobs(c, nil)
	wantCode(t, "StartJobs of nothing", err, norsk.ErrInvalidArgument, "starts:")
	j, err := e.m.JobById(c, "many")
	must(t, "JobById", err)
	if len(j.GetInstances()) != 1 {
		t.Errorf("refused StartJobs calls bound something: %v", j.GetInstances())
	}
	must(t, "StopJob", e.m.StopJob(c, "many", "primary", e.node, norsk.StopJobOptions{}))
}

func jobStartOffline(t *testing.T, e *env) {
	c := ctx(t)
	slot, err := e.m.RegisterClusterNode(c, "offline-slot", "")
	must(t, "RegisterClusterNode", err)
	_, err = e.m.CreateJob(c, e.job("offline", nil))
	must(t, "CreateJob", err)
	_, err = e.m.StartJob(c, "offline", "primary", slot.GetNodeId(), norsk.StartJobOptions{})
	wantCode(t, "StartJob on a registered node no worker holds", err, norsk.ErrFailedPrecondition, slot.GetNodeId())
}

func jobStopTwice(t *testing.T, e *env) {
	c := ctx(t)
	_, err := e.m.CreateJob(c, e.job("again", nil))
	must(t, "CreateJob", err)
	first, err := e.m.StartJob(c, "again", "primary", e.node, norsk.StartJobOptions{})
	must(t, "StartJob", err)
	_, err = e.m.WaitForJob(c, "again", "primary", norsk.InstancePhaseRunning)
	must(t, "WaitForJob running", err)
	must(t, "StopJob", e.m.StopJob(c, "again", "primary", e.node, norsk.StopJobOptions{}))
	_, err = e.m.WaitForJob(c, "again", "primary", norsk.InstancePhaseStopped)
	must(t, "WaitForJob stopped", err)
	must(t, "StopJob of a stopped instance (idempotent)", e.m.StopJob(c, "again", "primary", e.node, norsk.StopJobOptions{}))
	second, err := e.m.StartJob(c, "again", "primary", e.node, norsk.StartJobOptions{})
	must(t, "StartJob of a stopped instance's slot", err)
	if second <= first {
		t.Errorf("the new binding's token %d is not above the old %d", second, first)
	}
	j, err := e.m.WaitForJob(c, "again", "primary", norsk.InstancePhaseRunning)
	must(t, "WaitForJob running again", err)
	if len(j.GetInstances()) != 1 || j.GetInstances()[0].GetFencingToken() != second {
		t.Errorf("instances after the restart = %v", j.GetInstances())
	}
	must(t, "StopJob", e.m.StopJob(c, "again", "primary", e.node, norsk.StopJobOptions{}))
}

func jobFailRunning(t *testing.T, e *env) {
	c := ctx(t)
	_, err := e.m.CreateJob(c, e.job("doomed", nil))
	must(t, "CreateJob", err)
	_, err = e.m.StartJob(c, "doomed", "primary", e.node, norsk.StartJobOptions{})
	must(t, "StartJob", err)
	_, err = e.m.WaitForJob(c, "doomed", "primary", norsk.InstancePhaseRunning)
	must(t, "WaitForJob running", err)
	must(t, "MarkJobFailed", e.m.MarkJobFailed(c, "doomed", "bad input"))
	j, err := e.m.WaitForJob(c, "doomed", "primary", norsk.InstancePhaseStopped)
	must(t, "WaitForJob stopped", err)
	if in := j.GetInstances()[0]; in.GetStopReason() != norsk.StoppingReasonJobFailed {
		t.Errorf("the failed job's instance stopped for %v; want jobFailed", in.GetStopReason())
	}
	j, err = e.m.JobById(c, "doomed")
	must(t, "JobById", err)
	found := false
	for _, h := range j.GetHistory() {
		if r := h.GetRejected(); r != nil {
			found = strings.Contains(r.GetReason(), "bad input")
		}
	}
	if !found {
		t.Errorf("history %v has no rejected entry naming the reason", kinds(j))
	}
}

// jobCompleteRunning: StartPreparedJob of a running instance changes
// nothing; CompleteJob stops the running instance (userRequested, "job
// completed").
func jobCompleteRunning(t *testing.T, e *env) {
	c := ctx(t)
	_, err := e.m.CreateJob(c, e.job("finish", nil))
	must(t, "CreateJob", err)
	_, err = e.m.StartJob(c, "finish", "primary", e.node, norsk.StartJobOptions{})
	must(t, "StartJob", err)
	_, err = e.m.WaitForJob(c, "finish", "primary", norsk.InstancePhaseRunning)
	must(t, "WaitForJob running", err)
	must(t, "StartPreparedJob of a running instance (idempotent)", e.m.StartPreparedJob(c, "finish", "primary", e.node))
	must(t, "CompleteJob", e.m.CompleteJob(c, "finish"))
	j, err := e.m.WaitForJob(c, "finish", "primary", norsk.InstancePhaseStopped)
	must(t, "WaitForJob stopped", err)
	if in := j.GetInstances()[0]; in.GetStopReason() != norsk.StoppingReasonUserRequested || in.GetStopAdditionalReason() != "job completed" {
		t.Errorf("the completed job's instance stopped for %v %q; want userRequested, job completed", in.GetStopReason(), in.GetStopAdditionalReason())
	}
}
