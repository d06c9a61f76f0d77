package jobsocket

import (
	"fmt"
	"sync/atomic"

	"connectrpc.com/connect"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/internal/runtime"
	"github.com/norsk-go/norsk-manager/internal/worker/ack"
)

// The handover handshake on the worker: the Manager's migration commands are
// relayed to the instance's job over its job socket, and the job's answers
// are reported back up the NodeController stream (MigrationReport).
//
//	Manager → worker            worker → job        job → worker      worker → Manager
//	migration_get_state         get_state           state             STATE
//	(target's StartInstance)    initial_state                         INITIAL_STATE_DELIVERED
//	                                                ready             TARGET_READY
//	migration_cutover_ready     stop_output_at      stopped_output    SOURCE_STOPPED_OUTPUT
//	migration_cutover_apply     apply_from          applied           TARGET_APPLIED
//	migration_abort             abort               abort             ABORTED
//
// A command is acknowledged once its message has been sent on the job's
// stream, or refused: NOT_FOUND when the worker holds no instance of the key
// under the command's token (0 = whatever it holds), FAILED_PRECONDITION when
// the job is not attached (a get_state for a job that has never attached
// waits for it first, within the attach grace: await.go), the instance is
// in another migration, or the
// command does not fit the instance's part in the migration (INVALID_ARGUMENT
// for a command naming no job, role or migration).
//
// Locking: a source that has answered get_state (state, accepted or
// refused) is locked for that migration: get_state, cutover_ready and
// cutover_apply of any other migration are refused with FAILED_PRECONDITION
// "instance <job>/<role> is already in migration <id> (source,
// stateReported)" until an abort of that migration, or until the instance
// stops. A handover's target (StartInstance.migration_handover) is likewise
// held by its own migration until it reports applied (or is aborted); the
// target of another strategy takes no part (its hello_ack names its
// migration id, with handover unset, and it is sent no initial state). A get_state of a new migration while the previous
// one's was not answered yet replaces it (its late answer is ignored).
//
// Abort is idempotent and always acknowledged: it clears the instance's
// part in that migration and tells the job (at once, or right after its
// next hello_ack when it is not attached). An abort of a migration other
// than the one the instance is in is ignored; one reaching an instance the
// worker knows no migration of (after a worker restart, say: the part in a
// migration is kept in memory only) is passed on to the job, which ignores
// an abort of a migration it is not in. The target's applied is kept in the
// instance record, so that a restarted worker does not hand an applied
// target its initial state again.
//
// A message from the job for a migration other than the instance's current
// one is ignored (and logged).

// side is an instance's part in a migration.
type side int

const (
	sideNone side = iota
	sideSource
	sideTarget
)

func (d side) String() string {
	switch d {
	case sideSource:
		return "source"
	case sideTarget:
		return "target"
	}
	return "none"
}

// stage is how far an instance's part in a migration has come.
type stage string

// A source's stages.
const (
	stageProposed      stage = "proposed"      // get_state sent
	stageStateReported stage = "stateReported" // the job answered: locked
	stageCutoverReady  stage = "cutoverReady"  // stop_output_at sent
	stageStoppedOutput stage = "stoppedOutput" // the job answered
)

// A target's stages.
const (
	stageLaunched       stage = "launched"       // started with the source's state
	stageStateDelivered stage = "stateDelivered" // initial_state sent
	stageReady          stage = "ready"          // the job sent ready
	stageApplying       stage = "applying"       // apply_from sent
	stageAborted        stage = "aborted"        // aborted; the Manager stops it
)

// handover is an instance's part in one migration; the zero value is none.
type handover struct {
	id    string
	side  side
	stage stage
	// toldOn is the job stream the latest cutover message (stop_output_at,
	// apply_from) went to: the same message again (a new primary's
	// AutoManager repeats it after a takeover) is not pushed to that
	// stream twice — the job answers once.
	toldOn *attachment
	// stoppedAt is a source's stopped_output payload, repeated to a
	// repeated cutover-ready.
	stoppedAt []byte
}

// holds reports whether the migration keeps the instance from taking part
// in another: a source once it answered get_state, a target until it is
// aborted.
func (h handover) holds() bool {
	switch h.side {
	case sideSource:
		return h.stage != stageProposed
	case sideTarget:
		return h.stage != stageAborted
	}
	return false
}

