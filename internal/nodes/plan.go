package nodes

import (
	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/internal/store/state"
)

// held is what the worker last said it holds under a key.
type held struct {
	token   uint64
	phase   managerv1.InstancePhase
	jobHash uint64
}

// actionKind is the command an action sends.
type actionKind int

const (
	actStart actionKind = iota + 1
	actStartPrepared
	actStop
	actUpdate
)

func (k actionKind) String() string {
	switch k {
	case actStart:
		return "start"
	case actStartPrepared:
		return "start-prepared"
	case actStop:
		return "stop"
	case actUpdate:
		return "update"
	case actDiscovery:
		return "discovery-access"
	case actAccessReplica:
		return "access-replica"
	case actControlPlanes:
		return "control-planes"
	}
	return "?"
}

// action is one command to send to a worker.
type action struct {
	kind  actionKind
	key   string // state.InstanceID(job, role)
	token uint64
	msg   *managerv1.ControllerMessage
}

// Plan computes the commands that make a worker hold what the store says.
// insts are the instances the store binds to the node; jobOf returns a job's
// current spec (nil once deleted); wv is what the worker holds, by
// state.InstanceID. Plan is pure.
func Plan(insts []*managerv1.Instance, jobOf func(id string) *managerv1.Job, wv map[string]held) []action {
	var out []action
	bound := map[string]bool{}
	for _, in := range insts {
		key := state.InstanceID(in.GetJobId(), in.GetRole())
		w, has := wv[key]
		same := has && w.token == in.GetFencingToken()
		live := has && w.phase != managerv1.InstancePhase_INSTANCE_PHASE_STOPPED
		if same {
			bound[key] = true
		}
		switch in.GetDesired() {
		case managerv1.InstanceDesired_INSTANCE_DESIRED_RUNNING, managerv1.InstanceDesired_INSTANCE_DESIRED_PREPARED:
			prepared := in.GetDesired() == managerv1.InstanceDesired_INSTANCE_DESIRED_PREPARED
			switch {
			case same && w.phase == managerv1.InstancePhase_INSTANCE_PHASE_STOPPED:
				// The worker reported it stopped; the store will follow.
			case same && !prepared && w.phase == managerv1.InstancePhase_INSTANCE_PHASE_PREPARED:
				out = append(out, startPrepared(in))
			case same && !prepared && w.phase == managerv1.InstancePhase_INSTANCE_PHASE_RUNNING:
				if job := jobOf(in.GetJobId()); job != nil && job.GetCurrentHash() != w.jobHash && w.jobHash != 0 {
					out = append(out, update(in, job))
				}
			case same:
			case has && w.token > in.GetFencingToken():
				// The worker holds a newer binding than this store knows of
				// (a store restored from an older backup): leave it alone.
			default:
				if job := jobOf(in.GetJobId()); job != nil {
					out = append(out, start(in, job, prepared))
				}
			}
		case managerv1.InstanceDesired_INSTANCE_DESIRED_STOPPED:
			switch {
			case same && live:
				out = append(out, stop(key, in.GetJobId(), in.GetRole(), in.GetFencingToken(), in.GetStopGraceMs(), in.GetStopReason(), in.GetStopAdditionalReason()))
			case in.GetPhase() != managerv1.InstancePhase_INSTANCE_PHASE_STOPPED && !same && !(has && w.token > in.GetFencingToken()):
				// The worker does not hold it: a stop closes the books (the
				// worker answers with a stopped report for the key).
				out = append(out, stop(key, in.GetJobId(), in.GetRole(), in.GetFencingToken(), in.GetStopGraceMs(), in.GetStopReason(), in.GetStopAdditionalReason()))
				bound[key] = true
			}
		}
	}
	// Whatever the worker runs that the store does not bind to this node
	// under that token has been superseded: stop it.
	for key, w := range wv {
		if bound[key] || w.phase == managerv1.InstancePhase_INSTANCE_PHASE_STOPPED {
			continue
		}
		if in := findInstance(insts, key); in != nil && in.GetFencingToken() < w.token {
			continue // newer than the store knows; see above
		}
		jobID, role := splitKey(key)
		out = append(out, stop(key, jobID, role, w.token, 0,
			managerv1.StoppingReason_STOPPING_REASON_UNKNOWN_JOB, "superseded: the Manager no longer binds this instance to this node"))
	}
	return out
}

func findInstance(insts []*managerv1.Instance, key string) *managerv1.Instance {
	for _, in := range insts {
		if state.InstanceID(in.GetJobId(), in.GetRole()) == key {
			return in
		}
	}
	return nil
}

func splitKey(key string) (jobID, role string) {
	for i := 0; i < len(key); i++ {
		if key[i] == 0 {
			return key[:i], key[i+1:]
		}
	}
	return key, ""
}

func start(in *managerv1.Instance, job *managerv1.Job, deferStart bool) action {
	return action{kind: actStart, key: state.InstanceID(in.GetJobId(), in.GetRole()), token: in.GetFencingToken(),
		msg: &managerv1.ControllerMessage{Msg: &managerv1.ControllerMessage_Start{Start: &managerv1.StartInstance{
			Job:                   job,
			Role:                  in.GetRole(),
			RuntimeRole:           in.GetRuntimeRole(),
			FencingToken:          in.GetFencingToken(),
			DeferStart:            deferStart,
			MigrationId:           in.GetMigrationId(),
			MigrationInitialState: in.GetMigrationInitialState(),
			MigrationHandover:     in.GetMigrationHandover(),
		}}}}
}

func startPrepared(in *managerv1.Instance) action {
	return action{kind: actStartPrepared, key: state.InstanceID(in.GetJobId(), in.GetRole()), token: in.GetFencingToken(),
		msg: &managerv1.ControllerMessage{Msg: &managerv1.ControllerMessage_StartPrepared{StartPrepared: &managerv1.StartPreparedInstance{
			JobId: in.GetJobId(), Role: in.GetRole(), FencingToken: in.GetFencingToken(),
		}}}}
}

func stop(key, jobID, role string, token uint64, graceMs uint32, reason managerv1.StoppingReason, why string) action {
	return action{kind: actStop, key: key, token: token,
		msg: &managerv1.ControllerMessage{Msg: &managerv1.ControllerMessage_Stop{Stop: &managerv1.StopInstance{
			JobId: jobID, Role: role, FencingToken: token, GraceMs: graceMs, Reason: reason, AdditionalReason: why,
		}}}}
}

func update(in *managerv1.Instance, job *managerv1.Job) action {
	return action{kind: actUpdate, key: state.InstanceID(in.GetJobId(), in.GetRole()), token: in.GetFencingToken(),
		msg: &managerv1.ControllerMessage{Msg: &managerv1.ControllerMessage_Update{Update: &managerv1.UpdateInstance{
			Job: job, Role: in.GetRole(), FencingToken: in.GetFencingToken(),
		}}}}
}
