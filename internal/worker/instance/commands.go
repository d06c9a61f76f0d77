package instance

import (
	"errors"
	"fmt"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/internal/runtime"
	"github.com/norsk-go/norsk-manager/internal/worker/ack"
)

var errShuttingDown = ack.Refuse(connect.CodeUnavailable, "the worker is shutting down")

// start runs (or, with defer_start, prepares) an instance under a fencing
// token: an older token than the one held is refused, the same one changes
// nothing, a newer one replaces the held instance.
func (in *instance) start(cmd *managerv1.StartInstance) *ack.Refusal {
	token := cmd.GetFencingToken()
	if token == 0 {
		return ack.Refuse(connect.CodeInvalidArgument, "start of %s carries no fencing token", in.key)
	}
	if rec := in.rec; rec != nil {
		held := rec.token()
		switch {
		case held > token:
			return ack.Refuse(connect.CodeFailedPrecondition, "instance %s: token %d superseded by token %d", in.key, token, held)
		case held == token:
			in.publish()
			return nil
		}
		in.replace(token)
		if in.ctx().Err() != nil {
			return errShuttingDown
		}
	} else if f := in.sup.fenceOf(in.key); token < f {
		return ack.Refuse(connect.CodeFailedPrecondition, "instance %s: token %d superseded by token %d (which has stopped)", in.key, token, f)
	}
	if in.sup.host.Terminating() {
		return ack.Refuse(connect.CodeFailedPrecondition, "the node is terminating")
	}
	rec := newRecord(cmd, in.sup.runtimeName)
	if err := in.save(rec); err != nil {
		in.rec = nil
		return ack.Refuse(connect.CodeInternal, "%v", err)
	}
	in.rec = rec
	if in.unowned != nil {
		// The services of an unreadable record: the start settles them
		// (Prepare keeps those of the same token, replaces older ones).
		in.log.Info("the Manager's start takes over the services of an unreadable record", "token", token)
		in.unowned = nil
	}
	in.sup.noteToken(in.key, token)
	in.resetRun()
	in.phase = managerv1.InstancePhase_INSTANCE_PHASE_PROVISIONED
	in.log.Info("starting instance", "token", token, "defer_start", cmd.GetDeferStart(), "migration_id", cmd.GetMigrationId())

	if _, err := startOrder(rec.job()); err != nil {
		return in.failStart(err)
	}
	in.openJobSocket() // before the services exist: a job dials it at once
	if err := in.prepare(); err != nil {
		if errors.Is(err, errOvertaken) {
			return in.abandonStart()
		}
		return in.failStart(err)
	}
	if cmd.GetDeferStart() {
		in.phase = managerv1.InstancePhase_INSTANCE_PHASE_PREPARED
		in.publish()
		return nil
	}
	if err := in.startAll(); err != nil {
		return in.failStart(err)
	}
	in.phase = managerv1.InstancePhase_INSTANCE_PHASE_RUNNING
	in.publish()
	return nil
}

// replace stops and removes the instance of an older binding before a newer
// one starts; its STOPPED report is sent once.
func (in *instance) replace(newToken uint64) {
	in.log.Info("replacing the instance of an older binding", "token", in.rec.token(), "new_token", newToken)
	if in.rec.Stopped {
		in.sup.host.SendReport(in.report())
	} else {
		in.shutdown(managerv1.StoppingReason_STOPPING_REASON_NODE_STOPPED,
			fmt.Sprintf("superseded by token %d", newToken), DefaultStopGrace, false)
	}
	in.endRun()
}

// failStart handles a start that failed: the instance is reported STOPPING
// (JOB_FAILED) and STOPPED and removed, and the refusal is returned.
func (in *instance) failStart(err error) *ack.Refusal {
	if in.ctx().Err() != nil {
		return errShuttingDown
	}
	if errors.Is(err, runtime.ErrSuperseded) {
		// The runtime holds a newer binding of the key than any this
		// worker acted on: it is not ours to remove.
		in.log.Warn("the runtime holds a newer binding of the instance", "err", err)
		in.forget()
		return ack.Refuse(connect.CodeFailedPrecondition, "%v", err)
	}
	in.log.Warn("instance failed to start", "err", err)
	in.shutdown(managerv1.StoppingReason_STOPPING_REASON_JOB_FAILED, err.Error(), DefaultStopGrace, true)
	code := connect.CodeInternal
	if errors.Is(err, runtime.ErrImageNotFound) || errors.Is(err, runtime.ErrImagePull) || errors.Is(err, runtime.ErrInvalidSpec) {
		code = connect.CodeFailedPrecondition
	}
	return ack.Refuse(code, "%s", err.Error())
}