// held returns the socket of an instance the worker holds under token (0:
// whatever it holds), or the refusal.
func (m *Sockets) held(key runtime.Key, token uint64) (*jobSocket, *ack.Refusal) {
	rep := m.cfg.Held(key)
	switch {
	case rep == nil:
		return nil, ack.Refuse(connect.CodeNotFound, "no instance %s on this node", key)
	case rep.GetPhase() == managerv1.InstancePhase_INSTANCE_PHASE_STOPPED:
		return nil, ack.Refuse(connect.CodeNotFound, "instance %s has stopped (token %d)", key, rep.GetFencingToken())
	case token != 0 && rep.GetFencingToken() != token:
		return nil, ack.Refuse(connect.CodeNotFound, "instance %s is held under token %d, not %d", key, rep.GetFencingToken(), token)
	}
	s := m.find(key)
	switch {
	case s == nil:
		return nil, ack.Refuse(connect.CodeFailedPrecondition, "instance %s has no job socket (it could not be made: see the worker's log)", key)
	case token != 0 && s.token != token:
		return nil, ack.Refuse(connect.CodeNotFound, "instance %s is held under token %d, not %d", key, s.token, token)
	}
	return s, nil
}

// noSession is the refusal of a command for a job that is not attached.
func (s *jobSocket) noSession() *ack.Refusal {
	return ack.Refuse(connect.CodeFailedPrecondition, "instance %s has no job socket session (is --job-socket on and does the job attach?)", s.key)
}

// lockedFor refuses a command of migration id when the instance takes part
// in another migration that holds it, or is that migration's target; s.mu
// held.
func (s *jobSocket) lockedFor(id string) *ack.Refusal {
	if s.mig.id != "" && s.mig.id != id && s.mig.holds() {
		return ack.Refuse(connect.CodeFailedPrecondition, "instance %s is already in migration %s (%s, %s)", s.key, s.mig.id, s.mig.side, s.mig.stage)
	}
	return nil
}

// told returns what acknowledges a command once its message has been sent
// to the job (or refuses it when the stream ended first).
func (s *jobSocket) told(what string, reply func(*ack.Refusal)) func(error) {
	return func(err error) {
		if err != nil {
			reply(ack.Refuse(connect.CodeFailedPrecondition, "instance %s: the job's stream ended before it was sent %s: %v", s.key, what, err))
			return
		}
		reply(nil)
	}
}

// getState (the propose) asks the source for its state.
func (m *Sockets) GetState(key runtime.Key, token uint64, id string, reply func(*ack.Refusal)) {
	s, e := m.held(key, token)
	if e != nil {
		reply(e)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		reply(ack.Refuse(connect.CodeNotFound, "instance %s has stopped", key))
		return
	case s.mig.side == sideTarget && s.mig.id == id:
		reply(ack.Refuse(connect.CodeFailedPrecondition, "instance %s is the target of migration %s, not its source", key, id))
		return
	}
	if e := s.lockedFor(id); e != nil {
		reply(e)
		return
	}
	if s.att == nil && !s.mayHold() {
		reply(s.noSession())
		return
	}
	if s.mig.side != sideSource || s.mig.id != id {
		s.mig = handover{id: id, side: sideSource, stage: stageProposed}
	}
	if s.att == nil {
		s.hold(id, reply)
		return
	}
	s.log.Info("migration: asking the job for its state", "migration_id", id)
	s.att.push(&managerv1.JobSocketToJob{Msg: &managerv1.JobSocketToJob_GetState{GetState: &managerv1.JobSocketGetState{
		MigrationId: id,
	}}}, s.told("get_state", reply))
}

