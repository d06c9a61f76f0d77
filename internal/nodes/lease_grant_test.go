package nodes

import (
	"context"
	"testing"
	"time"

	"connectrpc.com/connect"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
)

func heartbeatMsg(sentMonoMs uint64) *managerv1.WorkerMessage {
	return &managerv1.WorkerMessage{Msg: &managerv1.WorkerMessage_Heartbeat{Heartbeat: &managerv1.Heartbeat{SentMonoMs: sentMonoMs}}}
}

// TestHeartbeatIsAnsweredWithALeaseGrant: a heartbeat carrying its send time
// is answered with a LeaseGrant that echoes it, with the controller's lease
// TTL and whether the store has leases paused. The start of a
// lease-protected instance waits for the worker's first heartbeat on the
// stream, so that it reaches the worker after a grant.
func TestHeartbeatIsAnsweredWithALeaseGrant(t *testing.T) {
	t.Parallel()
	st := newMemStore()
	type got struct {
		grant *managerv1.LeaseGrant
		start *managerv1.StartInstance
	}
	msgs := make(chan got, 16)
	beat := make(chan uint64, 4)
	var tok uint64
	w := newFakeWorker(t, func(ctx context.Context, attempt int, s *connect.BidiStream[managerv1.ControllerMessage, managerv1.WorkerMessage]) error {
		if err := awaitManagerHello(s); err != nil {
			return err
		}
		if err := s.Send(workerHello(&managerv1.InstanceReport{JobId: "job-1", Role: "primary", FencingToken: tok, Phase: managerv1.InstancePhase_INSTANCE_PHASE_RUNNING})); err != nil {
			return err
		}
		// As the worker does: a heartbeat right after the hello.
		if err := s.Send(heartbeatMsg(42)); err != nil {
			return err
		}
		// The heartbeats are sent from their own goroutine, which ends
		// before the handler returns (a send may not race the stream's end).
		sctx, stop := context.WithCancel(ctx)
		sent := make(chan struct{})
		defer func() { stop(); <-sent }()
		go func() {
			defer close(sent)
			for {
				select {
				case ms := <-beat:
					if s.Send(heartbeatMsg(ms)) != nil {
						return
					}
				case <-sctx.Done():
					return
				}
			}
		}()
		for {
			m, err := s.Receive()
			if err != nil {
				return nil
			}
			switch {
			case m.GetLease() != nil:
				msgs <- got{grant: m.GetLease()}
			case m.GetStart() != nil:
				msgs <- got{start: m.GetStart()}
			}
		}
	})
	tok = setupNode(t, st, w.addr)
	st.must(t, &storev1.Command{Cmd: &storev1.Command_CreateJob{CreateJob: &storev1.CreateJob{Job: &managerv1.Job{
		JobId: "job-2", LeaseProtected: true, Services: []*managerv1.Service{{Name: "main", Image: "hello:dev"}},
	}}}})
	st.must(t, &storev1.Command{Cmd: &storev1.Command_BindInstance{BindInstance: &storev1.BindInstance{JobId: "job-2", Role: "primary", NodeId: "n1"}}})
	c := runController(t, Config{Store: st, HeartbeatInterval: time.Hour, LostGrace: time.Hour, LeaseTTL: 9 * time.Second})

	next := func(what string) got {
		t.Helper()
		select {
		case g := <-msgs:
			return g
		case <-time.After(10 * time.Second):
			t.Fatalf("timed out waiting for %s", what)
			return got{}
		}
	}
	g := next("a lease grant")
	if g.grant == nil {
		t.Fatalf("the start of lease-protected job-2 came before the worker's first heartbeat was answered: %v", g.start)
	}
	if g.grant.GetHeartbeatMonoMs() != 42 || g.grant.GetTtlMs() != 9000 || g.grant.GetPaused() {
		t.Fatalf("grant %v, want heartbeat 42, ttl 9000 ms, not paused", g.grant)
	}
	if g = next("the start of job-2"); g.start.GetJob().GetJobId() != "job-2" {
		t.Fatalf("after the grant: %+v, want the start of job-2", g)
	}
	if c.Live("n1").LeaseRefreshed.IsZero() {
		t.Fatal("the heartbeat did not refresh the node's lease")
	}

	st.must(t, &storev1.Command{Cmd: &storev1.Command_SetLeasesPaused{SetLeasesPaused: &storev1.SetLeasesPaused{Paused: true, Reason: "maintenance", By: "alice"}}})
	beat <- 43
	for g = next("a paused grant"); g.grant == nil; g = next("a paused grant") {
	}
	if g.grant.GetHeartbeatMonoMs() != 43 || !g.grant.GetPaused() {
		t.Fatalf("grant %v, want heartbeat 43, paused", g.grant)
	}

	st.must(t, &storev1.Command{Cmd: &storev1.Command_SetLeasesPaused{SetLeasesPaused: &storev1.SetLeasesPaused{Paused: false, By: "alice"}}})
	beat <- 44
	for g = next("a grant after the resume"); g.grant == nil; g = next("a grant after the resume") {
	}
	if g.grant.GetHeartbeatMonoMs() != 44 || g.grant.GetPaused() {
		t.Fatalf("grant %v, want heartbeat 44, not paused", g.grant)
	}
}
