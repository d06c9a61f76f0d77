package state_test

import (
	"testing"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/pkg/apierr"
)

func cElastic(id, host string) *storev1.Command {
	return &storev1.Command{Cmd: &storev1.Command_RegisterSlot{RegisterSlot: &storev1.RegisterSlot{
		NodeId: id, NodeName: id, Pool: "burst", Token: "tok-" + id, Provider: "mock", ProviderInstance: host,
		Hardware: &managerv1.Hardware{Vcpus: 4}, Tags: map[string]string{"zone": "z1"},
	}}}
}

func cTerminateIdle(id, why string) *storev1.Command {
	return &storev1.Command{Cmd: &storev1.Command_TerminateNode{TerminateNode: &storev1.TerminateNode{NodeId: id, OnlyIfIdle: true, Reason: why}}}
}

// An elastic node starts in STARTING with its provider's facts, comes
// online when its worker calls in, and is terminated only if idle when the
// reaper asks; a terminated elastic node never comes back.
func TestElasticNode(t *testing.T) {
	f := newFixture(t)
	f.must(cElastic("m1", "http://h1"))
	n := f.node("m1").GetNode()
	if n.GetState() != managerv1.NodeState_NODE_STATE_STARTING || !n.GetElastic() || n.GetProvider() != "mock" ||
		n.GetProviderInstance() != "http://h1" || n.GetHardware().GetVcpus() != 4 || n.GetTags()["pool"] != "burst" || n.GetTags()["zone"] != "z1" {
		t.Fatalf("node = %v", n)
	}
	// Nothing binds to a node that is starting.
	f.createJob("j")
	f.refused(cBind("j", "primary", "m1"), apierr.FailedPrecondition, "starting")
	// Its worker calls in: online.
	f.must(cMember("tok-m1", "sec-m1", "m1.local:7000"))
	f.must(cOnline("m1"))
	if st := f.node("m1").GetNode().GetState(); st != nodeOnline {
		t.Fatalf("state = %v, want online", st)
	}
	f.bind("j", "primary", "m1")
	f.refused(cTerminateIdle("m1", "idle for 10m"), apierr.FailedPrecondition, "not idle", "j/primary")
	f.must(cStop("j", "primary", "m1"))
	f.must(cReports("m1", report("j", "primary", f.instance("j", "primary").GetFencingToken(), managerv1.InstancePhase_INSTANCE_PHASE_STOPPED)))
	f.must(cTerminateIdle("m1", "idle for 10m"))
	if n := f.node("m1").GetNode(); n.GetState() != managerv1.NodeState_NODE_STATE_STOPPING || n.GetStateReason() != "idle for 10m" {
		t.Fatalf("node = %v, want stopping for the reaper's reason", n)
	}
	f.must(cTerminated("m1", "worker confirmed"))
	// Its worker registering again is refused: the provider makes new nodes.
	f.refused(&storev1.Command{Cmd: &storev1.Command_MemberRegister{MemberRegister: &storev1.MemberRegister{
		NodeSecret: "sec-m1", Address: "m1.local:7000",
	}}}, apierr.FailedPrecondition, "terminated")
}

// A node whose worker never called in is terminated at once.
func TestTerminateStartingNode(t *testing.T) {
	f := newFixture(t)
	f.must(cElastic("m1", "http://h1"))
	res := f.must(cTerminateIdle("m1", "startup time exceeded"))
	if n := f.node("m1").GetNode(); n.GetState() != managerv1.NodeState_NODE_STATE_TERMINATED || n.GetStateReason() != "startup time exceeded" {
		t.Fatalf("node = %v", n)
	}
	if got := eventKinds(res.Events); got != "nodeTerminated" {
		t.Errorf("events = %s", got)
	}
	// The spare tag of an elastic node is the reconciler's.
	c := cElastic("m2", "http://h2")
	c.GetRegisterSlot().Tags["spare"] = "true"
	f.refused(c, apierr.InvalidArgument, "spare")
	// … which may create one with it, and set and clear it; no one else.
	c.GetRegisterSlot().SpareByReconciler = true
	f.must(c)
	if n := f.node("m2").GetNode(); n.GetTags()["spare"] != "true" {
		t.Fatalf("the reconciler's spare: tags %v", n.GetTags())
	}
	tags := func(v string, by bool) *storev1.Command {
		return &storev1.Command{Cmd: &storev1.Command_SetNodeTags{SetNodeTags: &storev1.SetNodeTags{NodeId: "m2", Tags: map[string]string{"spare": v}, ByReconciler: by}}}
	}
	f.refused(tags("", false), apierr.FailedPrecondition, "reconciler")
	f.must(tags("", true))
	if n := f.node("m2").GetNode(); n.GetTags()["spare"] != "" {
		t.Fatalf("released spare: tags %v", n.GetTags())
	}
}