// cutoverReady tells the source where the target is ready: stop output.
func (m *Sockets) CutoverReady(key runtime.Key, token uint64, id string, payload []byte, reply func(*ack.Refusal)) {
	s, e := m.held(key, token)
	if e != nil {
		reply(e)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		reply(ack.Refuse(connect.CodeNotFound, "instance %s has stopped", key))
		return
	}
	if s.mig.side != sideSource || s.mig.id != id {
		if e := s.lockedFor(id); e != nil {
			reply(e)
			return
		}
		reply(ack.Refuse(connect.CodeFailedPrecondition, "instance %s is not the source of migration %s (it was not asked for its state, or the migration was aborted)", key, id))
		return
	}
	switch {
	case s.mig.stage == stageStoppedOutput:
		// A repeat after the job has answered: the answer again, not the
		// question (the job stopped output once, at one point).
		s.log.Info("migration: cutover-ready again; repeating where the source stopped", "migration_id", id)
		reply(nil)
		stoppedAt := s.mig.stoppedAt
		s.reportLocked(managerv1.MigrationReportKind_MIGRATION_REPORT_KIND_SOURCE_STOPPED_OUTPUT, id, func(r *managerv1.MigrationReport) {
			r.Payload = stoppedAt
		})
		return
	case s.att == nil:
		reply(s.noSession())
		return
	case s.mig.stage == stageCutoverReady && s.mig.toldOn == s.att:
		reply(nil) // told on this stream already: its answer is coming
		return
	}
	s.mig.stage, s.mig.toldOn = stageCutoverReady, s.att
	s.log.Info("migration: telling the source to stop output", "migration_id", id)
	s.att.push(&managerv1.JobSocketToJob{Msg: &managerv1.JobSocketToJob_StopOutputAt{StopOutputAt: &managerv1.JobSocketStopOutputAt{
		MigrationId: id, Payload: payload,
	}}}, s.told("stop_output_at", reply))
}

// cutoverApply tells the target where the source stopped: start output.
func (m *Sockets) CutoverApply(key runtime.Key, token uint64, id string, payload []byte, reply func(*ack.Refusal)) {
	s, e := m.held(key, token)
	if e != nil {
		reply(e)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		reply(ack.Refuse(connect.CodeNotFound, "instance %s has stopped", key))
		return
	case s.appliedID == id:
		// Applied already: nothing more to tell the job, but its answer
		// again (the first may have gone to a Manager that stopped).
		reply(nil)
		summary := s.appliedSummary
		s.reportLocked(managerv1.MigrationReportKind_MIGRATION_REPORT_KIND_TARGET_APPLIED, id, func(r *managerv1.MigrationReport) {
			r.Payload = summary
		})
		return
	case s.mig.side != sideTarget || s.mig.id != id:
		if e := s.lockedFor(id); e != nil {
			reply(e)
			return
		}
		reply(ack.Refuse(connect.CodeFailedPrecondition, "instance %s is not the target of migration %s", key, id))
		return
	case s.mig.stage == stageAborted:
		reply(ack.Refuse(connect.CodeFailedPrecondition, "migration %s was aborted on instance %s", id, key))
		return
	case s.att == nil:
		reply(s.noSession())
		return
	case s.mig.stage == stageApplying && s.mig.toldOn == s.att:
		reply(nil) // told on this stream already: its answer is coming
		return
	}
	s.mig.stage, s.mig.toldOn = stageApplying, s.att
	s.log.Info("migration: telling the target to start output", "migration_id", id)
	s.att.push(&managerv1.JobSocketToJob{Msg: &managerv1.JobSocketToJob_ApplyFrom{ApplyFrom: &managerv1.JobSocketApplyFrom{
		MigrationId: id, Payload: payload,
	}}}, s.told("apply_from", reply))
}

// abort ends migration id on the instance (jobID, role), or on every
// instance of the job the worker holds when role is empty. It is
// acknowledged once every job concerned has been told (or will be, after
// its next attach).
func (m *Sockets) Abort(jobID, role, id, reason string, reply func(*ack.Refusal)) {
	var socks []*jobSocket
	if role == "" {
		socks = m.ofJob(jobID)
	} else if s := m.find(runtime.Key{JobID: jobID, Role: role}); s != nil {
		socks = append(socks, s)
	}
	if len(socks) == 0 {
		m.log.Info("migration abort for an instance without a job socket here; nothing to do", "job", jobID, "role", role, "migration_id", id)
		reply(nil)
		return
	}
	var left atomic.Int32
	left.Store(int32(len(socks)))
	done := func() {
		if left.Add(-1) == 0 {
			reply(nil)
		}
	}
	for _, s := range socks {
		s.abort(id, reason, done)
	}
}

