package state_test

import (
	"bytes"
	"testing"

	"google.golang.org/protobuf/proto"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/internal/store/state"
	"github.com/norsk-go/norsk-manager/pkg/apierr"
)

func TestRegisterSlot(t *testing.T) {
	f := newFixture(t)
	res := f.must(cRegister("n1", "rack-1", "gold", "tok-1"))
	idx := f.index
	rec := f.node("n1")
	want := &storev1.NodeRecord{
		Node: &managerv1.Node{
			NodeId: "n1", NodeName: "rack-1", Provider: state.ProviderCluster,
			State: nodeRegistered, StateReason: "registered; waiting for its worker",
			Tags: map[string]string{"pool": "gold"}, RegisteredAt: stamp(idx), StateSince: stamp(idx),
		},
		Token: "tok-1", ModifyIndex: idx,
	}
	if !proto.Equal(rec, want) {
		t.Errorf("record = %v\nwant %v", rec, want)
	}
	r := f.read()
	if !proto.Equal(r.NodeByName(nil, "rack-1"), rec) || !proto.Equal(r.NodeByToken("tok-1"), rec) {
		t.Error("not found by name or token")
	}
	if r.NodeByToken("") != nil || r.NodeBySecret("") != nil {
		t.Error("an empty token or secret finds a node")
	}
	if got := eventKinds(res.Events); got != "slotRegistered" {
		t.Fatalf("events = %s", got)
	}
	// The event carries the slot without its token: events carry no secrets.
	slot := res.Events[0].GetClusterSlotRegistered().GetSlot()
	wantSlot := state.SlotView(rec)
	wantSlot.Token = ""
	if !proto.Equal(slot, wantSlot) || slot.GetToken() != "" || slot.GetPool() != "gold" || slot.GetActive() || state.SlotView(rec).GetToken() != "tok-1" {
		t.Errorf("slot = %v", slot)
	}
	// Without a pool there is no pool tag.
	f.must(cRegister("n2", "rack-2", "", "tok-2"))
	if tags := f.node("n2").GetNode().GetTags(); len(tags) != 0 {
		t.Errorf("tags = %v", tags)
	}
}

func TestMemberRegister(t *testing.T) {
	f := newFixture(t)
	f.registerNode("n1")
	res := f.must(cMember("tok-n1", "sec-1", "10.0.0.1:7000"))
	rec, ok := res.Value.(*storev1.NodeRecord)
	if !ok {
		t.Fatalf("value = %T, want *storev1.NodeRecord", res.Value)
	}
	if !proto.Equal(rec, f.node("n1")) {
		t.Errorf("value %v is not the stored record %v", rec, f.node("n1"))
	}
	n := rec.GetNode()
	if !rec.GetTokenUsed() || rec.GetNodeSecret() != "sec-1" || rec.GetToken() != "tok-n1" {
		t.Errorf("token used %v secret %q token %q", rec.GetTokenUsed(), rec.GetNodeSecret(), rec.GetToken())
	}
	if n.GetAddress() != "10.0.0.1:7000" || n.GetHardware().GetVcpus() != 8 || n.GetRuntime() != "process" || n.GetWorkerVersion() != "1.0.0" {
		t.Errorf("worker facts not recorded: %v", n)
	}
	if n.GetState() != nodeRegistered {
		t.Errorf("state = %v; the node is online only once its hello is applied", n.GetState())
	}
	if got := eventKinds(res.Events); got != "slotUpdated" {
		t.Errorf("events = %s", got)
	}
	if !res.Events[0].GetClusterSlotUpdated().GetSlot().GetTokenUsed() {
		t.Error("slot event does not show the token used")
	}
	if !proto.Equal(f.read().NodeBySecret("sec-1"), rec) {
		t.Error("not found by its secret")
	}

	// Again with the secret: the facts are updated, the secret kept.
	res = f.must(cMember("", "sec-1", "10.0.0.2:7000"))
	if got := f.node("n1"); got.GetNode().GetAddress() != "10.0.0.2:7000" || got.GetNodeSecret() != "sec-1" || !got.GetTokenUsed() {
		t.Errorf("after re-registration = %v", got)
	}

	// A worker started again on a terminated server may be dialled again.
	f.must(cOnline("n1"))
	f.must(cTerminate("n1"))
	f.must(cTerminated("n1", "server stopped"))
	f.must(cMember("", "sec-1", "10.0.0.3:7000"))
	if n := f.node("n1").GetNode(); n.GetState() != nodeRegistered || n.GetStateReason() != "worker registered again after termination" {
		t.Errorf("after termination and re-registration: %v %q", n.GetState(), n.GetStateReason())
	}
}

