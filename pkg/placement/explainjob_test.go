package placement

import (
	"strings"
	"testing"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
)

// ExplainJob excludes nodes that are not online (saying their state),
// counts every live instance but the one being placed, and answers in the
// API's form.
func TestExplainJob(t *testing.T) {
	job := func(id string, capacity float64) *managerv1.Job {
		return &managerv1.Job{JobId: id, AutoPlacement: &managerv1.AutoPlacement{Requirements: &managerv1.JobRequirements{RequiredCapacity: capacity}}}
	}
	nodes := []*managerv1.Node{
		{NodeId: "a", State: managerv1.NodeState_NODE_STATE_ONLINE, Hardware: &managerv1.Hardware{Vcpus: 4}},
		{NodeId: "b", State: managerv1.NodeState_NODE_STATE_ONLINE, Hardware: &managerv1.Hardware{Vcpus: 4}},
		{NodeId: "c", State: managerv1.NodeState_NODE_STATE_LOST, Hardware: &managerv1.Hardware{Vcpus: 64}},
	}
	enc, other := job("enc", 2), job("other", 2)
	live := []JobInstance{
		{Instance: &managerv1.Instance{JobId: "other", Role: "primary", NodeId: "a"}, Job: other},
		// enc's own binding on b does not count against b.
		{Instance: &managerv1.Instance{JobId: "enc", Role: "primary", NodeId: "b"}, Job: enc},
	}
	res, err := ExplainJob(Config{}, nodes, live, enc, "primary", "")
	if err != nil {
		t.Fatal(err)
	}
	if res.GetNodeId() != "b" {
		t.Fatalf("placed on %q, want b (a is full, c is lost): %v", res.GetNodeId(), res)
	}
	why := map[string]string{}
	for _, v := range res.GetNodes() {
		var rs []string
		for _, r := range v.GetRefusals() {
			rs = append(rs, r.GetRule()+": "+r.GetReason())
		}
		why[v.GetNodeId()] = strings.Join(rs, "; ")
	}
	if !strings.HasPrefix(why["a"], "capacity:") {
		t.Errorf("a: %q, want a capacity refusal", why["a"])
	}
	if !strings.HasPrefix(why["c"], "exclusion: ") || !strings.HasSuffix(why["c"], "the node is lost") {
		t.Errorf("c: %q, want the exclusion of a lost node", why["c"])
	}
	if !strings.Contains(res.GetSummary(), "placed on b") {
		t.Errorf("summary %q", res.GetSummary())
	}
}
