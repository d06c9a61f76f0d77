package sim

import (
	"fmt"
	"strings"
	"time"

	"connectrpc.com/connect"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
)

// onCommand acts on one message from the Manager, as a worker would, with
// nothing behind the instances: starts and stops take effect at once (a
// start after Config.StartDelay).
func (n *node) onCommand(sess *session, msg *managerv1.ControllerMessage) {
	seq := msg.GetSeq()
	ack := func(code connect.Code, format string, args ...any) {
		a := &managerv1.CommandAck{Seq: seq}
		if format != "" {
			a.Error = fmt.Sprintf(format, args...)
			a.ErrorCode = strings.ToUpper(code.String())
		}
		sess.enqueue(&managerv1.WorkerMessage{Msg: &managerv1.WorkerMessage_Ack{Ack: a}})
	}
	ok := func() { ack(0, "") }
	n.mu.Lock()
	defer n.mu.Unlock()
	switch m := msg.GetMsg().(type) {
	case *managerv1.ControllerMessage_Start:
		n.start(sess, m.Start, ack)
	case *managerv1.ControllerMessage_StartPrepared:
		k := instKey{m.StartPrepared.GetJobId(), m.StartPrepared.GetRole()}
		in := n.insts[k]
		switch {
		case in == nil:
			ack(connect.CodeNotFound, "no instance %s on this node", k)
		case in.token != m.StartPrepared.GetFencingToken():
			ack(connect.CodeFailedPrecondition, "instance %s holds token %d, not %d", k, in.token, m.StartPrepared.GetFencingToken())
		case in.phase == managerv1.InstancePhase_INSTANCE_PHASE_RUNNING:
			n.publishLocked(k, in)
			ok()
		case in.phase != managerv1.InstancePhase_INSTANCE_PHASE_PREPARED:
			ack(connect.CodeFailedPrecondition, "instance %s is %s, not prepared", k, in.phase)
		default:
			n.setPhase(in, managerv1.InstancePhase_INSTANCE_PHASE_RUNNING)
			n.publishLocked(k, in)
			ok()
		}
	case *managerv1.ControllerMessage_Stop:
		n.stop(m.Stop)
		ok()
	case *managerv1.ControllerMessage_Update:
		k := instKey{m.Update.GetJob().GetJobId(), m.Update.GetRole()}
		in := n.insts[k]
		switch {
		case in == nil:
			ack(connect.CodeNotFound, "no instance %s on this node", k)
		case in.token != m.Update.GetFencingToken():
			ack(connect.CodeFailedPrecondition, "instance %s holds token %d, not %d", k, in.token, m.Update.GetFencingToken())
		case in.phase == managerv1.InstancePhase_INSTANCE_PHASE_STOPPED:
			ack(connect.CodeFailedPrecondition, "instance %s has stopped", k)
		default:
			in.jobHash = m.Update.GetJob().GetCurrentHash()
			n.publishLocked(k, in)
			ok()
		}
	case *managerv1.ControllerMessage_Terminate:
		for k, in := range n.insts {
			if in.phase != managerv1.InstancePhase_INSTANCE_PHASE_STOPPED {
				in.reason, in.addl = managerv1.StoppingReason_STOPPING_REASON_NODE_TERMINATED, m.Terminate.GetReason()
				n.setPhase(in, managerv1.InstancePhase_INSTANCE_PHASE_STOPPED)
				n.publishLocked(k, in)
			}
		}
		ok()
	case *managerv1.ControllerMessage_DiscoveryAccess, *managerv1.ControllerMessage_AccessReplica,
		*managerv1.ControllerMessage_ControlPlanes:
		ok()
	case *managerv1.ControllerMessage_PrefetchImages:
		ok()
		out := &managerv1.ImagesPrefetched{RequestId: m.PrefetchImages.GetRequestId()}
		for _, ref := range m.PrefetchImages.GetImageRefs() {
			out.Results = append(out.Results, &managerv1.ImagePrefetchResult{Ref: ref,
				Outcome: managerv1.ImagePrefetchOutcome_IMAGE_PREFETCH_OUTCOME_FAILED, Error: "a simulated node has no image engine"})
		}
		sess.enqueue(&managerv1.WorkerMessage{Msg: &managerv1.WorkerMessage_Prefetched{Prefetched: out}})
	case *managerv1.ControllerMessage_Recorded:
		for _, r := range m.Recorded.GetReports() {
			k := instKey{r.GetJobId(), r.GetRole()}
			if in := n.insts[k]; in != nil && in.phase == managerv1.InstancePhase_INSTANCE_PHASE_STOPPED && in.token == r.GetFencingToken() {
				n.fence[k] = max(n.fence[k], in.token)
				delete(n.insts, k)
			}
		}
	case *managerv1.ControllerMessage_Lease:
		// Leases protect nothing here: no instance runs anything.
	case *managerv1.ControllerMessage_MigrationAbort:
		ok()
	case *managerv1.ControllerMessage_MigrationGetState, *managerv1.ControllerMessage_MigrationCutoverReady,
		*managerv1.ControllerMessage_MigrationCutoverApply:
		ack(connect.CodeFailedPrecondition, "a simulated instance has no job socket session")
	case *managerv1.ControllerMessage_Hello:
		ack(connect.CodeInvalidArgument, "hello was already received on this stream")
	default:
		ack(connect.CodeInvalidArgument, "unknown command %T", m)
	}
}