func TestNodeOnline(t *testing.T) {
	f := newFixture(t)
	f.registerNode("n1")
	f.must(cMember("tok-n1", "sec-1", "a:1"))
	cmd := cOnline("n1")
	cmd.GetNodeOnline().Hello.Hardware = &managerv1.Hardware{Vcpus: 32}
	cmd.GetNodeOnline().Hello.Capabilities = []*managerv1.Capability{{Name: "gpu", Count: 1}}
	res := f.must(cmd)
	idx := f.index
	n := f.node("n1").GetNode()
	if n.GetState() != nodeOnline || n.GetStateReason() != "worker connected" || !proto.Equal(n.GetStateSince(), stamp(idx)) {
		t.Errorf("node = %v %q since %v", n.GetState(), n.GetStateReason(), n.GetStateSince())
	}
	if n.GetHardware().GetVcpus() != 32 || len(n.GetCapabilities()) != 1 || n.GetWorkerVersion() != "1.0.1" {
		t.Errorf("hello facts not recorded: %v", n)
	}
	if res.Value != 0 {
		t.Errorf("stale = %v", res.Value)
	}
	if got := eventKinds(res.Events); got != "nodeOnline" {
		t.Errorf("events = %s", got)
	}
	if !state.SlotView(f.node("n1")).GetActive() {
		t.Error("slot of an online node is not active")
	}
	// A second hello (a reconnect within the grace) raises no online event
	// and keeps the hardware the hello did not say. (state_since moves to
	// the reconnect: the online state is re-entered.)
	res = f.must(cOnline("n1"))
	if len(res.Events) != 0 {
		t.Errorf("events = %s", eventKinds(res.Events))
	}
	if got := f.node("n1").GetNode(); got.GetHardware().GetVcpus() != 32 || got.GetState() != nodeOnline {
		t.Errorf("a hello without hardware cleared it: %v", got)
	}
	// A hello on a node being terminated does not bring it back.
	f.must(cTerminate("n1"))
	res = f.must(cOnline("n1"))
	if f.node("n1").GetNode().GetState() != nodeStopping || len(res.Events) != 0 {
		t.Errorf("stopping node after a hello: %v, events %s", f.node("n1").GetNode().GetState(), eventKinds(res.Events))
	}
}