// startPrepared starts the services of a prepared instance.
func (in *instance) startPrepared(cmd *managerv1.StartPreparedInstance) *ack.Refusal {
	if in.rec == nil {
		return ack.Refuse(connect.CodeNotFound, "no instance %s on this node", in.key)
	}
	if held := in.rec.token(); cmd.GetFencingToken() != held {
		return ack.Refuse(connect.CodeFailedPrecondition, "instance %s holds token %d, not %d", in.key, held, cmd.GetFencingToken())
	}
	switch in.phase {
	case managerv1.InstancePhase_INSTANCE_PHASE_RUNNING:
		in.publish()
		return nil
	case managerv1.InstancePhase_INSTANCE_PHASE_PREPARED:
	default:
		return ack.Refuse(connect.CodeFailedPrecondition, "instance %s is %s, not prepared", in.key, phaseName(in.phase))
	}
	in.rec.Desired = desiredRunning
	if err := in.save(in.rec); err != nil {
		in.rec.Desired = desiredPrepared
		return ack.Refuse(connect.CodeInternal, "%v", err)
	}
	in.log.Info("starting prepared instance", "token", in.rec.token())
	// Prepare again (idempotent): an update may have added services.
	if err := in.prepare(); err != nil {
		if errors.Is(err, errOvertaken) {
			return in.abandonStart()
		}
		return in.failStart(err)
	}
	if err := in.startAll(); err != nil {
		return in.failStart(err)
	}
	in.phase = managerv1.InstancePhase_INSTANCE_PHASE_RUNNING
	in.publish()
	return nil
}

// stopCommand stops the instance. A held token newer than the stop's means
// the instance it names is not here: nothing to do. An unknown key is
// reported STOPPED so that the Manager can close its books; services of the
// key kept for an unreadable record (unowned) are stopped and removed first,
// unless they carry a newer token than the stop's.
func (in *instance) stopCommand(cmd *managerv1.StopInstance) *ack.Refusal {
	if in.rec == nil {
		if in.unowned != nil && !unownedNewer(in.unowned, cmd.GetFencingToken()) {
			grace := time.Duration(cmd.GetGraceMs()) * time.Millisecond
			if grace <= 0 {
				grace = DefaultStopGrace
			}
			in.log.Info("stopping the services of an unreadable record, as the Manager asks", "reason", cmd.GetReason())
			in.removeServices(in.unowned, grace)
			if in.ctx().Err() != nil {
				return errShuttingDown
			}
			in.unowned = nil
		}
		in.sup.host.SendReport(&managerv1.InstanceReport{
			JobId:            in.key.JobID,
			Role:             in.key.Role,
			FencingToken:     cmd.GetFencingToken(),
			Phase:            managerv1.InstancePhase_INSTANCE_PHASE_STOPPED,
			Reason:           cmd.GetReason(),
			AdditionalReason: cmd.GetAdditionalReason(),
		})
		return nil
	}
	if t := cmd.GetFencingToken(); t != 0 && in.rec.token() > t {
		return nil
	}
	if in.rec.Stopped {
		in.publish()
		return nil
	}
	grace := time.Duration(cmd.GetGraceMs()) * time.Millisecond
	if grace <= 0 {
		grace = DefaultStopGrace
	}
	in.shutdown(cmd.GetReason(), cmd.GetAdditionalReason(), grace, true)
	if in.ctx().Err() != nil {
		return errShuttingDown
	}
	return nil
}

// update keeps a new job spec for the instance's later restarts; running
// services are not recreated.
func (in *instance) update(cmd *managerv1.UpdateInstance) *ack.Refusal {
	if in.rec == nil {
		return ack.Refuse(connect.CodeNotFound, "no instance %s on this node", in.key)
	}
	if held := in.rec.token(); cmd.GetFencingToken() != held {
		return ack.Refuse(connect.CodeFailedPrecondition, "instance %s holds token %d, not %d", in.key, held, cmd.GetFencingToken())
	}
	if in.rec.Stopped {
		return ack.Refuse(connect.CodeFailedPrecondition, "instance %s has stopped", in.key)
	}
	if _, err := startOrder(cmd.GetJob()); err != nil {
		return ack.Refuse(connect.CodeInvalidArgument, "%v", err)
	}
	old := in.rec.start.Job
	in.rec.start.Job = proto.Clone(cmd.GetJob()).(*managerv1.Job)
	if err := in.save(in.rec); err != nil {
		in.rec.start.Job = old
		return ack.Refuse(connect.CodeInternal, "%v", err)
	}
	in.log.Info("job spec updated", "job_hash", cmd.GetJob().GetCurrentHash())
	in.publish()
	return nil
}

// unownedNewer reports whether any of sts carries a newer token than a
// stop's (0: a stop of whatever runs).
func unownedNewer(sts []runtime.ServiceStatus, token uint64) bool {
	if token == 0 {
		return false
	}
	for _, st := range sts {
		if st.Token > token {
			return true
		}
	}
	return false
}

func phaseName(p managerv1.InstancePhase) string { return p.String() }
