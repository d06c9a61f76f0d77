package tests

import (
	"errors"
	"strings"
	"testing"

	"github.com/norsk-go/norsk-manager/internal/runtime/runtimetest"
	"github.com/norsk-go/norsk-manager/internal/testcluster"
	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

// ExplainPlacement on a real Manager: a job whose requirements no worker
// meets is explained node by node; one that fits names a worker; an
// unknown job is NOT_FOUND.
func TestExplainPlacement(t *testing.T) {
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