func TestNodeLostTerminateTerminated(t *testing.T) {
	setup := func(t *testing.T) (*fixture, uint64, uint64) {
		f := newFixture(t)
		f.onlineNode("n1")
		f.onlineNode("n2")
		f.createJob("job-1")
		tokA := f.running("job-1", "a", "n1")
		tokB := f.running("job-1", "b", "n1")
		f.must(cStop("job-1", "b", "n1"))
		f.running("job-1", "c", "n2")
		return f, tokA, tokB
	}
	t.Run("terminate then terminated", func(t *testing.T) {
		f, tokA, tokB := setup(t)
		res := f.must(cTerminate("n1"))
		if got := eventKinds(res.Events); got != "jobUpdated(stopping),nodeStopping" {
			t.Errorf("terminate events = %s", got)
		}
		if n := f.node("n1").GetNode(); n.GetState() != nodeStopping || n.GetStateReason() != "terminate requested" {
			t.Errorf("node = %v", n)
		}
		a := f.instance("job-1", "a")
		if a.GetDesired() != desiredStopped || a.GetPhase() != phaseStopping || a.GetStopReason() != reasonNodeTerminated ||
			a.GetStopAdditionalReason() != "node terminated" {
			t.Errorf("a = %v", a)
		}
		if f.instance("job-1", "c").GetDesired() != desiredRunning {
			t.Error("another node's instance was stopped")
		}

		res = f.must(cTerminated("n1", "instance gone"))
		if got := eventKinds(res.Events); got != "jobUpdated(stopped),jobUpdated(stopped),nodeTerminated,slotUpdated" {
			t.Errorf("terminated events = %s", got)
		}
		if n := f.node("n1").GetNode(); n.GetState() != nodeTerminated || n.GetStateReason() != "instance gone" {
			t.Errorf("node = %v", n)
		}
		h := f.history("job-1")
		if !sameRef(entryRef(h[0]), "b", "n1", tokB) || !sameRef(entryRef(h[1]), "a", "n1", tokA) || entryKinds(h[:3]) != "stopped,stopped,stopping" {
			t.Errorf("history = %s (%v, %v)", entryKinds(h), entryRef(h[0]), entryRef(h[1]))
		}
		for _, role := range []string{"a", "b"} {
			if in := f.instance("job-1", role); in.GetPhase() != phaseStopped {
				t.Errorf("%s = %v", role, in)
			}
		}
		// Again: nothing changes.
		before := f.snap()
		res = f.must(cTerminated("n1", "again"))
		if len(res.Events) != 0 {
			t.Errorf("events = %s", eventKinds(res.Events))
		}
		f.unchangedSince(before)
	})
	t.Run("terminated without terminate", func(t *testing.T) {
		f, _, _ := setup(t)
		f.must(cTerminated("n1", "vanished"))
		h := f.history("job-1")
		// a: stopping (node terminated) then stopped; b was already stopping.
		if got := entryKinds(h[:3]); got != "stopped,stopped,stopping" {
			t.Errorf("history = %s", got)
		}
		if s := h[2].GetStopping(); s.GetReason() != reasonNodeTerminated || s.GetAdditionalReason() != "node terminated" {
			t.Errorf("stopping = %v", s)
		}
	})
	t.Run("lost", func(t *testing.T) {
		f, _, _ := setup(t)
		res := f.must(cLost("n1", "no heartbeat"))
		// b was already stopping: only a gets an entry.
		if got := eventKinds(res.Events); got != "jobUpdated(stopping),nodeLost" {
			t.Errorf("events = %s", got)
		}
		if ev := res.Events[1].GetNodeLost(); ev.GetReason() != "no heartbeat" || ev.GetNode().GetState() != nodeLost {
			t.Errorf("lost event = %v", ev)
		}
		// A lost node can be terminated.
		f.must(cTerminate("n1"))
		if f.node("n1").GetNode().GetState() != nodeStopping {
			t.Error("lost node not stopping after terminate")
		}
	})
}

