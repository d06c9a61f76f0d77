package automanager

import (
	"context"
	"errors"
	"strings"
	"time"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

// onEvent is the saga's intake from the event stream: the job history of
// migrating instances (keyed by the entry's role, the instance key, which
// tells the target's running from the source's) and the handshake events.
// Run's goroutine calls it.
func (s *Saga) onEvent(ctx context.Context, ev *managerv1.Event) {
	switch k := ev.GetKind().(type) {
	case *managerv1.Event_JobUpdated:
		if e := k.JobUpdated.GetEntry(); e != nil {
			s.onHistory(ctx, k.JobUpdated.GetJob().GetJob().GetJobId(), e)
		}
	case *managerv1.Event_MigrationState:
		s.onState(ctx, k.MigrationState)
	case *managerv1.Event_MigrationInitialStateDelivered:
		s.onInitialStateDelivered(ctx, k.MigrationInitialStateDelivered)
	case *managerv1.Event_MigrationTargetReady:
		s.onTargetReady(ctx, k.MigrationTargetReady)
	case *managerv1.Event_MigrationSourceStoppedOutput:
		s.onSourceStoppedOutput(ctx, k.MigrationSourceStoppedOutput)
	case *managerv1.Event_MigrationTargetApplied:
		s.onTargetApplied(ctx, k.MigrationTargetApplied)
	case *managerv1.Event_MigrationAborted:
		s.onWorkerAbort(ctx, k.MigrationAborted)
	case *managerv1.Event_MigrationForgotten:
		for _, id := range k.MigrationForgotten.GetMigrationIds() {
			if m := s.migs[id]; m != nil && terminal(m.st.GetPhase()) {
				delete(s.migs, id)
			}
		}
	case *managerv1.Event_JobDeleted:
		if id := s.byJob[k.JobDeleted.GetJobId()]; id != "" {
			s.performAbort(ctx, s.migs[id], "the job was deleted", true)
		}
	case *managerv1.Event_NodeLost:
		s.onNodeLost(ctx, k.NodeLost.GetNode().GetNodeId())
	}
}

// onNodeLost: a source told to stop (stoppingSource) whose node is then
// lost will never report stopped — its worker is gone, and its instance,
// already stopping, gets no new history entry from the loss. The
// migration proceeds as if it had stopped, at once rather than at the
// phase's deadline. (Instances of a lost node that were not stopping get
// a stopping entry, which onHistory handles.)
func (s *Saga) onNodeLost(ctx context.Context, nodeID string) {
	for _, id := range sortedKeys(s.migs) {
		m := s.migs[id]
		if m == nil || m.st.GetPhase() != phStoppingSource || m.st.GetSourceNodeId() != nodeID {
			continue
		}
		s.log.Warn("the migration's source node is lost: it will report no stopped; proceeding as if stopped",
			"migration", id, "job", m.st.GetSourceJobId(), "node", nodeID)
		s.onSourceStopped(ctx, m)
	}
}

// entryRef is an instance history entry's instance and kind.
func entryRef(e *managerv1.JobHistoryEntry) (*managerv1.InstanceRef, string) {
	switch x := e.GetEvent().(type) {
	case *managerv1.JobHistoryEntry_Provisioned:
		return x.Provisioned.GetInstance(), "provisioned"
	case *managerv1.JobHistoryEntry_Prepared:
		return x.Prepared.GetInstance(), "prepared"
	case *managerv1.JobHistoryEntry_Running:
		return x.Running.GetInstance(), "running"
	case *managerv1.JobHistoryEntry_Stopping:
		return x.Stopping.GetInstance(), "stopping"
	case *managerv1.JobHistoryEntry_Stopped:
		return x.Stopped.GetInstance(), "stopped"
	}
	return nil, ""
}

// onHistory advances a migration on its instances' history (seed 004's
// advanceMigrationOnJobHistory). Entries of other instances, and of
// bindings that are not the migration's, are ignored.
func (s *Saga) onHistory(ctx context.Context, jobID string, e *managerv1.JobHistoryEntry) {
	id := s.byJob[jobID]
	if id == "" {
		return
	}
	m := s.migs[id]
	ref, kind := entryRef(e)
	if ref == nil {
		return
	}
	st := m.st
	isTarget := ref.GetRole() == st.GetTargetRole()
	isSource := ref.GetRole() == st.GetSourceRole()
	if !isTarget && !isSource {
		return
	}
	if isSource && ref.GetNodeId() != st.GetSourceNodeId() {
		return // an older binding of the key
	}
	switch kind {
	case "prepared":
		if isTarget && st.GetPhase() == phLaunching {
			if st.GetStrategy() != stratStopThenStart {
				s.log.Debug("migration target reported prepared but the strategy did not defer its start", "migration", id)
				return
			}
			s.beginStoppingSource(ctx, m)
		}
	case "running":
		if !isTarget {
			return
		}
		switch st.GetPhase() {
		case phLaunching:
			switch st.GetStrategy() {
			case stratOverlap:
				s.beginStoppingSource(ctx, m)
			case stratHandover:
				// The source's state rode in on the target's start, so by
				// now the worker has delivered it; the target's ready is the
				// ack that it was applied.
				s.advance(ctx, m, phSettingState)
			default:
				// stopThenStart expected prepared; the worker started it
				// anyway. The two overlap now: proceed as overlap would.
				s.log.Debug("stopThenStart target reported running without prepared; proceeding as overlap", "migration", id)
				s.beginStoppingSource(ctx, m)
			}
		case phStartingTarget:
			s.complete(ctx, m)
		}
	case "stopped":
		if isSource && st.GetPhase() == phStoppingSource {
			s.onSourceStopped(ctx, m)
		}
	case "stopping":
		stop := e.GetStopping()
		detail := stop.GetAdditionalReason()
		if detail == "" {
			detail = strings.ToLower(strings.TrimPrefix(stop.GetReason().String(), "STOPPING_REASON_"))
		}
		switch {
		case isTarget:
			if stop.GetReason() == managerv1.StoppingReason_STOPPING_REASON_JOB_FAILED {
				s.handleTargetLost(ctx, m, "target failed: "+detail)
			} else {
				s.handleTargetLost(ctx, m, "target stopped: "+detail)
			}
		case stop.GetMigrationId() == id:
			// The point of no return's own stop.
		case stop.GetReason() == managerv1.StoppingReason_STOPPING_REASON_JOB_FAILED:
			if targetIsRunning(st) {
				s.log.Info("migration source failed with its target running: completing into the target", "migration", id)
				s.complete(ctx, m)
				return
			}
			s.performAbort(ctx, m, "source failed: "+detail, touchedWire(st))
		default:
			s.handleSourceLost(ctx, m, "source stopped: "+detail)
		}
	}
}

// forHandshake is the in-flight migration a handshake event belongs to;
// events of jobs with none, and of another migration than the one in
// flight (a predecessor's stragglers), are dropped.
func (s *Saga) forHandshake(what string, ev *managerv1.MigrationEvent) *migration {
	jobID := ev.GetJobKey().GetJobId()
	id := s.byJob[jobID]
	if id == "" {
		s.log.Debug(what+" for a job with no migration in flight; dropped", "job", jobID, "migration", ev.GetMigrationId())
		return nil
	}
	if ev.GetMigrationId() != id {
		s.log.Debug(what+" carries a stale migration id; dropped", "job", jobID, "event", ev.GetMigrationId(), "inFlight", id)
		return nil
	}
	return s.migs[id]
}

// onState is the source's answer to the propose: its state (possibly
// empty) or a refusal, which ends the migration with nothing placed.
func (s *Saga) onState(ctx context.Context, ev *managerv1.MigrationEvent) {
	m := s.forHandshake("migrationState", ev)
	if m == nil {
		return
	}
	if m.st.GetPhase() != phProposing {
		s.log.Debug("migrationState in an unexpected phase", "migration", m.st.GetMigrationId(), "phase", PhaseName(m.st.GetPhase()))
		return
	}
	if ev.GetRefused() != "" {
		s.performAbort(ctx, m, "source refused the handover: "+ev.GetRefused(), true)
		return
	}
	m.st.InitialState = ev.GetPayload()
	s.log.Info("migration source accepted the handover; placing the target", "migration", m.st.GetMigrationId(), "stateBytes", len(ev.GetPayload()))
	s.place(ctx, m)
}

// onInitialStateDelivered: the worker handed the source's state to the
// target; settingStateOnTarget ends, the target's own ready round
// follows.
func (s *Saga) onInitialStateDelivered(ctx context.Context, ev *managerv1.MigrationEvent) {
	m := s.forHandshake("migrationInitialStateDelivered", ev)
	if m == nil || m.st.GetStrategy() != stratHandover {
		return
	}
	switch m.st.GetPhase() {
	case phLaunching:
		// The delivery can race the target's running through the Manager.
		s.advance(ctx, m, phSettingState)
		s.advance(ctx, m, phAwaitingReady)
	case phSettingState:
		s.advance(ctx, m, phAwaitingReady)
	default:
		s.log.Debug("migrationInitialStateDelivered in an unexpected phase", "migration", m.st.GetMigrationId(), "phase", PhaseName(m.st.GetPhase()))
	}
}

// onTargetReady: the target is ready at its payload; the source is told
// to stop output at or after it.
func (s *Saga) onTargetReady(ctx context.Context, ev *managerv1.MigrationEvent) {
	m := s.forHandshake("migrationTargetReady", ev)
	if m == nil {
		return
	}
	st := m.st
	if st.GetStrategy() != stratHandover {
		s.log.Debug("migrationTargetReady under a strategy other than handover; ignored", "migration", st.GetMigrationId())
		return
	}
	switch st.GetPhase() {
	case phLaunching, phSettingState, phAwaitingReady:
	default:
		s.log.Debug("migrationTargetReady in an unexpected phase", "migration", st.GetMigrationId(), "phase", PhaseName(st.GetPhase()))
		return
	}
	st.TargetPayload = ev.GetPayload()
	// Recorded either way, so the phase bar never skips a step that really
	// completed (a worker may not report the delivery).
	if st.GetPhase() == phLaunching {
		s.advance(ctx, m, phSettingState)
	}
	s.advance(ctx, m, phAwaitingReady)
	s.advance(ctx, m, phAwaitingSourceStop)
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	err := s.api.NotifyMigrationCutoverReady(cctx, &managerv1.JobKey{JobId: st.GetSourceJobId(), Role: st.GetSourceRole()}, st.GetMigrationId(), ev.GetPayload())
	cancel()
	if err != nil {
		s.cutoverCallFailed(ctx, m, "notifyMigrationCutoverReady", err)
	}
}

// onSourceStoppedOutput: the source stopped output at its payload; the
// target is told to begin from there.
func (s *Saga) onSourceStoppedOutput(ctx context.Context, ev *managerv1.MigrationEvent) {
	m := s.forHandshake("migrationSourceStoppedOutput", ev)
	if m == nil {
		return
	}
	st := m.st
	if st.GetPhase() != phAwaitingSourceStop {
		s.log.Debug("migrationSourceStoppedOutput in an unexpected phase", "migration", st.GetMigrationId(), "phase", PhaseName(st.GetPhase()))
		return
	}
	st.SourcePayload = ev.GetPayload()
	s.advance(ctx, m, phApplying)
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	err := s.api.NotifyMigrationCutoverApply(cctx, &managerv1.JobKey{JobId: st.GetSourceJobId(), Role: st.GetTargetRole()}, st.GetMigrationId(), ev.GetPayload())
	cancel()
	if err != nil {
		// Still before the point of no return: the abort to the source
		// means "resume output".
		s.cutoverCallFailed(ctx, m, "notifyMigrationCutoverApply", err)
	}
}

// onTargetApplied: the target applied the handover and began output; only
// now is the source stopped. An incomplete apply is said where an
// operator will look: past this point the source stops regardless.
func (s *Saga) onTargetApplied(ctx context.Context, ev *managerv1.MigrationEvent) {
	m := s.forHandshake("migrationTargetApplied", ev)
	if m == nil {
		return
	}
	st := m.st
	if st.GetPhase() != phApplying {
		s.log.Debug("migrationTargetApplied in an unexpected phase", "migration", st.GetMigrationId(), "phase", PhaseName(st.GetPhase()))
		return
	}
	if sum := ReadApplySummary(ev.GetPayload()); sum != nil {
		st.ApplySummary = sum
		if len(sum.GetFailed()) > 0 {
			var failed []string
			for _, f := range sum.GetFailed() {
				failed = append(failed, f.GetId()+" ("+f.GetReason()+")")
			}
			s.log.Error("migration target applied INCOMPLETELY", "migration", st.GetMigrationId(),
				"applied", strings.Join(sum.GetApplied(), ", "), "failed", strings.Join(failed, ", "), "skewMs", sum.GetSkewMs())
		}
	}
	s.beginStoppingSource(ctx, m)
}

// onWorkerAbort: a job (or its worker) gave the migration up. Before the
// point of no return a clean abort; after it, a target's abort fails
// forward and a source backing out changes nothing (it is stopping
// regardless).
func (s *Saga) onWorkerAbort(ctx context.Context, ev *managerv1.MigrationEvent) {
	m := s.forHandshake("migrationAborted", ev)
	if m == nil {
		return
	}
	st := m.st
	reason := ev.GetReason()
	if reason == "" {
		reason = "aborted by the job"
	}
	switch {
	case !st.GetPastPointOfNoReturn():
		s.performAbort(ctx, m, reason, true)
	case ev.GetJobKey().GetRole() == st.GetTargetRole():
		s.failForward(ctx, m, "target aborted: "+reason)
	default:
		s.log.Debug("source-side abort past the point of no return; ignored", "migration", st.GetMigrationId(), "reason", reason)
	}
}

// rebuild loads the in-flight migrations from the store (a new primary, or
// a restarted AutoManager) and brings each up to date with its instances'
// current state; it answers the lowest revision among them, from which the
// event stream is resumed so that no handshake event is missed (0: none).
func (s *Saga) rebuild(ctx context.Context) (uint64, error) {
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	all, err := s.api.ListMigrations(cctx, "")
	if err != nil {
		return 0, err
	}
	var resume uint64
	for _, st := range all {
		if terminal(st.GetPhase()) {
			continue
		}
		m := &migration{st: clone(st)}
		s.migs[st.GetMigrationId()] = m
		s.claim(st.GetSourceJobId(), st.GetMigrationId())
		s.arm(m)
		if resume == 0 || st.GetRevision() < resume {
			resume = st.GetRevision()
		}
		s.log.Info("migration taken over", "migration", st.GetMigrationId(), "job", st.GetSourceJobId(), "phase", PhaseName(st.GetPhase()))
	}
	return resume, nil
}

// reconcile replays, for each in-flight migration, what its instances'
// current state says happened while no AutoManager watched (after
// rebuild, once the stream has been resumed).
func (s *Saga) reconcile(ctx context.Context) {
	for _, id := range sortedKeys(s.migs) {
		m := s.migs[id]
		if terminal(m.st.GetPhase()) {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, callTimeout)
		jh, err := s.api.JobById(cctx, m.st.GetSourceJobId())
		cancel()
		if err != nil {
			s.performAbort(ctx, m, "the job is gone", true)
			continue
		}
		st := m.st
		var src, tgt *managerv1.Instance
		for _, in := range jh.GetInstances() {
			switch in.GetRole() {
			case st.GetSourceRole():
				src = in
			case st.GetTargetRole():
				tgt = in
			}
		}
		switch {
		case st.GetPhase() == phPlacing && tgt == nil:
			s.place(ctx, m) // the old primary was placing it
		case st.GetPhase() == phPlacing:
			st.TargetNodeId = tgt.GetNodeId()
			s.advance(ctx, m, phLaunching)
		}
		if tgt != nil {
			switch tgt.GetPhase() {
			case managerv1.InstancePhase_INSTANCE_PHASE_PREPARED:
				s.onHistory(ctx, st.GetSourceJobId(), synth("prepared", tgt))
			case managerv1.InstancePhase_INSTANCE_PHASE_RUNNING:
				s.onHistory(ctx, st.GetSourceJobId(), synth("running", tgt))
			case managerv1.InstancePhase_INSTANCE_PHASE_STOPPED:
				s.handleTargetLost(ctx, m, "target stopped while no AutoManager watched")
			}
		}
		if src != nil && src.GetPhase() == managerv1.InstancePhase_INSTANCE_PHASE_STOPPED && !terminal(st.GetPhase()) {
			if st.GetPhase() == phStoppingSource {
				s.onSourceStopped(ctx, m)
			} else if !st.GetPastPointOfNoReturn() {
				s.handleSourceLost(ctx, m, "source stopped while no AutoManager watched")
			}
		}
		s.resendCutover(ctx, m)
	}
}

// resendCutover, on taking a migration over, tells its source or target
// again what the previous AutoManager last told it in the cutover: that
// message, or the worker's answer to it, may have been lost with the
// previous primary (it failed its notify while stopping, or the answer
// reached a Manager that then stopped). Workers answer a repeat by
// repeating their report, never by acting twice.
func (s *Saga) resendCutover(ctx context.Context, m *migration) {
	st := m.st
	var err error
	var what string
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	switch st.GetPhase() {
	case phAwaitingSourceStop:
		what = "notifyMigrationCutoverReady"
		err = s.api.NotifyMigrationCutoverReady(cctx, &managerv1.JobKey{JobId: st.GetSourceJobId(), Role: st.GetSourceRole()}, st.GetMigrationId(), st.GetTargetPayload())
	case phApplying:
		what = "notifyMigrationCutoverApply"
		err = s.api.NotifyMigrationCutoverApply(cctx, &managerv1.JobKey{JobId: st.GetSourceJobId(), Role: st.GetTargetRole()}, st.GetMigrationId(), st.GetSourcePayload())
	default:
		return
	}
	s.log.Info("migration taken over mid-cutover: told again", "migration", st.GetMigrationId(), "phase", PhaseName(st.GetPhase()), "call", what, "err", err)
	if err != nil {
		s.cutoverCallFailed(ctx, m, what, err)
	}
}

// cutoverCallFailed handles a cutover notify that failed: before the
// point of no return the migration aborts (the source resumes output) —
// unless this AutoManager is stopping, when the failure says nothing about
// the migration and the next primary's AutoManager takes it over, or the
// worker was not reachable (UNAVAILABLE: its stream is down a moment, as
// after a Manager restart), when the message is told again shortly, for as
// long as the phase's deadline allows.
func (s *Saga) cutoverCallFailed(ctx context.Context, m *migration, what string, err error) {
	switch {
	case ctx.Err() != nil:
		s.log.Info("cutover call failed while this AutoManager stops; the next one takes the migration over", "migration", m.st.GetMigrationId(), "call", what, "err", err)
	case errors.Is(err, norsk.ErrUnavailable):
		m.resendAt = s.clk.Now().Add(cutoverResendInterval)
		s.log.Info("cutover call found its worker unreachable; telling it again shortly", "migration", m.st.GetMigrationId(), "call", what, "err", err, "in", cutoverResendInterval)
	default:
		s.performAbort(ctx, m, what+" failed: "+errorText(err), true)
	}
}

// cutoverResendInterval is how long after an unreachable worker a cutover
// message is told again.
const cutoverResendInterval = 250 * time.Millisecond

// synth is a history entry standing for an instance's current phase.
func synth(kind string, in *managerv1.Instance) *managerv1.JobHistoryEntry {
	ref := &managerv1.InstanceRef{Role: in.GetRole(), NodeId: in.GetNodeId(), FencingToken: in.GetFencingToken()}
	switch kind {
	case "prepared":
		return &managerv1.JobHistoryEntry{Event: &managerv1.JobHistoryEntry_Prepared{Prepared: &managerv1.InstancePrepared{Instance: ref}}}
	default:
		return &managerv1.JobHistoryEntry{Event: &managerv1.JobHistoryEntry_Running{Running: &managerv1.InstanceRunning{Instance: ref}}}
	}
}
