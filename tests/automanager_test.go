package tests

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/norsk-go/norsk-manager/internal/manager"
	"github.com/norsk-go/norsk-manager/internal/runtime/runtimetest"
	"github.com/norsk-go/norsk-manager/internal/testcluster"
	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

// resilientBundle is a one-job bundle of the test program with a primary
// and a backup that may not share a node.
func resilientBundle(t testing.TB, id string, b runtimetest.Behaviour) *norsk.Bundle {
	tmpl := progJob(t, "template", b, nil)
	tmpl.JobId = ""
	return &norsk.Bundle{
		BundleId: id,
		Jobs: []*norsk.BundleJobSpec{{
			JobName:      "channel",
			Requirements: &norsk.JobRequirements{RequiredCapacity: 0.25},
			Job:          tmpl,
		}},
		ResiliencePolicy: &norsk.ResiliencePolicy{SameNode: norsk.AntiAffinityForbid},
	}
}

func running(c *testcluster.Cluster, jobID, role string) *norsk.Instance {
	return c.WaitPhase(jobID, role, norsk.InstancePhaseRunning)
}

// A bundle's primary and backup are placed on different workers; killing
// the primary's worker brings the primary back on another worker while
// the backup keeps running, untouched.
func TestBundleRecoversPrimaryOnWorkerLoss(t *testing.T) {
	t.Parallel()
	c := testcluster.New(t, testcluster.Options{Workers: 3, LostGrace: time.Second})
	cl, x := c.Client(), ctx(t)
	id, err := cl.CreateBundle(x, resilientBundle(t, "news", runtimetest.Behaviour{}))
	if err != nil || id != "news" {
		t.Fatalf("create bundle: %q, %v", id, err)
	}
	p := running(c, "news.channel.0", "primary")
	b := running(c, "news.channel.1", "backup")
	if p.GetNodeId() == b.GetNodeId() {
		t.Fatalf("primary and backup share node %s", p.GetNodeId())
	}
	if p.GetPlacement().GetKind() != "first" {
		t.Errorf("primary's placement = %v, want a first placement", p.GetPlacement())
	}

	if err := c.Worker(p.GetNodeId()).Stop(); err != nil {
		t.Fatal(err)
	}
	var moved *norsk.Instance
	c.WaitJob("news.channel.0", "primary running again elsewhere", func(jh *norsk.JobWithHistory) bool {
		moved = testcluster.Instance(jh, "primary")
		return moved != nil && moved.GetNodeId() != p.GetNodeId() && moved.GetPhase() == norsk.InstancePhaseRunning
	})
	if moved.GetNodeId() == b.GetNodeId() {
		t.Errorf("recovered primary shares the backup's node %s", b.GetNodeId())
	}
	if pl := moved.GetPlacement(); pl.GetKind() != "recovery" || pl.GetFailedNodeId() != p.GetNodeId() {
		t.Errorf("recovery placement = %v, want kind recovery from %s", pl, p.GetNodeId())
	}
	if nb := testcluster.Instance(c.Job("news.channel.1"), "backup"); nb.GetFencingToken() != b.GetFencingToken() || nb.GetPhase() != norsk.InstancePhaseRunning {
		t.Errorf("the backup was disturbed: %v, was %v", nb, b)
	}
}

// A job that keeps failing reaches the restart ceiling and is failed for
// good: it stays failed, unplaced, across a Manager restart.
func TestRestartCeilingFailsAndStaysFailed(t *testing.T) {
	t.Parallel()
	c := testcluster.New(t, testcluster.Options{Workers: 2})
	c.Members[0].Extra = func(cfg *manager.Config) { cfg.RestartCeiling = 3 }
	c.RestartManager()
	cl, x := c.Client(), ctx(t)
	b := resilientBundle(t, "flaky", runtimetest.Behaviour{ExitCode: 3, Run: 50 * time.Millisecond})
	b.ResiliencePolicy = nil
	if _, err := cl.CreateBundle(x, b); err != nil {
		t.Fatal(err)
	}
	jh := c.WaitJob("flaky.channel.0", "failed for good", func(jh *norsk.JobWithHistory) bool {
		return jh.GetJob().GetTerminalState().GetKind() == norsk.TerminalKindFailed
	})
	if r := jh.GetJob().GetTerminalState().GetReason(); !strings.Contains(r, "restart ceiling") {
		t.Errorf("terminal reason = %q, want the restart ceiling", r)
	}
	c.RestartManager()
	time.Sleep(time.Second) // a pass of the new primary's AutoManager
	jh = c.Job("flaky.channel.0")
	if jh.GetJob().GetTerminalState().GetKind() != norsk.TerminalKindFailed {
		t.Fatalf("after a restart the job is %v", jh.GetJob().GetTerminalState())
	}
	for _, in := range jh.GetInstances() {
		if in.GetPhase() != norsk.InstancePhaseStopped {
			t.Errorf("a failed job runs again after a restart: %v", in)
		}
	}
}