func TestDeregisterSlot(t *testing.T) {
	f := newFixture(t)
	f.onlineNode("n1")
	f.createJob("job-1")
	tok := f.running("job-1", "a", "n1")
	res := f.must(cDereg("n1"))
	if got := eventKinds(res.Events); got != "jobUpdated(stopping),nodeStopping,slotUpdated" {
		t.Errorf("events = %s", got)
	}
	rec := f.node("n1")
	if !rec.GetDeregistering() || rec.GetToken() != "" || rec.GetNode().GetState() != nodeStopping {
		t.Errorf("record = %v", rec)
	}
	if f.read().NodeByToken("tok-n1") != nil {
		t.Error("the token still finds the slot")
	}
	a := f.instance("job-1", "a")
	if a.GetDesired() != desiredStopped || a.GetStopReason() != reasonNodeTerminated || a.GetStopAdditionalReason() != "node deregistered" {
		t.Errorf("instance = %v", a)
	}

	res = f.must(cTerminated("n1", "deregistered"))
	if got := eventKinds(res.Events); got != "jobUpdated(stopped),nodeTerminated,slotDeregistered" {
		t.Errorf("events = %s", got)
	}
	r := f.read()
	if r.Node(nil, "n1") != nil || r.NodeByName(nil, "name-n1") != nil || r.NodeBySecret("sec-n1") != nil {
		t.Error("the slot is still there")
	}
	if in := r.Instance(nil, "job-1", "a"); in.GetPhase() != phaseStopped || in.GetFencingToken() != tok {
		t.Errorf("instance = %v, want kept, stopped", in)
	}
	if s := res.Events[2].GetClusterSlotDeregistered().GetSlot(); s.GetNodeId() != "n1" || s.GetState() != nodeTerminated {
		t.Errorf("slot = %v", s)
	}
	// The name and id can be registered again.
	f.must(cRegister("n1", "name-n1", "", "tok-new"))
	f.must(cMember("tok-new", "sec-new", "a:1"))
	f.must(cOnline("n1"))
	f.bind("job-1", "a", "n1")
}

func TestSetSlotPool(t *testing.T) {
	tests := []struct {
		name       string
		online     bool
		from, to   string
		wantEvents string
	}{
		{"set on registered", false, "", "gold", "nodeTagsUpdated,slotUpdated"},
		{"set on online", true, "", "gold", "nodeStopping,nodeTerminated,nodeOnline,nodeTagsUpdated,slotUpdated"},
		{"change on online", true, "gold", "silver", "nodeStopping,nodeTerminated,nodeOnline,nodeTagsUpdated,slotUpdated"},
		{"clear on online", true, "gold", "", "nodeStopping,nodeTerminated,nodeOnline,nodeTagsUpdated,slotUpdated"},
		{"same", true, "gold", "gold", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			f.must(cRegister("n1", "name-n1", tt.from, "tok-n1"))
			if tt.online {
				f.must(cMember("tok-n1", "sec-n1", "a:1"))
				f.must(cOnline("n1"))
				f.createJob("job-1")
				f.running("job-1", "a", "n1")
			}
			before := f.snap()
			res := f.must(cPool("n1", tt.to))
			if got := eventKinds(res.Events); got != tt.wantEvents {
				t.Errorf("events = %s, want %s", got, tt.wantEvents)
			}
			if tt.from == tt.to {
				f.unchangedSince(before)
				return
			}
			n := f.node("n1").GetNode()
			p, ok := n.GetTags()["pool"]
			if p != tt.to || ok != (tt.to != "") {
				t.Errorf("pool tag = %q (%v), want %q", p, ok, tt.to)
			}
			if tt.online {
				if n.GetState() != nodeOnline {
					t.Errorf("state = %v, want still online", n.GetState())
				}
				if in := f.instance("job-1", "a"); in.GetDesired() != desiredRunning || in.GetPhase() != phaseRunning {
					t.Errorf("a pool change touched the instance: %v", in)
				}
				if ev := res.Events[0].GetNodeStopping(); ev.GetReason() != "pool changed" {
					t.Errorf("cycle reason = %q", ev.GetReason())
				}
			}
		})
	}
}