// abort ends migration id on this instance; done runs once (when the job
// has been told, or the abort has been kept for its next attach).
func (s *jobSocket) abort(id, reason string, done func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mig.id != "" && s.mig.id != id {
		s.log.Info("ignoring an abort of another migration than the instance's", "migration_id", id, "current", s.mig.id)
		done()
		return
	}
	if s.mig.id == id {
		if s.mig.side == sideSource {
			s.mig = handover{}
		} else {
			s.mig.stage = stageAborted
		}
	}
	if s.waiting != nil && s.waiting.id == id {
		s.endHold(ack.Refuse(connect.CodeFailedPrecondition, "instance %s: migration %s was aborted before the job attached", s.key, id))
	}
	s.log.Info("migration aborted", "migration_id", id, "reason", reason)
	ab := &managerv1.JobSocketAbortMigration{MigrationId: id, Reason: reason}
	switch {
	case s.closed:
		done()
	case s.att == nil:
		s.pendingAbort = ab
		done()
	default:
		s.att.push(abortToJob(ab), s.abortSent(ab, done))
	}
}

// abortSent keeps an abort that could not be sent for the next attach, then
// runs done (if any).
func (s *jobSocket) abortSent(ab *managerv1.JobSocketAbortMigration, done func()) func(error) {
	return func(err error) {
		if err != nil {
			s.mu.Lock()
			switch {
			case s.closed:
			case s.att != nil && s.att.ctx.Err() == nil:
				s.att.push(abortToJob(ab), s.abortSent(ab, nil))
			default:
				s.pendingAbort = ab
			}
			s.mu.Unlock()
		}
		if done != nil {
			done()
		}
	}
}

// owesInitialState reports whether a new stream of the job is to be sent
// the source's state: a target that has not been aborted and whose ready
// the worker does not have; s.mu held.
func (s *jobSocket) owesInitialState() bool {
	return s.mig.side == sideTarget && (s.mig.stage == stageLaunched || s.mig.stage == stageStateDelivered)
}