// Killing the Manager while a bundle's deletion waits for its instances to
// stop: the restarted Manager finishes the deletion.
func TestBundleDeletionResumesAfterManagerKill(t *testing.T) {
	t.Parallel()
	c := testcluster.New(t, testcluster.Options{Workers: 2})
	cl, x := c.Client(), ctx(t)
	if _, err := cl.CreateBundle(x, resilientBundle(t, "gone", runtimetest.Behaviour{})); err != nil {
		t.Fatal(err)
	}
	running(c, "gone.channel.0", "primary")
	running(c, "gone.channel.1", "backup")
	if err := cl.DeleteBundle(x, "gone"); err != nil {
		t.Fatal(err)
	}
	c.RestartManager()
	cl = c.Client()
	c.Eventually("bundle gone", func() bool {
		_, err := cl.BundleById(x, "gone")
		return errors.Is(err, norsk.ErrNotFound)
	})
	for _, id := range []string{"gone.channel.0", "gone.channel.1"} {
		if _, err := cl.JobById(x, id); !errors.Is(err, norsk.ErrNotFound) {
			t.Errorf("job %s after its bundle was deleted: %v, want ErrNotFound", id, err)
		}
	}
}

// The Manager is killed right after a worker: the restarted Manager
// recovers the lost worker's job.
func TestRecoveryResumesAfterManagerKill(t *testing.T) {
	t.Parallel()
	c := testcluster.New(t, testcluster.Options{Workers: 2, LostGrace: time.Second})
	cl, x := c.Client(), ctx(t)
	b := resilientBundle(t, "solo", runtimetest.Behaviour{})
	b.ResiliencePolicy = nil
	if _, err := cl.CreateBundle(x, b); err != nil {
		t.Fatal(err)
	}
	p := running(c, "solo.channel.0", "primary")
	if err := c.Worker(p.GetNodeId()).Stop(); err != nil {
		t.Fatal(err)
	}
	c.RestartManager()
	c.WaitJob("solo.channel.0", "primary running elsewhere", func(jh *norsk.JobWithHistory) bool {
		in := testcluster.Instance(jh, "primary")
		return in != nil && in.GetNodeId() != p.GetNodeId() && in.GetPhase() == norsk.InstancePhaseRunning
	})
}

// A bundle that fits nowhere is explained node by node.
func TestUnplaceableBundleExplained(t *testing.T) {
	t.Parallel()
	c := testcluster.New(t, testcluster.Options{Workers: 2})
	cl, x := c.Client(), ctx(t)
	b := resilientBundle(t, "huge", runtimetest.Behaviour{})
	b.Jobs[0].Requirements.RequiredCapacity = 64
	if _, err := cl.CreateBundle(x, b); err != nil {
		t.Fatal(err)
	}
	res, err := cl.ExplainPlacement(x, "huge.channel.1", "", "")
	if err != nil {
		t.Fatal(err)
	}
	if res.GetNodeId() != "" || len(res.GetNodes()) != 2 {
		t.Fatalf("explanation = %v, want no node and both refusing", res)
	}
	for _, v := range res.GetNodes() {
		if len(v.GetRefusals()) == 0 || v.GetRefusals()[0].GetRule() != "capacity" {
			t.Errorf("%s: %v, want a capacity refusal", v.GetNodeId(), v.GetRefusals())
		}
	}
	if jh := c.Job("huge.channel.0"); len(jh.GetInstances()) != 0 {
		t.Errorf("an unplaceable job got an instance: %v", jh.GetInstances())
	}
}

// Bad bundles are refused with INVALID_ARGUMENT naming the field, and
// nothing is stored.
func TestBundleBadInput(t *testing.T) {
	t.Parallel()
	c := testcluster.New(t, testcluster.Options{Workers: 1})
	cl, x := c.Client(), ctx(t)
	for name, tc := range map[string]struct {
		edit  func(b *norsk.Bundle)
		field string
	}{
		"duplicate job names":  {func(b *norsk.Bundle) { b.Jobs = append(b.Jobs, b.Jobs[0]) }, "bundle.jobs[1].jobName"},
		"unknown separateFrom": {func(b *norsk.Bundle) { b.Jobs[0].SeparateFrom = []string{"nope"} }, "bundle.jobs[0].separateFrom[0]"},
		"unknown coLocateWith": {func(b *norsk.Bundle) { b.Jobs[0].CoLocateWith = []string{"nope"} }, "bundle.jobs[0].coLocateWith[0]"},
		"co-locate and separate": {func(b *norsk.Bundle) {
			second := &norsk.BundleJobSpec{JobName: "audio", Job: b.Jobs[0].Job, CoLocateWith: []string{"channel"}}
			b.Jobs[0].SeparateFrom = []string{"audio"}
			b.Jobs = append(b.Jobs, second)
		}, "separateFrom"},
		"negative capacity": {func(b *norsk.Bundle) { b.Jobs[0].Requirements.RequiredCapacity = -1 }, "bundle.jobs[0].requirements.requiredCapacity"},
		"unknown pool":      {func(b *norsk.Bundle) { b.Pool = "nowhere" }, "bundle.pool"},
	} {
		t.Run(name, func(t *testing.T) {
			b := resilientBundle(t, "bad", runtimetest.Behaviour{})
			tc.edit(b)
			_, err := cl.CreateBundle(x, b)
			if !errors.Is(err, norsk.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("err = %v, want INVALID_ARGUMENT naming %s", err, tc.field)
			}
			if all, err := cl.ListBundles(x); err != nil || len(all) != 0 {
				t.Fatalf("bundles after a refusal: %v, %v", all, err)
			}
			if jobs, err := cl.JobSearch(x, norsk.JobSearchSettings{}); err != nil || len(jobs) != 0 {
				t.Fatalf("jobs after a refusal: %d, %v", len(jobs), err)
			}
		})
	}
}
