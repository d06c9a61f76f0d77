package state_test

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/pkg/apierr"
	"github.com/norsk-go/norsk-manager/pkg/jobspec"
)

func startDrain(node string) *storev1.Command {
	return &storev1.Command{Cmd: &storev1.Command_StartNodeDrain{StartNodeDrain: &storev1.StartNodeDrain{Drain: &managerv1.NodeDrain{
		NodeId: node, Strategy: managerv1.MigrationStrategy_MIGRATION_STRATEGY_OVERLAP, Parallel: 2,
	}}}}
}

func putDrain(d *managerv1.NodeDrain, rev uint64) *storev1.Command {
	return &storev1.Command{Cmd: &storev1.Command_PutNodeDrain{PutNodeDrain: &storev1.PutNodeDrain{Drain: d, ExpectedRevision: rev}}}
}

// A drain is stored on its node: started running (the node draining),
// moved on by the AutoManager's writes at the expected revision, counted
// and summarised by the store, ended once; undo cancels it. Every refusal
// changes nothing.
func TestNodeDrainLifecycle(t *testing.T) {
	f := newFixture(t)
	f.onlineNode("a")
	res := f.must(startDrain("a"))
	if got := eventKinds(res.Events); got != "nodeTagsUpdated,nodeDrainUpdated" {
		t.Fatalf("start raised %s", got)
	}
	d := f.node("a").GetNode().GetDrain()
	if !f.node("a").GetNode().GetDraining() || d.GetState() != managerv1.NodeDrainState_NODE_DRAIN_STATE_RUNNING || d.GetRevision() != res.Index || d.GetStartedAt() == nil {
		t.Fatalf("after start: draining %v, drain %v", f.node("a").GetNode().GetDraining(), d)
	}
	f.refused(startDrain("a"), apierr.FailedPrecondition, "already being drained")
	f.refused(startDrain("zz"), apierr.NotFound, "zz")

	next := proto.Clone(d).(*managerv1.NodeDrain)
	next.Listed = true
	next.Items = []*managerv1.DrainItem{
		{JobId: "j1", Role: "primary", Result: managerv1.DrainItemResult_DRAIN_ITEM_RESULT_MOVED, TargetNodeId: "b"},
		{JobId: "j2", Role: "primary", Result: managerv1.DrainItemResult_DRAIN_ITEM_RESULT_MOVING, MigrationId: "m2"},
		{JobId: "j3", Role: "primary", Result: managerv1.DrainItemResult_DRAIN_ITEM_RESULT_SKIPPED, Reason: "by hand"},
	}
	next.Parallel = 9 // the request's options stay as asked
	f.refused(putDrain(next, d.GetRevision()+1), apierr.FailedPrecondition, "revision")
	bad := proto.Clone(next).(*managerv1.NodeDrain)
	bad.Items[0].JobId = ""
	// The handler refuses a malformed record (the FSM does not validate
	// again: decision 0046).
	if err := jobspec.ValidateDrain(bad); apierr.CodeOf(err) != apierr.InvalidArgument || !strings.Contains(err.Error(), "drain.items[0].jobId") {
		t.Errorf("ValidateDrain = %v, want INVALID_ARGUMENT naming drain.items[0].jobId", err)
	}
	bad = proto.Clone(next).(*managerv1.NodeDrain)
	bad.State = managerv1.NodeDrainState_NODE_DRAIN_STATE_CANCELLED
	f.refused(putDrain(bad, d.GetRevision()), apierr.InvalidArgument, "drain.state")

	res = f.must(putDrain(next, d.GetRevision()))
	d = f.node("a").GetNode().GetDrain()
	if d.GetMoved() != 1 || d.GetTotal() != 3 || d.GetSummary() != "1/3 moved, 1 moving, 1 skipped" || d.GetParallel() != 2 || d.GetRevision() != res.Index {
		t.Fatalf("after progress: %v", d)
	}
	if eventKinds(res.Events) != "nodeDrainUpdated" {
		t.Fatalf("progress raised %s", eventKinds(res.Events))
	}

	// Undo cancels it; the AutoManager's next write is refused.
	res = f.must(&storev1.Command{Cmd: &storev1.Command_SetNodeDraining{SetNodeDraining: &storev1.SetNodeDraining{NodeId: "a"}}})
	n := f.node("a").GetNode()
	if n.GetDraining() || n.GetDrain().GetState() != managerv1.NodeDrainState_NODE_DRAIN_STATE_CANCELLED || n.GetDrain().GetEndedAt() == nil {
		t.Fatalf("after undo: %v", n)
	}
	if got := eventKinds(res.Events); got != "nodeDrainUpdated,nodeTagsUpdated" {
		t.Fatalf("undo raised %s", got)
	}
	f.refused(putDrain(next, n.GetDrain().GetRevision()), apierr.FailedPrecondition, "cancelled")

	// A new drain may start once the last ended, and ends once.
	f.must(startDrain("a"))
	d = f.node("a").GetNode().GetDrain()
	if len(d.GetItems()) != 0 || d.GetState() != managerv1.NodeDrainState_NODE_DRAIN_STATE_RUNNING {
		t.Fatalf("second drain: %v", d)
	}
	end := proto.Clone(d).(*managerv1.NodeDrain)
	end.Listed, end.State = true, managerv1.NodeDrainState_NODE_DRAIN_STATE_DRAINED
	f.must(putDrain(end, d.GetRevision()))
	d = f.node("a").GetNode().GetDrain()
	if d.GetState() != managerv1.NodeDrainState_NODE_DRAIN_STATE_DRAINED || d.GetEndedAt() == nil || d.GetSummary() != "0/0 moved" {
		t.Fatalf("ended drain: %v", d)
	}
	f.refused(putDrain(end, d.GetRevision()), apierr.FailedPrecondition, "drained")
	// Undo of an ended drain only lets the node take work again.
	f.must(&storev1.Command{Cmd: &storev1.Command_SetNodeDraining{SetNodeDraining: &storev1.SetNodeDraining{NodeId: "a"}}})
	if n := f.node("a").GetNode(); n.GetDraining() || n.GetDrain().GetState() != managerv1.NodeDrainState_NODE_DRAIN_STATE_DRAINED {
		t.Fatalf("undo after the end: %v", n)
	}
}

// A stop with a reason (a drain's deadline) records it in the stopping
// history entry.
func TestStopInstanceWithReason(t *testing.T) {
	f := newFixture(t)
	f.onlineNode("n1")
	f.createJob("job-1")
	f.running("job-1", "primary", "n1")
	f.must(&storev1.Command{Cmd: &storev1.Command_StopInstance{StopInstance: &storev1.StopInstance{
		JobId: "job-1", Role: "primary", NodeId: "n1", Reason: "drain of node n1: its deadline passed",
	}}})
	if h := f.history("job-1"); h[0].GetStopping().GetAdditionalReason() != "drain of node n1: its deadline passed" {
		t.Fatalf("stopping entry = %v", h[0])
	}
}
