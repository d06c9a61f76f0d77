package nodes

import (
	"testing"
	"time"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
)

// TestDeregisterSlotWithoutWorkerCompletes: a slot whose worker never
// registered (no address, no stream) has nothing to stop, so deregistering
// it completes without a worker (the slot is removed, and its name is free
// to register again), and terminating it records the node terminated.
func TestDeregisterSlotWithoutWorkerCompletes(t *testing.T) {
	t.Parallel()
	st := newMemStore()
	st.must(t, &storev1.Command{Cmd: &storev1.Command_RegisterSlot{RegisterSlot: &storev1.RegisterSlot{NodeId: "spare", NodeName: "spare", Token: "tok-spare"}}})
	st.must(t, &storev1.Command{Cmd: &storev1.Command_RegisterSlot{RegisterSlot: &storev1.RegisterSlot{NodeId: "idle", NodeName: "idle", Token: "tok-idle"}}})
	st.must(t, &storev1.Command{Cmd: &storev1.Command_DeregisterSlot{DeregisterSlot: &storev1.DeregisterSlot{NodeId: "spare"}}})
	st.must(t, &storev1.Command{Cmd: &storev1.Command_TerminateNode{TerminateNode: &storev1.TerminateNode{NodeId: "idle"}}})
	runController(t, Config{Store: st, HeartbeatInterval: 50 * time.Millisecond, LostGrace: 200 * time.Millisecond, TerminateTimeout: 200 * time.Millisecond})
	eventually(t, 5*time.Second, "the deregistered slot to be removed and the terminated node to be terminated", func() bool {
		r := st.State().Snapshot()
		return r.Node(nil, "spare") == nil && r.Node(nil, "idle").GetNode().GetState() == managerv1.NodeState_NODE_STATE_TERMINATED
	})
	// The name is free again.
	st.must(t, &storev1.Command{Cmd: &storev1.Command_RegisterSlot{RegisterSlot: &storev1.RegisterSlot{NodeId: "spare2", NodeName: "spare", Token: "tok-spare2"}}})
}