// initialStateSent reports INITIAL_STATE_DELIVERED once the initial state
// of migration id has been sent.
func (s *jobSocket) initialStateSent(id string) func(error) {
	return func(err error) {
		if err != nil {
			return // sent again on the next attach
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.mig.side != sideTarget || s.mig.id != id {
			return
		}
		if s.mig.stage != stageLaunched && s.mig.stage != stageStateDelivered {
			return // the job's ready came first, and reported the delivery
		}
		s.deliveredLocked()
	}
}

// deliveredLocked records and reports that the target has its initial
// state; s.mu held.
func (s *jobSocket) deliveredLocked() {
	s.mig.stage = stageStateDelivered
	s.log.Info("migration: initial state delivered to the target", "migration_id", s.mig.id, "bytes", len(s.info.InitialState))
	s.reportLocked(managerv1.MigrationReportKind_MIGRATION_REPORT_KIND_INITIAL_STATE_DELIVERED, s.mig.id, nil)
}

// fromJob handles a message from the job.
func (s *jobSocket) fromJob(att *attachment, msg *managerv1.JobSocketFromJob) {
	var applied string
	s.mu.Lock()
	switch m := msg.GetMsg().(type) {
	case *managerv1.JobSocketFromJob_Hello:
		s.log.Warn("ignoring a second hello on a job socket stream", "stream", att.id)
	case *managerv1.JobSocketFromJob_State:
		id := m.State.GetMigrationId()
		if !s.current(sideSource, id, "state") {
			break
		}
		if s.mig.stage == stageProposed {
			s.mig.stage = stageStateReported
		}
		s.log.Info("migration: the source answered with its state", "migration_id", id, "bytes", len(m.State.GetPayload()), "refused", m.State.GetRefused())
		s.reportLocked(managerv1.MigrationReportKind_MIGRATION_REPORT_KIND_STATE, id, func(r *managerv1.MigrationReport) {
			r.Payload, r.Refused = m.State.GetPayload(), m.State.GetRefused()
		})
	case *managerv1.JobSocketFromJob_Ready:
		id := m.Ready.GetMigrationId()
		if !s.current(sideTarget, id, "ready") {
			break
		}
		if s.mig.stage == stageAborted {
			s.log.Info("ignoring the ready of an aborted migration", "migration_id", id)
			break
		}
		if s.mig.stage == stageLaunched {
			// The ready overtook the delivery's own report: the Manager
			// hears of the delivery first.
			s.deliveredLocked()
		}
		if s.mig.stage != stageApplying {
			s.mig.stage = stageReady
		}
		s.log.Info("migration: the target is ready", "migration_id", id)
		s.reportLocked(managerv1.MigrationReportKind_MIGRATION_REPORT_KIND_TARGET_READY, id, func(r *managerv1.MigrationReport) {
			r.Payload = m.Ready.GetPayload()
		})
	case *managerv1.JobSocketFromJob_StoppedOutput:
		id := m.StoppedOutput.GetMigrationId()
		if !s.current(sideSource, id, "stopped_output") {
			break
		}
		s.mig.stage, s.mig.stoppedAt = stageStoppedOutput, m.StoppedOutput.GetPayload()
		s.log.Info("migration: the source stopped output", "migration_id", id)
		s.reportLocked(managerv1.MigrationReportKind_MIGRATION_REPORT_KIND_SOURCE_STOPPED_OUTPUT, id, func(r *managerv1.MigrationReport) {
			r.Payload = m.StoppedOutput.GetPayload()
		})
	case *managerv1.JobSocketFromJob_Applied:
		id := m.Applied.GetMigrationId()
		if !s.current(sideTarget, id, "applied") {
			break
		}
		if s.mig.stage == stageAborted {
			s.log.Info("ignoring the applied of an aborted migration", "migration_id", id)
			break
		}
		s.log.Info("migration: the target applied the handover", "migration_id", id)
		s.reportLocked(managerv1.MigrationReportKind_MIGRATION_REPORT_KIND_TARGET_APPLIED, id, func(r *managerv1.MigrationReport) {
			r.Payload = m.Applied.GetPayload()
		})
		// The job runs as itself from here on: it may be migrated again.
		s.mig, s.appliedID, s.appliedSummary = handover{}, id, m.Applied.GetPayload()
		s.info.MigrationID, s.info.Handover, s.info.InitialState = "", false, nil
		applied = id
	case *managerv1.JobSocketFromJob_Abort:
		id := m.Abort.GetMigrationId()
		if id == "" || s.mig.id != id {
			s.ignored("abort", id)
			break
		}
		s.log.Info("migration: the job gave the migration up", "migration_id", id, "reason", m.Abort.GetReason())
		s.reportLocked(managerv1.MigrationReportKind_MIGRATION_REPORT_KIND_ABORTED, id, func(r *managerv1.MigrationReport) {
			r.Reason = m.Abort.GetReason()
		})
		if s.mig.side == sideSource {
			s.mig = handover{}
		} else {
			s.mig.stage = stageAborted
		}
	default:
		s.log.Warn("ignoring a job socket message this worker does not know", "type", fmt.Sprintf("%T", m))
	}
	s.mu.Unlock()
	if applied != "" {
		// Kept in the record: a restarted worker does not treat the
		// instance as a target again.
		s.m.cfg.Applied(s.key, s.token, applied)
	}
}

// current reports whether a message of migration id from the job belongs to
// the instance's current migration, in which the instance is want; it logs
// the message as ignored when not. s.mu held.
func (s *jobSocket) current(want side, id, what string) bool {
	if s.mig.side != want || s.mig.id != id || id == "" {
		s.ignored(what, id)
		return false
	}
	return true
}

func (s *jobSocket) ignored(what, id string) {
	s.log.Info("ignoring a job socket message for another migration than the instance's", "message", what,
		"migration_id", id, "current", s.mig.id, "side", s.mig.side)
}

// reportLocked reports a handshake message to the Manager; fill sets the
// kind's fields. s.mu held, so that one instance's reports keep their order.
func (s *jobSocket) reportLocked(kind managerv1.MigrationReportKind, id string, fill func(*managerv1.MigrationReport)) {
	r := &managerv1.MigrationReport{
		JobId: s.key.JobID, Role: s.key.Role, FencingToken: s.token, MigrationId: id, Kind: kind,
	}
	if fill != nil {
		fill(r)
	}
	s.m.cfg.Report(r)
}
