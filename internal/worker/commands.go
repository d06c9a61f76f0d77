package worker

import (
	"connectrpc.com/connect"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/internal/runtime"
	"github.com/norsk-go/norsk-manager/internal/worker/ack"
)

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
		a.onPrefetch(a.runCtx, sess, seq, m.PrefetchImages) // images.go
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
	if !a.sup.Command(key, msg, reply) {
		reply(ack.Refuse(connect.CodeUnavailable, "the worker is shutting down"))
	}
}