// BindInstances binds each instance on its own: a refused one changes
// nothing and the others bind, all under the command's index.
func TestBindInstances(t *testing.T) {
	f := newFixture(t)
	f.onlineNode("a")
	f.registerNode("off")
	f.createJob("j1")
	f.createJob("j2")
	f.createJob("j3")
	res := f.must(&storev1.Command{Cmd: &storev1.Command_BindInstances{BindInstances: &storev1.BindInstances{Binds: []*storev1.BindInstance{
		{JobId: "j1", Role: "primary", NodeId: "a"},
		{JobId: "j2", Role: "primary", NodeId: "off"},
		{JobId: "nope", Role: "primary", NodeId: "a"},
		{JobId: "j3", Role: "primary", NodeId: "a"},
		{JobId: "j1", Role: "primary", NodeId: "a"},
	}}}})
	out, ok := res.Value.(*managerv1.StartJobsResponse)
	if !ok || len(out.GetResults()) != 5 {
		t.Fatalf("value = %v", res.Value)
	}
	want := []struct {
		code string
		ok   bool
	}{{"", true}, {"FAILED_PRECONDITION", false}, {"NOT_FOUND", false}, {"", true}, {"INVALID_ARGUMENT", false}}
	for i, w := range want {
		r := out.GetResults()[i]
		if r.GetErrorCode() != w.code || (r.GetFencingToken() == f.index) != w.ok {
			t.Errorf("result %d = %v, want code %q bound %v", i, r, w.code, w.ok)
		}
	}
	if f.instance("j1", "primary").GetFencingToken() != f.index || f.instance("j3", "primary").GetFencingToken() != f.index {
		t.Error("the bound instances do not carry the command's index")
	}
	if f.instance("j2", "primary") != nil {
		t.Error("a refused bind left an instance")
	}
}

func cCloud(id string) *storev1.Command {
	return &storev1.Command{Cmd: &storev1.Command_RegisterSlot{RegisterSlot: &storev1.RegisterSlot{
		NodeId: id, NodeName: id, Pool: "burst", Token: "tok-" + id, Provider: "aws",
		Hardware: &managerv1.Hardware{Vcpus: 4, MemoryBytes: 8 << 30},
		Cloud:    &managerv1.CloudInstance{Region: "eu-west-1", InstanceType: "c6i.xlarge", ClientToken: "norsk-abc", FallbackInstanceTypes: []string{"c6i.2xlarge"}},
	}}}
}

func cInstance(id, instance string, cloud *managerv1.CloudInstance) *storev1.Command {
	return &storev1.Command{Cmd: &storev1.Command_SetNodeInstance{SetNodeInstance: &storev1.SetNodeInstance{NodeId: id, ProviderInstance: instance, Cloud: cloud}}}
}

// A cloud node records its launch, then (SetNodeInstance) its next
// attempt or its instance — once; its capacity stays its type's whatever
// its worker reports; a terminated node keeps why.
func TestCloudNodeInstance(t *testing.T) {
	f := newFixture(t)
	f.must(cCloud("a1"))
	if n := f.node("a1").GetNode(); n.GetCloud().GetClientToken() != "norsk-abc" || n.GetProviderInstance() != "" || n.GetState() != managerv1.NodeState_NODE_STATE_STARTING {
		t.Fatalf("node = %v", n)
	}
	f.refused(cInstance("a1", "", nil), apierr.InvalidArgument, "next launch")
	res := f.must(cInstance("a1", "", &managerv1.CloudInstance{Region: "eu-west-1", InstanceType: "c6i.2xlarge", Attempt: 1, ClientToken: "norsk-def"}))
	if got := eventKinds(res.Events); got != "nodeTagsUpdated" {
		t.Errorf("events = %s", got)
	}
	f.must(cInstance("a1", "i-1", &managerv1.CloudInstance{Region: "eu-west-1", Zone: "eu-west-1a", InstanceType: "c6i.2xlarge", Attempt: 1}))
	if n := f.node("a1").GetNode(); n.GetProviderInstance() != "i-1" || n.GetCloud().GetZone() != "eu-west-1a" {
		t.Fatalf("node = %v", n)
	}
	f.refused(cInstance("a1", "i-2", nil), apierr.FailedPrecondition, "already runs on instance i-1")
	f.must(cInstance("a1", "i-1", nil)) // the same again: idempotent
	f.must(cMember("tok-a1", "sec-a1", "a1.local:7000"))
	f.must(cOnline("a1"))
	if hw := f.node("a1").GetNode().GetHardware(); hw.GetVcpus() != 4 || hw.GetMemoryBytes() != 8<<30 {
		t.Errorf("hardware = %v; want the instance type's vCPUs and memory", hw)
	}
	f.must(&storev1.Command{Cmd: &storev1.Command_TerminateNode{TerminateNode: &storev1.TerminateNode{NodeId: "a1", Reason: "its instance i-1 is gone"}}})
	f.must(cTerminated("a1", "its worker is not connected"))
	if n := f.node("a1").GetNode(); n.GetState() != nodeTerminated || n.GetStateReason() != "its instance i-1 is gone (its worker is not connected)" {
		t.Errorf("terminated node %v %q: want why it was terminated kept", n.GetState(), n.GetStateReason())
	}
	// A cluster slot runs on no cloud instance.
	c := cRegister("s1", "s1", "", "tok-s1")
	c.GetRegisterSlot().Cloud = &managerv1.CloudInstance{Region: "x"}
	f.refused(c, apierr.InvalidArgument, "cluster slot")
	f.refused(cInstance("s0", "i-9", nil), apierr.NotFound, "s0")
}
