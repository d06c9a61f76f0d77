package nodes

import (
	"context"
	"errors"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
)

// TestReconcileEndingSessionRecordsEverythingReceived: when the node's
// record changes under an open stream, reconcile ends the session; what the
// worker had already sent is recorded first — not only its instance reports
// and notices but its migration reports (a step of a migration the
// AutoManager waits on) and its image reports (the prefetch outcome and the
// inventory), which were dropped before.
func TestReconcileEndingSessionRecordsEverythingReceived(t *testing.T) {
	t.Parallel()
	st := newMemStore()
	tok := setupNode(t, st, "10.0.0.1:7000")
	c := New(Config{Store: st, Logger: discardLogger()})
	cn := newConn(c, "n1")

	// The stream was opened for an older record of the node (another
	// address): the session must end.
	opened := proto.Clone(st.State().Snapshot().Node(nil, "n1")).(*storev1.NodeRecord)
	opened.Node.Address = "10.0.0.9:7000"
	in := make(chan received, 8)
	images := []*managerv1.HeldImage{{Ref: "hello:dev", Digest: "sha256:0123", SizeBytes: 42}}
	for _, m := range []*managerv1.WorkerMessage{
		{Msg: &managerv1.WorkerMessage_Migration{Migration: &managerv1.MigrationReport{
			JobId: "job-1", Role: "primary", FencingToken: tok, MigrationId: "mig-1",
			Kind: managerv1.MigrationReportKind_MIGRATION_REPORT_KIND_TARGET_READY,
		}}},
		{Msg: &managerv1.WorkerMessage_Prefetched{Prefetched: &managerv1.ImagesPrefetched{RequestId: "pf-1", HeldImages: images}}},
		{Msg: &managerv1.WorkerMessage_Images{Images: &managerv1.HeldImages{Images: images}}},
		{Msg: &managerv1.WorkerMessage_Notice{Notice: &managerv1.WorkerNotice{JobId: "job-1", Role: "primary", FencingToken: tok, Message: "slow start"}}},
	} {
		in <- received{msg: m}
	}
	l := &link{rec: opened, in: in}
	s := newSessionState(l)

	if _, err := cn.reconcile(context.Background(), l, s); !errors.Is(err, errSessionEnded) {
		t.Fatalf("reconcile = %v, want the session ended (the record changed)", err)
	}

	var migrated, prefetched bool
	for _, e := range st.events {
		switch k := e.GetKind().(type) {
		case *managerv1.Event_MigrationTargetReady:
			migrated = k.MigrationTargetReady.GetMigrationId() == "mig-1" && k.MigrationTargetReady.GetNodeId() == "n1"
		case *managerv1.Event_ImagesPrefetched:
			prefetched = k.ImagesPrefetched.GetRequestId() == "pf-1" && k.ImagesPrefetched.GetNodeId() == "n1"
		}
	}
	if !migrated {
		t.Error("the migration report received before the session ended was dropped (no MigrationTargetReady event for mig-1)")
	}
	if !prefetched {
		t.Error("the prefetch outcome received before the session ended was dropped (no ImagesPrefetched event for pf-1)")
	}
	held := st.State().Snapshot().Node(nil, "n1").GetNode().GetHeldImages()
	if len(held) != 1 || held[0].GetRef() != "hello:dev" || held[0].GetDigest() != "sha256:0123" {
		t.Errorf("node n1 holds images %v; want the inventory received before the session ended", held)
	}
	if s.migrations != nil || s.images != nil || s.prefetched != nil || s.notices != nil {
		t.Errorf("the session still holds unrecorded items: migrations %v, images %v, prefetched %v, notices %v", s.migrations, s.images, s.prefetched, s.notices)
	}
}

// TestTerminateRecordsWhatArrivesBeforeTheAck: while the controller waits
// for the worker to acknowledge its Terminate, what the worker sends is
// recorded as pump records it — here its last image inventory, which was
// dropped before (only instance reports were).
func TestTerminateRecordsWhatArrivesBeforeTheAck(t *testing.T) {
	t.Parallel()
	st := newMemStore()
	images := []*managerv1.HeldImage{{Ref: "hello:dev", Digest: "sha256:0123", SizeBytes: 42}}
	w := newFakeWorker(t, func(ctx context.Context, attempt int, s *connect.BidiStream[managerv1.ControllerMessage, managerv1.WorkerMessage]) error {
		if err := awaitManagerHello(s); err != nil {
			return err
		}
		// It holds nothing: the node's instance is recorded stopped, so
		// the terminating node is finished at once.
		if err := s.Send(workerHello()); err != nil {
			return err
		}
		for {
			m, err := s.Receive()
			if err != nil {
				return nil
			}
			if m.GetTerminate() == nil {
				continue
			}
			_ = s.Send(&managerv1.WorkerMessage{Msg: &managerv1.WorkerMessage_Images{Images: &managerv1.HeldImages{Images: images}}})
			_ = s.Send(&managerv1.WorkerMessage{Msg: &managerv1.WorkerMessage_Ack{Ack: &managerv1.CommandAck{Seq: m.GetSeq()}}})
		}
	})
	setupNode(t, st, w.addr)
	st.must(t, &storev1.Command{Cmd: &storev1.Command_TerminateNode{TerminateNode: &storev1.TerminateNode{NodeId: "n1"}}})
	runController(t, Config{Store: st, HeartbeatInterval: time.Hour, LostGrace: time.Hour})
	eventually(t, 10*time.Second, "the node to be terminated", func() bool {
		return st.State().Snapshot().Node(nil, "n1").GetNode().GetState() == managerv1.NodeState_NODE_STATE_TERMINATED
	})
	held := st.State().Snapshot().Node(nil, "n1").GetNode().GetHeldImages()
	if len(held) != 1 || held[0].GetRef() != "hello:dev" {
		t.Errorf("node n1 holds images %v; want the inventory the worker sent before acknowledging its Terminate", held)
	}
}
