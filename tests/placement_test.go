package tests

import (
	"errors"
	"strings"
	"testing"

	"github.com/norsk-go/norsk-manager/internal/manager"
	"github.com/norsk-go/norsk-manager/internal/runtime/runtimetest"
	"github.com/norsk-go/norsk-manager/internal/testcluster"
	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

// ExplainPlacement on a real Manager: a job whose requirements no worker
// meets is explained node by node; one that fits names a worker; an
// unknown job is NOT_FOUND.
func TestExplainPlacement(t *testing.T) {
	t.Parallel()
	c := testcluster.New(t, testcluster.Options{Workers: 2})
	cl, x := c.Client(), ctx(t)

	sdi := progJob(t, "sdi", runtimetest.Behaviour{}, nil)
	sdi.AutoPlacement = &norsk.AutoPlacement{Requirements: &norsk.JobRequirements{
		RequiredCapabilities: []*norsk.CapabilityRequirement{{Name: "sdi-in", Count: 1}},
	}}
	if _, err := cl.CreateJob(x, sdi); err != nil {
		t.Fatal(err)
	}
	res, err := cl.ExplainPlacement(x, "sdi", "", "")
	if err != nil {
		t.Fatal(err)
	}
	if res.GetNodeId() != "" || len(res.GetNodes()) != 2 {
		t.Fatalf("a job no worker can take: %v", res)
	}
	for _, v := range res.GetNodes() {
		if len(v.GetRefusals()) == 0 || v.GetRefusals()[0].GetRule() != "capability" || !strings.Contains(v.GetRefusals()[0].GetReason(), "sdi-in") {
			t.Errorf("%s: refusals %v, want the missing capability sdi-in", v.GetNodeId(), v.GetRefusals())
		}
	}

	small := progJob(t, "small", runtimetest.Behaviour{}, nil)
	small.AutoPlacement = &norsk.AutoPlacement{Requirements: &norsk.JobRequirements{RequiredCapacity: 0.25}}
	if _, err := cl.CreateJob(x, small); err != nil {
		t.Fatal(err)
	}
	res, err = cl.ExplainPlacement(x, "small", "", "")
	if err != nil {
		t.Fatal(err)
	}
	if n := res.GetNodeId(); n != "worker-1" && n != "worker-2" {
		t.Errorf("a small job: placed on %q (%s), want a worker", n, res.GetSummary())
	}

	if _, err := cl.ExplainPlacement(x, "nope", "", ""); !errors.Is(err, norsk.ErrNotFound) {
		t.Errorf("an unknown job: %v, want ErrNotFound", err)
	}
}

// The Manager's pools are ordered tiers: a pool's job goes to its cheapest
// tier with room, and the explanation shows each node's tier.
func TestExplainPlacementPoolTiers(t *testing.T) {
	t.Parallel()
	c := testcluster.New(t, testcluster.Options{Workers: 2})
	c.Members[0].Extra = func(cfg *manager.Config) { cfg.Pools = map[string][]string{"live": {"cheap", "premium"}} }
	c.RestartManager()
	cl, x := c.Client(), ctx(t)
	for w, pool := range map[string]string{"worker-1": "premium", "worker-2": "cheap"} {
		if err := cl.SetClusterNodePool(x, w, pool); err != nil {
			t.Fatal(err)
		}
	}
	c.WaitNodeState("worker-1", norsk.NodeStateOnline)
	c.WaitNodeState("worker-2", norsk.NodeStateOnline)
	j := progJob(t, "enc", runtimetest.Behaviour{}, nil)
	j.AutoPlacement = &norsk.AutoPlacement{Requirements: &norsk.JobRequirements{RequiredCapacity: 0.25}}
	if _, err := cl.CreateJob(x, j); err != nil {
		t.Fatal(err)
	}
	res, err := cl.ExplainPlacement(x, "enc", "", "live")
	if err != nil {
		t.Fatal(err)
	}
	tiers := map[string]int32{}
	for _, v := range res.GetNodes() {
		tiers[v.GetNodeId()] = v.GetTier()
	}
	if res.GetNodeId() != "worker-2" || tiers["worker-2"] != 0 || tiers["worker-1"] != 1 {
		t.Errorf("pool live: placed on %q, tiers %v (%s); want worker-2, the cheap tier", res.GetNodeId(), tiers, res.GetSummary())
	}
}

// A job may require the job socket (the capability a worker started with
// --job-socket advertises, count 1) to be placed where it can later be
// handed over: the capability says the node has job sockets, one per
// instance, so it is required, not used up — several such jobs share the
// node, as a handover's target does with what already runs there.
func TestJobSocketIsRequiredNotConsumed(t *testing.T) {
	t.Parallel()
	c := testcluster.New(t, testcluster.Options{Workers: 1, JobSocket: true})
	cl, x := c.Client(), ctx(t)
	for _, id := range []string{"js-1", "js-2", "js-3"} {
		j := progJob(t, id, runtimetest.Behaviour{}, nil)
		j.AutoPlacement = &norsk.AutoPlacement{Requirements: &norsk.JobRequirements{
			RequiredCapacity:     0.1,
			RequiredCapabilities: []*norsk.CapabilityRequirement{{Name: "jobSocket", Count: 1}},
		}}
		if _, err := cl.CreateJob(x, j); err != nil {
			t.Fatal(err)
		}
		if in := running(c, id, "primary"); in.GetNodeId() != "worker-1" {
			t.Fatalf("%s runs on %s, want worker-1", id, in.GetNodeId())
		}
	}
	res, err := cl.ExplainPlacement(x, "js-3", "", "")
	if err != nil {
		t.Fatal(err)
	}
	if res.GetNodeId() != "worker-1" {
		t.Errorf("explained with two others on the node: %q (%s), want worker-1", res.GetNodeId(), res.GetSummary())
	}
}
