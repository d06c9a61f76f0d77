package tests

import (
	"slices"
	"strings"
	"testing"

	"github.com/norsk-go/norsk-manager/internal/runtime/runtimetest"
	"github.com/norsk-go/norsk-manager/internal/testcluster"
	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

// oneJobBundle is a bundle of one job (no backup) running tmpl.
func oneJobBundle(id string, tmpl *norsk.Job) *norsk.Bundle {
	tmpl.JobId = ""
	return &norsk.Bundle{BundleId: id, Jobs: []*norsk.BundleJobSpec{{
		JobName: "channel", Requirements: &norsk.JobRequirements{RequiredCapacity: 0.25}, Job: tmpl,
	}}}
}

// checkRunsNowhere: the job never got an instance, its bundle's view says
// why in the runtime's words, and `job why` refuses every node by the
// runtime rule.
func checkRunsNowhere(t *testing.T, c *testcluster.Cluster, bundleID, jobID, because string) {
	t.Helper()
	cl, x := c.Client(), ctx(t)
	jh := c.Job(jobID)
	if len(jh.GetInstances()) != 0 || slices.Contains(historyKinds(jh), "stopping") {
		t.Errorf("%s was placed: instances %v, history %v", jobID, jh.GetInstances(), historyKinds(jh))
	}
	if jh.GetJob().GetTerminalState() != nil {
		t.Errorf("%s ended (%v): a spec no node can run waits for one that can, it does not fail", jobID, jh.GetJob().GetTerminalState())
	}
	bw, err := cl.BundleById(x, bundleID)
	if err != nil {
		t.Fatal(err)
	}
	if d := bw.GetJobs()[0].GetDegradations(); len(d) != 1 || !strings.HasPrefix(d[0], "runtime: no node's runtime can run the job: "+because) {
		t.Errorf("bundle %s view: degradations %q, want the runtime explained (%q)", bundleID, d, because)
	}
	res, err := cl.ExplainPlacement(x, jobID, "", "")
	if err != nil {
		t.Fatal(err)
	}
	if res.GetNodeId() != "" {
		t.Errorf("job why %s: eligible %s (%s)", jobID, res.GetNodeId(), res.GetSummary())
	}
	for _, v := range res.GetNodes() {
		if len(v.GetRefusals()) == 0 || v.GetRefusals()[0].GetRule() != "runtime" || !strings.Contains(v.GetRefusals()[0].GetReason(), because) {
			t.Errorf("job why %s: node %s: %v, want the runtime refusal %q", jobID, v.GetNodeId(), v.GetRefusals(), because)
		}
	}
}

// Issue 12 item 11, on process workers: an image-only bundle is accepted
// but placed nowhere, and explained; a bundle with a command, created
// after it, runs — so a pass has considered the first and left it alone
// (no start, no failure, no restart towards the ceiling).
func TestImageOnlyBundleOnProcessWorkersIsExplained(t *testing.T) {
	t.Parallel()
	c := testcluster.New(t, testcluster.Options{Workers: 2})
	cl, x := c.Client(), ctx(t)
	for _, n := range []string{"worker-1", "worker-2"} {
		if rt := c.Node(n).GetRuntime(); rt != "process" {
			t.Fatalf("node %s says runtime %q, want process (its worker tells the Manager)", n, rt)
		}
	}
	img := &norsk.Job{Services: []*norsk.Service{{Name: "main", Image: "norsk-testprog:test"}}}
	if _, err := cl.CreateBundle(x, oneJobBundle("img", img)); err != nil {
		t.Fatalf("an image-only bundle on process workers is refused: %v; want it accepted and explained", err)
	}
	if _, err := cl.CreateBundle(x, oneJobBundle("cmd", progJob(t, "", runtimetest.Behaviour{}, nil))); err != nil {
		t.Fatal(err)
	}
	running(c, "cmd.channel.0", "primary")
	checkRunsNowhere(t, c, "img", "img.channel.0", "runtime process cannot run image-only services")
}

// Issue 12 item 11 as reported, where a Docker engine answers: on a fleet
// of a Docker node and a process node, a command-only spec runs on the
// process node and an image-only one on the Docker node; on the Docker
// node alone a command-only spec is placed nowhere and explained, where
// it used to fail there to the restart ceiling.
func TestPlacementFollowsTheRuntime(t *testing.T) {
	t.Parallel()
	c := newDockerCluster(t, testcluster.Options{Workers: 1})
	cl, x := c.Client(), ctx(t)
	if rt := c.Node(c.worker).GetRuntime(); rt != "docker" {
		t.Fatalf("node %s says runtime %q, want docker", c.worker, rt)
	}

	cmdOnly := progJob(t, "", runtimetest.Behaviour{}, nil)
	if _, err := cl.CreateBundle(x, oneJobBundle("cmd", cmdOnly)); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.CreateBundle(x, oneJobBundle("img", imageJob("", runtimetest.Behaviour{}))); err != nil {
		t.Fatal(err)
	}
	if in := running(c.Cluster, "img.channel.0", "primary"); in.GetNodeId() != c.worker {
		t.Errorf("the image-only job runs on %s, want the Docker node %s", in.GetNodeId(), c.worker)
	}
	checkRunsNowhere(t, c.Cluster, "cmd", "cmd.channel.0", "runtime docker cannot run command-only services")

	// A process node joins: the command-only job goes there.
	proc := c.worker + "-proc"
	c.AddWorker(proc, "process")
	if in := running(c.Cluster, "cmd.channel.0", "primary"); in.GetNodeId() != proc {
		t.Errorf("the command-only job runs on %s, want the process node %s", in.GetNodeId(), proc)
	}
	if jh := c.Job("cmd.channel.0"); len(jh.GetInstances()) != 1 {
		t.Errorf("the command-only job has instances %v, want the one on %s", jh.GetInstances(), proc)
	}
}