// start starts an instance under a fencing token: an older token than the
// one held is refused, the same one changes nothing, a newer one replaces
// the held instance (whose STOPPED report is sent first).
func (n *node) start(sess *session, cmd *managerv1.StartInstance, ack func(connect.Code, string, ...any)) {
	k := instKey{cmd.GetJob().GetJobId(), cmd.GetRole()}
	token := cmd.GetFencingToken()
	if k.job == "" || k.role == "" {
		ack(connect.CodeInvalidArgument, "the command names no job id or no role")
		return
	}
	if token == 0 {
		ack(connect.CodeInvalidArgument, "start of %s carries no fencing token", k)
		return
	}
	if in := n.insts[k]; in != nil {
		switch {
		case in.token > token:
			ack(connect.CodeFailedPrecondition, "instance %s: token %d superseded by token %d", k, token, in.token)
			return
		case in.token == token:
			n.publishLocked(k, in)
			ack(0, "")
			return
		}
		if in.phase != managerv1.InstancePhase_INSTANCE_PHASE_STOPPED {
			in.reason, in.addl = managerv1.StoppingReason_STOPPING_REASON_NODE_STOPPED, fmt.Sprintf("superseded by token %d", token)
			n.setPhase(in, managerv1.InstancePhase_INSTANCE_PHASE_STOPPED)
		}
		n.publishLocked(k, in)
	} else if f := n.fence[k]; token < f {
		ack(connect.CodeFailedPrecondition, "instance %s: token %d superseded by token %d (which has stopped)", k, token, f)
		return
	}
	n.f.starts.add(k, token, n.id)
	in := &instance{token: token, jobHash: cmd.GetJob().GetCurrentHash(), phase: managerv1.InstancePhase_INSTANCE_PHASE_PROVISIONED}
	n.insts[k] = in
	final := managerv1.InstancePhase_INSTANCE_PHASE_RUNNING
	if cmd.GetDeferStart() {
		final = managerv1.InstancePhase_INSTANCE_PHASE_PREPARED
	}
	finish := func() {
		n.setPhase(in, final)
		n.publishLocked(k, in)
		ack(0, "")
	}
	if d := n.f.cfg.StartDelay; d > 0 {
		// The start takes d, as a real one takes its image pull and its
		// services' start: the report and the acknowledgement come then.
		time.AfterFunc(d, func() {
			n.mu.Lock()
			defer n.mu.Unlock()
			if n.insts[k] == in && in.phase == managerv1.InstancePhase_INSTANCE_PHASE_PROVISIONED {
				finish()
			}
		})
		return
	}
	finish()
}

// stop stops an instance: STOPPING, then STOPPED at once, kept as a
// tombstone until the Manager says it has recorded it. An unknown key is
// reported STOPPED so that the Manager can close its books.
func (n *node) stop(cmd *managerv1.StopInstance) {
	k := instKey{cmd.GetJobId(), cmd.GetRole()}
	in := n.insts[k]
	if in == nil {
		n.sendLocked(&managerv1.InstanceReport{JobId: k.job, Role: k.role, FencingToken: cmd.GetFencingToken(),
			Phase: managerv1.InstancePhase_INSTANCE_PHASE_STOPPED, Reason: cmd.GetReason(), AdditionalReason: cmd.GetAdditionalReason()})
		return
	}
	if t := cmd.GetFencingToken(); t != 0 && in.token > t {
		return
	}
	if in.phase == managerv1.InstancePhase_INSTANCE_PHASE_STOPPED {
		n.publishLocked(k, in)
		return
	}
	in.reason, in.addl = cmd.GetReason(), cmd.GetAdditionalReason()
	n.setPhase(in, managerv1.InstancePhase_INSTANCE_PHASE_STOPPING)
	n.publishLocked(k, in)
	n.setPhase(in, managerv1.InstancePhase_INSTANCE_PHASE_STOPPED)
	n.publishLocked(k, in)
}
