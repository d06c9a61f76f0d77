package worker

import (
	"context"
	"log/slog"
	"sync"

	"connectrpc.com/connect"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/internal/clock"
	"github.com/norsk-go/norsk-manager/internal/runtime"
	"github.com/norsk-go/norsk-manager/internal/worker/ack"
)

// supervisor holds the instances and routes events to them. Each instance
// has one goroutine (its actor) that handles its events in order; the
// actor exists while the instance has a record or events to handle.
type supervisor struct {
	a       *Agent
	ctx     context.Context // Run's
	rt      runtime.Runtime
	clock   clock.Clock
	log     *slog.Logger
	records *recordStore
	nodeID  string

	mu     sync.Mutex
	insts  map[runtime.Key]*instance
	closed bool
	// fence is the newest token this worker process has accepted per key,
	// kept after the instance is gone so that a late start of an older
	// binding is still refused.
	fence map[runtime.Key]uint64
	// protected are the instances of lease-protected jobs that have not
	// stopped (lease.go).
	protected map[runtime.Key]bool
}

// noteToken raises the fence of key to token.
func (s *supervisor) noteToken(key runtime.Key, token uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if token > s.fence[key] {
		s.fence[key] = token
	}
}

// fenceOf is the newest token accepted for key (0: none).
func (s *supervisor) fenceOf(key runtime.Key) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fence[key]
}

func newSupervisor(a *Agent, ctx context.Context, rt runtime.Runtime) *supervisor {
	return &supervisor{
		a:       a,
		ctx:     ctx,
		rt:      rt,
		clock:   a.clock,
		log:     a.logger(),
		records: a.records,
		nodeID:  a.NodeID(),
		insts:   map[runtime.Key]*instance{},
		fence:   map[runtime.Key]uint64{},

		protected: map[runtime.Key]bool{},
	}
}

// dispatch hands ev to the instance of key, creating its actor if needed.
// False once the supervisor is closed.
func (s *supervisor) dispatch(key runtime.Key, ev event) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.instanceLocked(key).enqueue(ev)
	return true
}

// instanceLocked returns the instance of key, starting its actor if there
// is none; s.mu held.
func (s *supervisor) instanceLocked(key runtime.Key) *instance {
	in := s.insts[key]
	if in == nil {
		in = newInstance(s, key)
		s.insts[key] = in
		s.a.goOwned(in.run)
	}
	return in
}

// retire removes an instance that holds nothing once its queue is empty;
// true if the actor must end.
func (s *supervisor) retire(in *instance) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	in.mu.Lock()
	defer in.mu.Unlock()
	if len(in.queue) > 0 || s.insts[in.key] != in {
		return false
	}
	delete(s.insts, in.key)
	return true
}

// close refuses further dispatches (Run is ending).
func (s *supervisor) close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
}

// stopAll stops every instance and waits until they have stopped (or ctx
// ends).
func (s *supervisor) stopAll(ctx context.Context, reason managerv1.StoppingReason, additional string) {
	s.mu.Lock()
	var dones []chan struct{}
	for _, in := range s.insts {
		done := make(chan struct{})
		in.enqueue(stopEvent{reason: reason, additional: additional, done: done})
		dones = append(dones, done)
	}
	s.mu.Unlock()
	for _, d := range dones {
		select {
		case <-d:
		case <-ctx.Done():
			return
		}
	}
}

// onCommand routes a command from a Control stream. Its acknowledgement is
// queued on that stream once the command has been acted on.
func (a *Agent) onCommand(sess *session, msg *managerv1.ControllerMessage) {
	seq := msg.GetSeq()
	reply := func(e *ack.Refusal) { sess.enqueue(ack.Message(seq, e)) }
	var key runtime.Key
	switch m := msg.GetMsg().(type) {
	case *managerv1.ControllerMessage_Start:
		key = runtime.Key{JobID: m.Start.GetJob().GetJobId(), Role: m.Start.GetRole()}
	case *managerv1.ControllerMessage_StartPrepared:
		key = runtime.Key{JobID: m.StartPrepared.GetJobId(), Role: m.StartPrepared.GetRole()}
	case *managerv1.ControllerMessage_Stop:
		key = runtime.Key{JobID: m.Stop.GetJobId(), Role: m.Stop.GetRole()}
	case *managerv1.ControllerMessage_Update:
		key = runtime.Key{JobID: m.Update.GetJob().GetJobId(), Role: m.Update.GetRole()}
	case *managerv1.ControllerMessage_Terminate:
		a.shutdownNode(sess, seq, m.Terminate.GetReason(), m.Terminate.GetDeregistered())
		return
	case *managerv1.ControllerMessage_DiscoveryAccess:
		a.onDiscoveryAccess(sess, seq, m.DiscoveryAccess)
		return
	case *managerv1.ControllerMessage_AccessReplica:
		a.onAccessReplica(sess, seq, m.AccessReplica)
		return
	case *managerv1.ControllerMessage_ControlPlanes:
		a.onControlPlanes(sess, seq, m.ControlPlanes)
		return
	case *managerv1.ControllerMessage_PrefetchImages:
		a.onPrefetch(sess, seq, m.PrefetchImages) // images.go
		return
	case *managerv1.ControllerMessage_Recorded:
		a.onRecorded(m.Recorded) // not acknowledged
		return
	case *managerv1.ControllerMessage_Lease:
		a.onLeaseGrant(m.Lease) // not acknowledged (lease.go)
		return
	case *managerv1.ControllerMessage_MigrationGetState, *managerv1.ControllerMessage_MigrationCutoverReady,
		*managerv1.ControllerMessage_MigrationCutoverApply, *managerv1.ControllerMessage_MigrationAbort:
		a.onMigrationCommand(sess, msg) // relayed to the job socket (jobsockets.go)
		return
	case *managerv1.ControllerMessage_Hello:
		reply(ack.Refuse(connect.CodeInvalidArgument, "hello was already received on this stream"))
		return
	default:
		reply(ack.Refuse(connect.CodeInvalidArgument, "unknown command %T", m))
		return
	}
	if key.JobID == "" || key.Role == "" {
		reply(ack.Refuse(connect.CodeInvalidArgument, "the command names no job id or no role"))
		return
	}
	if !a.sup.dispatch(key, commandEvent{msg: msg, reply: reply}) {
		reply(ack.Refuse(connect.CodeUnavailable, "the worker is shutting down"))
	}
}
