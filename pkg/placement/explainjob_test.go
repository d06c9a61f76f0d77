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

// `job why` (ExplainJob) on nodes that say their runtime: a job whose one
// service has only an image is refused by the process node, naming the
// runtime, and placed on the docker node; a node that does not say (an
// older worker) stays eligible (issue 12 item 11).
func TestExplainJobRuntime(t *testing.T) {
	online := managerv1.NodeState_NODE_STATE_ONLINE
	nodes := []*managerv1.Node{
		{NodeId: "dock", State: online, Runtime: "docker", Hardware: &managerv1.Hardware{Vcpus: 2}},
		{NodeId: "old", State: online, Hardware: &managerv1.Hardware{Vcpus: 2}},
		{NodeId: "proc", State: online, Runtime: "process", Hardware: &managerv1.Hardware{Vcpus: 8}},
	}
	job := &managerv1.Job{JobId: "enc", Services: []*managerv1.Service{{Name: "main", Image: "enc:1"}},
		AutoPlacement: &managerv1.AutoPlacement{Requirements: &managerv1.JobRequirements{RequiredCapacity: 0.5}}}
	res, err := ExplainJob(Config{}, nodes, nil, job, "primary", "")
	if err != nil {
		t.Fatal(err)
	}
	verdicts := map[string]*managerv1.PlacementNodeVerdict{}
	for _, v := range res.GetNodes() {
		verdicts[v.GetNodeId()] = v
	}
	if rs := verdicts["proc"].GetRefusals(); len(rs) != 1 || rs[0].GetRule() != "runtime" ||
		!strings.Contains(rs[0].GetReason(), "runtime process cannot run image-only services") {
		t.Errorf("proc: %v, want the runtime refusal", rs)
	}
	if len(verdicts["dock"].GetRefusals()) != 0 || len(verdicts["old"].GetRefusals()) != 0 {
		t.Errorf("dock and old should be eligible: %v", res.GetNodes())
	}
	if !strings.Contains(res.GetSummary(), "1 refused by runtime") {
		t.Errorf("summary %q, want the runtime refusal counted", res.GetSummary())
	}

	// The same spec with a command as well runs on the process node too.
	job.Services[0].Command = []string{"/enc"}
	if res, err = ExplainJob(Config{}, nodes, nil, job, "primary", ""); err != nil || !strings.Contains(res.GetSummary(), "3 eligible") {
		t.Errorf("image and command: %q (%v), want every node eligible", res.GetSummary(), err)
	}
}

func TestRuntimeMismatch(t *testing.T) {
	node := func(id, rt string, st managerv1.NodeState) *managerv1.Node {
		return &managerv1.Node{NodeId: id, Runtime: rt, State: st}
	}
	online, gone := managerv1.NodeState_NODE_STATE_ONLINE, managerv1.NodeState_NODE_STATE_TERMINATED
	cmdJob := &managerv1.Job{JobId: "j", Services: []*managerv1.Service{{Name: "main", Command: []string{"./hello"}}}}
	for _, tc := range []struct {
		name  string
		nodes []*managerv1.Node
		want  string // substring; "" = no mismatch
	}{
		{"no nodes", nil, ""},
		{"a process node", []*managerv1.Node{node("a", "docker", online), node("b", "process", online)}, ""},
		{"an older worker", []*managerv1.Node{node("a", "docker", online), node("b", "", online)}, ""},
		{"only docker", []*managerv1.Node{node("a", "docker", online), node("b", "docker", managerv1.NodeState_NODE_STATE_LOST)},
			`no node's runtime can run the job: runtime docker cannot run command-only services (docker runs images): "main" has a command and no image`},
		{"the process node is terminated", []*managerv1.Node{node("a", "docker", online), node("b", "process", gone)}, "runtime docker cannot run"},
	} {
		got := RuntimeMismatch(tc.nodes, cmdJob)
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}
