package norsk_test

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/norsk-go/norsk-manager/sdk/norsk"
	"github.com/norsk-go/norsk-manager/sdk/norsk/norsktest"
)

// fixedClock is a clock a test sets.
type fixedClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fixedClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fixedClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

const channelBundleYAML = `
bundleId: news
resiliencePolicy: {sameNode: forbid}
jobs:
  - jobName: channel
    requirements: {requiredCapacity: 0.5}
    job:
      tags: {app: news}
      services: [{name: main, image: hello, restart: {mode: on-failure}}]
  - jobName: recorder
    startMode: manual
    coLocateWith: [channel]
    job:
      services: [{name: rec, image: rec}]
`

// jobStates is "jobId:role:dormant" for every replica job of a bundle.
func jobStates(bw *norsk.BundleWithJobs) string {
	var out []string
	for _, j := range bw.GetJobs() {
		out = append(out, fmt.Sprintf("%s:%s:%v", j.GetJobId(), j.GetRole(), j.GetDormant()))
	}
	return strings.Join(out, " ")
}

func TestBundles(t *testing.T) {
	t.Parallel()
	srv := norsktest.NewServer(t)
	clk := &fixedClock{t: t0}
	srv.SetClock(clk.now)
	srv.AddNode(&norsk.Node{NodeId: "node-1"})
	m := connectTo(t, srv)
	ctx := t.Context()

	b, err := norsk.DecodeBundleSpec([]byte(channelBundleYAML))
	if err != nil {
		t.Fatalf("DecodeBundleSpec: %v", err)
	}
	if b.GetResiliencePolicy().GetSameNode() != norsk.AntiAffinityForbid {
		t.Fatalf("sameNode: forbid decoded as %v", b.GetResiliencePolicy().GetSameNode())
	}
	id, err := m.CreateBundle(ctx, b)
	if err != nil || id != "news" {
		t.Fatalf("CreateBundle = %q, %v", id, err)
	}
	if _, err := m.CreateBundle(ctx, b); !errors.Is(err, norsk.ErrAlreadyExists) {
		t.Errorf("CreateBundle again = %v; want ErrAlreadyExists", err)
	}

	// Two replicas × two jobs, named, tagged and given their roles.
	bw, err := m.BundleById(ctx, "news")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := jobStates(bw), "news.channel.0:primary:false news.recorder.0:primary:true news.channel.1:backup:false news.recorder.1:backup:true"; got != want {
		t.Fatalf("bundle jobs = %s\nwant        %s", got, want)
	}
	if st := bw.GetBundle().GetState(); st != norsk.BundleStateLive || bw.GetBundle().GetCreatedAt().AsTime() != t0 || bw.GetBundle().GetRevision() == 0 {
		t.Errorf("bundle = %v", bw.GetBundle())
	}
	j, err := m.JobById(ctx, "news.channel.1")
	if err != nil {
		t.Fatal(err)
	}
	if tags := j.GetJob().GetTags(); tags["bundleId"] != "news" || tags["replicaIndex"] != "1" || tags["jobName"] != "channel" || tags["app"] != "news" || tags["dormant"] != "" {
		t.Errorf("replica job tags = %v", tags)
	}
	if c := j.GetJob().GetAutoPlacement().GetRequirements().GetRequiredCapacity(); c != 0.5 {
		t.Errorf("replica job capacity = %v", c)
	}
	if rec, _ := m.JobById(ctx, "news.recorder.0"); rec.GetJob().GetTags()["dormant"] != "true" {
		t.Errorf("a manual-start job is not dormant: %v", rec.GetJob().GetTags())
	}

	// An id is made up when none is given.
	anon := &norsk.Bundle{Jobs: []*norsk.BundleJobSpec{{JobName: "x", Job: testJob("")}}}
	if id, err := m.CreateBundle(ctx, anon); err != nil || !strings.HasPrefix(id, "b-") {
		t.Errorf("CreateBundle without an id = %q, %v", id, err)
	}

	// Malformed bundles: INVALID_ARGUMENT naming the field.
	for _, tc := range []struct{ spec, field string }{
		{"bundleId: bad\njobs: [{jobName: a, job: {services: [{name: main, image: hello}]}}, {jobName: a, job: {services: [{name: main, image: hello}]}}]", "bundle.jobs[1].jobName"},
		{"bundleId: bad\njobs: [{jobName: a, coLocateWith: [nope], job: {services: [{name: main, image: hello}]}}]", "bundle.jobs[0].coLocateWith[0]"},
		{"bundleId: bad\njobs: [{jobName: a, job: {services: [{name: main, image: hello}]}}, {jobName: b, separateFrom: [c], job: {services: [{name: main, image: hello}]}}]", "bundle.jobs[1].separateFrom[0]"},
		{"bundleId: bad\njobs: [{jobName: a, requirements: {requiredCapacity: -1}, job: {services: [{name: main, image: hello}]}}]", "bundle.jobs[0].requirements.requiredCapacity"},
		{"bundleId: bad\njobs: [{jobName: a, job: {services: [{name: main, image: hello}]}}, {jobName: b, coLocateWith: [a], separateFrom: [a], job: {services: [{name: main, image: hello}]}}]", "bundle.jobs[1].separateFrom[0]"},
		{"bundleId: Bad\njobs: [{jobName: a, job: {services: [{name: main, image: hello}]}}]", "bundle.bundleId"},
		{"bundleId: bad\njobs: []", "bundle.jobs"},
		{"bundleId: bad\njobs: [{jobName: a}]", "bundle.jobs[0].job"},
		{"bundleId: bad\njobs: [{jobName: a, startMode: later, job: {services: [{name: main, image: hello}]}}]", "bundle.jobs[0].startMode"},
		{"bundleId: bad\nresiliencePolicy: {replicas: 1}\njobs: [{jobName: a, job: {services: [{name: main, image: hello}]}}]", "bundle.resiliencePolicy.replicas"},
		{"bundleId: bad\npool: gold\njobs: [{jobName: a, job: {services: [{name: main, image: hello}]}}]", "bundle.pool"},
	} {
		bad, err := norsk.DecodeBundleSpec([]byte(tc.spec))
		if err != nil {
			t.Fatalf("DecodeBundleSpec(%q): %v", tc.spec, err)
		}
		_, err = m.CreateBundle(ctx, bad)
		if !errors.Is(err, norsk.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.field+":") {
			t.Errorf("CreateBundle(%q) = %v; want INVALID_ARGUMENT naming %s", tc.spec, err, tc.field)
		}
	}
	if srv.Job("bad.a.0") != nil {
		t.Error("a refused bundle left a job behind")
	}

	// Start and stop a bundle job: the dormant mark flips; a stop stops the
	// instance with the grace given.
	if err := m.StartBundleJob(ctx, "news", 1, "recorder"); err != nil {
		t.Fatal(err)
	}
	if _, err := m.StartJob(ctx, "news.recorder.1", "backup", "node-1", norsk.StartJobOptions{}); err != nil {
		t.Fatal(err)
	}
	bw, _ = m.BundleById(ctx, "news")
	if st := bw.GetJobs()[3]; st.GetDormant() || st.GetNodeId() != "node-1" || st.GetPhase() != norsk.InstancePhaseRunning {
		t.Errorf("started bundle job = %v", st)
	}
	if err := m.StopBundleJob(ctx, "news", 1, "recorder", norsk.StopBundleJobOptions{Grace: 5 * time.Second}); err != nil {
		t.Fatal(err)
	}
	bw, _ = m.BundleById(ctx, "news")
	if st := bw.GetJobs()[3]; !st.GetDormant() || st.GetPhase() != norsk.InstancePhaseStopped {
		t.Errorf("stopped bundle job = %v", st)
	}
	if in := srv.Job("news.recorder.1").GetInstances()[0]; in.GetStopGraceMs() != 5000 {
		t.Errorf("stop grace = %d ms", in.GetStopGraceMs())
	}
	for _, err := range []error{
		m.StartBundleJob(ctx, "news", 2, "channel"),
		m.StopBundleJob(ctx, "news", 0, "nope", norsk.StopBundleJobOptions{}),
		m.StopBundleJob(ctx, "news", 0, "channel", norsk.StopBundleJobOptions{Grace: 2 * time.Hour}),
	} {
		if !errors.Is(err, norsk.ErrInvalidArgument) {
			t.Errorf("bad bundle job call = %v; want ErrInvalidArgument", err)
		}
	}
	if err := m.StartBundleJob(ctx, "nope", 0, "channel"); !errors.Is(err, norsk.ErrNotFound) {
		t.Errorf("StartBundleJob on no bundle = %v; want ErrNotFound", err)
	}

	// Stop time and lease: stored; no job is touched.
	at := t0.Add(time.Hour)
	if err := m.SetBundleStopTime(ctx, "news", &at); err != nil {
		t.Fatal(err)
	}
	exp, err := m.RenewBundleLease(ctx, "news", 30*time.Minute)
	if err != nil || !exp.Equal(t0.Add(30*time.Minute)) {
		t.Fatalf("RenewBundleLease = %v, %v", exp, err)
	}
	if _, err := m.RenewBundleLease(ctx, "news", time.Millisecond); !errors.Is(err, norsk.ErrInvalidArgument) {
		t.Errorf("RenewBundleLease(1ms) = %v; want ErrInvalidArgument", err)
	}
	got := srv.Bundle("news")
	if !got.GetStopAt().AsTime().Equal(at) || !got.GetLeaseExpiresAt().AsTime().Equal(exp) {
		t.Errorf("stop time and lease = %v, %v", got.GetStopAt(), got.GetLeaseExpiresAt())
	}
	if err := m.SetBundleStopTime(ctx, "news", nil); err != nil || srv.Bundle("news").GetStopAt() != nil {
		t.Errorf("clearing the stop time: %v, %v", err, srv.Bundle("news").GetStopAt())
	}

	// Update: stale revision refused; a job added is created, one removed
	// is deleted; dormant marks, stop time and lease are kept.
	bw, _ = m.BundleById(ctx, "news")
	upd, read := bw.GetBundle(), bw.GetBundle().GetRevision()
	upd.Revision = 1
	if _, err := m.UpdateBundle(ctx, upd); !errors.Is(err, norsk.ErrFailedPrecondition) {
		t.Errorf("UpdateBundle at a stale revision = %v; want ErrFailedPrecondition", err)
	}
	upd.Revision = read
	upd.Jobs = append(upd.Jobs[:1], &norsk.BundleJobSpec{JobName: "thumbs", Job: testJob("")})
	rev, err := m.UpdateBundle(ctx, upd)
	if err != nil || rev <= upd.GetRevision() {
		t.Fatalf("UpdateBundle = %d, %v", rev, err)
	}
	if srv.Job("news.recorder.0") != nil || srv.Job("news.thumbs.1") == nil {
		t.Error("UpdateBundle did not delete the removed job or create the new one")
	}
	if got := srv.Bundle("news"); got.GetRevision() != rev || got.GetLeaseExpiresAt() == nil {
		t.Errorf("updated bundle = %v", got)
	}

	list, err := m.ListBundles(ctx)
	if err != nil || len(list) != 2 || list[1].GetBundle().GetBundleId() != "news" || len(list[1].GetJobs()) != 4 {
		t.Fatalf("ListBundles = %v, %v", list, err)
	}

	// The lease runs out: the bundle and its jobs go.
	clk.advance(31 * time.Minute)
	if gone := srv.ExpireBundles(); fmt.Sprint(gone) != "[news]" {
		t.Fatalf("ExpireBundles = %v", gone)
	}
	if _, err := m.BundleById(ctx, "news"); !errors.Is(err, norsk.ErrNotFound) {
		t.Errorf("BundleById after expiry = %v; want ErrNotFound", err)
	}
	if _, err := m.JobById(ctx, "news.channel.0"); !errors.Is(err, norsk.ErrNotFound) {
		t.Errorf("a job of an expired bundle = %v; want ErrNotFound", err)
	}

	// Delete: the bundle and its jobs are removed, running instances stopped.
	if _, err := m.CreateBundle(ctx, b); err != nil {
		t.Fatal(err)
	}
	if _, err := m.StartJob(ctx, "news.channel.0", "primary", "node-1", norsk.StartJobOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := m.DeleteBundle(ctx, "news"); err != nil {
		t.Fatal(err)
	}
	if srv.Bundle("news") != nil || srv.Job("news.channel.0") != nil || srv.Job("news.channel.1") != nil {
		t.Error("DeleteBundle left the bundle or its jobs")
	}
	if err := m.DeleteBundle(ctx, "news"); !errors.Is(err, norsk.ErrNotFound) {
		t.Errorf("DeleteBundle again = %v; want ErrNotFound", err)
	}

	// A stop time already past deletes the bundle at once.
	if _, err := m.CreateBundle(ctx, b); err != nil {
		t.Fatal(err)
	}
	past := clk.now().Add(-time.Second)
	if err := m.SetBundleStopTime(ctx, "news", &past); err != nil {
		t.Fatal(err)
	}
	if srv.Bundle("news") != nil {
		t.Error("a stop time in the past did not delete the bundle")
	}
}

func TestDecodeBundleSpecErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ spec, want string }{
		{"bundleId: x\nbogus: 1", `bundle: unknown field "bogus"`},
		{"bundleId: x\nresiliencePolicy: {sameNode: sometimes}", `bundle.resiliencePolicy.sameNode: unknown value "sometimes"`},
		{"jobs: [{jobName: a, job: {services: [{name: s, restart: {mode: sometimes}}]}}]", `bundle.jobs[0].job.services[0].restart.mode: unknown value "sometimes"`},
		{"", "bundle spec: empty"},
		{`{"bundleId": "x"} {}`, "more than one JSON value"},
	} {
		_, err := norsk.DecodeBundleSpec([]byte(tc.spec))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("DecodeBundleSpec(%q) = %v; want an error containing %q", tc.spec, err, tc.want)
		}
	}
	b, err := norsk.DecodeBundleSpec([]byte(`{"bundle_id": "x", "jobs": [{"job_name": "a", "job": {}}]}`))
	if err != nil || b.GetBundleId() != "x" || b.GetJobs()[0].GetJobName() != "a" {
		t.Errorf("DecodeBundleSpec(JSON, proto names) = %v, %v", b, err)
	}
}
