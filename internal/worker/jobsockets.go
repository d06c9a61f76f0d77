package worker

import (
	"connectrpc.com/connect"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/internal/runtime"
	"github.com/norsk-go/norsk-manager/internal/worker/ack"
	"github.com/norsk-go/norsk-manager/internal/worker/jobsocket"
	jsapi "github.com/norsk-go/norsk-manager/pkg/jobsocket"
)

// The agent's side of the job sockets (Config.JobSocket): the capability it
// advertises, the socket paths it tells, and the Manager's migration
// commands it routes to the sockets (internal/worker/jobsocket holds the
// sockets and the handshake relay).

// withJobSocketCapability returns caps without any entry named
// jsapi.Capability, plus that capability (count 1) when on: the worker
// advertises it exactly when it serves job sockets.
func withJobSocketCapability(caps []*managerv1.Capability, on bool) []*managerv1.Capability {
	out := make([]*managerv1.Capability, 0, len(caps)+1)
	for _, c := range caps {
		if c.GetName() != jsapi.Capability {
			out = append(out, c)
		}
	}
	if on {
		out = append(out, &managerv1.Capability{Name: jsapi.Capability, Count: 1})
	}
	return out
}

// JobSocketPath is the host path of the job socket of (jobID, role), ""
// when the worker serves no job sockets. Valid once Ready is closed.
func (a *Agent) JobSocketPath(jobID, role string) string {
	if a.js == nil {
		return ""
	}
	return a.js.Path(runtime.Key{JobID: jobID, Role: role})
}

// onMigrationCommand handles a migration command from a Control stream; its
// acknowledgement is queued on that stream.
func (a *Agent) onMigrationCommand(sess *session, msg *managerv1.ControllerMessage) {
	seq := msg.GetSeq()
	log := a.logger()
	reply := func(e *ack.Refusal) {
		if e != nil {
			log.Info("migration command refused", "seq", seq, "code", e.CodeName(), "err", e.Msg)
		}
		sess.enqueue(ack.Message(seq, e))
	}
	if a.js == nil {
		reply(ack.Refuse(connect.CodeFailedPrecondition, "this worker serves no job sockets (start it with --job-socket)"))
		return
	}
	switch m := msg.GetMsg().(type) {
	case *managerv1.ControllerMessage_MigrationGetState:
		c := m.MigrationGetState
		if e := checkMigrationCommand(c.GetJobId(), c.GetRole(), c.GetMigrationId()); e != nil {
			reply(e)
			return
		}
		a.js.GetState(runtime.Key{JobID: c.GetJobId(), Role: c.GetRole()}, c.GetFencingToken(), c.GetMigrationId(), reply)
	case *managerv1.ControllerMessage_MigrationCutoverReady:
		c := m.MigrationCutoverReady
		if e := checkMigrationCommand(c.GetJobId(), c.GetRole(), c.GetMigrationId()); e != nil {
			reply(e)
			return
		}
		a.js.CutoverReady(runtime.Key{JobID: c.GetJobId(), Role: c.GetRole()}, c.GetFencingToken(), c.GetMigrationId(), c.GetPayload(), reply)
	case *managerv1.ControllerMessage_MigrationCutoverApply:
		c := m.MigrationCutoverApply
		if e := checkMigrationCommand(c.GetJobId(), c.GetRole(), c.GetMigrationId()); e != nil {
			reply(e)
			return
		}
		a.js.CutoverApply(runtime.Key{JobID: c.GetJobId(), Role: c.GetRole()}, c.GetFencingToken(), c.GetMigrationId(), c.GetPayload(), reply)
	case *managerv1.ControllerMessage_MigrationAbort:
		c := m.MigrationAbort
		if c.GetJobId() == "" || c.GetMigrationId() == "" {
			reply(ack.Refuse(connect.CodeInvalidArgument, "the migration abort names no job id or no migration id"))
			return
		}
		a.js.Abort(c.GetJobId(), c.GetRole(), c.GetMigrationId(), c.GetReason(), reply)
	}
}

func checkMigrationCommand(jobID, role, migrationID string) *ack.Refusal {
	if jobID == "" || role == "" || migrationID == "" {
		return ack.Refuse(connect.CodeInvalidArgument, "the migration command names no job id, role or migration id")
	}
	return nil
}

// newJobSockets makes the job sockets of Config.JobSocket.
func (a *Agent) newJobSockets() (*jobsocket.Sockets, error) {
	return jobsocket.New(jobsocket.Config{
		Dir:     a.cfg.JobSocketDir,
		DataDir: a.cfg.DataDir,
		Mounted: a.runtimeName == "docker",
		Log:     a.logger(),
		NodeID:  a.NodeID,
		Held: func(key runtime.Key) *managerv1.InstanceReport {
			a.pubMu.Lock()
			defer a.pubMu.Unlock()
			if snap := a.snaps[key]; snap != nil {
				return snap.report
			}
			return nil
		},
		Applied: func(key runtime.Key, token uint64, migrationID string) {
			a.sup.HandoverApplied(key, token, migrationID)
		},
		Report:      a.reportMigration,
		AttachGrace: a.cfg.JobSocketAttachGrace,
		Clock:       a.cfg.Clock,
	})
}