func TestSetNodeTags(t *testing.T) {
	f := newFixture(t)
	f.onlineNode("n1")
	f.must(cTags("n1", map[string]string{"zone": "a", "tier": "gold"}))
	res := f.must(cTags("n1", map[string]string{"zone": "b", "spare": "true"}))
	want := map[string]string{"zone": "b", "tier": "gold", "spare": "true"}
	if got := f.node("n1").GetNode().GetTags(); !proto.Equal(&managerv1.Node{Tags: got}, &managerv1.Node{Tags: want}) {
		t.Errorf("tags = %v, want merged %v", got, want)
	}
	if got := eventKinds(res.Events); got != "nodeTagsUpdated" {
		t.Errorf("events = %s", got)
	}
	if ev := res.Events[0].GetNodeTagsUpdated(); ev.GetNode().GetTags()["zone"] != "b" {
		t.Errorf("event node = %v", ev.GetNode())
	}
	// A node with instances can be un-spared.
	f.must(cTags("n1", map[string]string{"spare": "false"}))
	f.createJob("job-1")
	f.bind("job-1", "a", "n1")
	f.must(cTags("n1", map[string]string{"spare": "false"}))
	// Stopped instances do not count against a spare.
	f.must(cStop("job-1", "a", "n1"))
	f.must(cReports("n1", report("job-1", "a", f.instance("job-1", "a").GetFencingToken(), phaseStopped)))
	f.must(cTags("n1", map[string]string{"spare": "true"}))
}

// TestSetNodeTagsSpareOnElasticNode needs a node of another provider, which
// only a provider (not a command here) creates: it is restored from a
// snapshot.
func TestSetNodeTagsSpareOnElasticNode(t *testing.T) {
	f := newFixture(t)
	var buf bytes.Buffer
	writeRecords(t, &buf,
		&storev1.SnapshotRecord{Record: &storev1.SnapshotRecord_Header{Header: &storev1.SnapshotHeader{SchemaVersion: state.SchemaVersion, Index: 10}}},
		&storev1.SnapshotRecord{Record: &storev1.SnapshotRecord_Node{Node: &storev1.NodeRecord{Node: &managerv1.Node{
			NodeId: "i-123", NodeName: "aws-1", Provider: "aws", State: nodeOnline,
		}}}})
	if _, err := f.s.Restore(&buf); err != nil {
		t.Fatal(err)
	}
	f.index = 10
	f.refused(cTags("i-123", map[string]string{"spare": "true"}), apierr.FailedPrecondition, `"i-123"`, "AutoManager")
	f.must(cTags("i-123", map[string]string{"zone": "eu-1a"}))
}

func TestSetNodeIdleExpiry(t *testing.T) {
	f := newFixture(t)
	f.registerNode("n1")
	for _, ms := range []int64{60000, 0} {
		res := f.must(cIdle("n1", ms))
		if got := f.node("n1").GetNode().GetIdleExpiryMs(); got != ms {
			t.Errorf("idle expiry = %d, want %d", got, ms)
		}
		if f.node("n1").GetModifyIndex() != f.index {
			t.Errorf("modify index = %d, want %d", f.node("n1").GetModifyIndex(), f.index)
		}
		if len(res.Events) != 0 {
			t.Errorf("events = %s", eventKinds(res.Events))
		}
	}
}

// TestRegisterSlotDuplicateToken: the FSM re-checks what makes a slot
// unique (name, id); a registration token is unique too (the token index).
func TestRegisterSlotDuplicateToken(t *testing.T) {
	f := newFixture(t)
	f.must(cRegister("n-b", "name-b", "", "tok-same"))
	f.refused(cRegister("n-a", "name-a", "", "tok-same"), apierr.AlreadyExists, "token")
}

// TestDuplicateSecretRefused: a node secret is unique too.
func TestDuplicateSecretRefused(t *testing.T) {
	f := newFixture(t)
	f.onlineNode("n1")
	secret := f.read().Node(nil, "n1").GetNodeSecret()
	f.must(cRegister("n2", "n2", "", "tok-2"))
	f.refused(&storev1.Command{Cmd: &storev1.Command_MemberRegister{MemberRegister: &storev1.MemberRegister{
		Token: "tok-2", NodeSecret: secret, Address: "127.0.0.1:2",
	}}}, apierr.AlreadyExists, "secret")
}
