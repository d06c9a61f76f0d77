package automanager

import (
	"context"
	"fmt"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/pkg/apierr"
	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

// touchedWire: has anything of this migration reached a worker, so that
// someone must be told when it is abandoned? For a handover, yes from the
// first phase — a source that answered the propose is locked until a
// cutover or an abort, so the abort is its unlock. For the other
// strategies nothing reaches a worker until the target's start.
func touchedWire(st *managerv1.MigrationState) bool {
	return st.GetStrategy() == stratHandover || st.GetPhase() != phPlacing
}

// targetIsRunning: the target's containers run (or, for stopThenStart,
// were told to start): completing into it beats recovery.
func targetIsRunning(st *managerv1.MigrationState) bool {
	if st.GetStrategy() == stratStopThenStart {
		return st.GetPhase() == phStartingTarget
	}
	switch st.GetPhase() {
	case phSettingState, phAwaitingReady, phAwaitingSourceStop, phApplying, phStoppingSource:
		return true
	}
	return false
}

// place places the migration's target through the placement every job
// takes (the source's node excluded, a named target pinned), then
// dispatches its start. A placement failure aborts, with placement's own
// reason — and, for a pinned target, why that node was rejected.
func (s *Saga) place(ctx context.Context, m *migration) {
	s.advance(ctx, m, phPlacing)
	node, summary, why, degr := s.placeTarget(ctx, m)
	if node == "" {
		s.performAbort(ctx, m, "placement failed: "+why, touchedWire(m.st))
		return
	}
	m.st.TargetNodeId, m.st.PlacementSummary = node, summary
	m.degradations = degr
	if !s.dispatch(ctx, m) {
		return
	}
	if s.kept != nil {
		s.kept.started(m.st)
	}
	s.advance(ctx, m, phLaunching)
	if m.waiter != nil {
		m.waiter <- migrateResult{st: clone(m.st)}
		m.waiter = nil
	}
}

// dispatch starts the target on its node, carrying the migration: its
// key, the slot it is told, deferStart for stopThenStart, and (handover)
// the source's state for its job socket. A refused start is the target
// lost.
func (s *Saga) dispatch(ctx context.Context, m *migration) bool {
	st := m.st
	kind, summary := "migration", st.GetPlacementSummary()
	if st.GetRepair() {
		kind, summary = "repair", "repair of "+st.GetReason()+"; "+summary
	}
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	_, err := s.api.StartJob(cctx, st.GetSourceJobId(), st.GetTargetRole(), st.GetTargetNodeId(), norsk.StartJobOptions{
		RuntimeRole:           st.GetRuntimeRole(),
		DeferStart:            st.GetStrategy() == stratStopThenStart,
		MigrationID:           st.GetMigrationId(),
		MigrationInitialState: st.GetInitialState(),
		MigrationHandover:     st.GetStrategy() == stratHandover,
		Placement: &managerv1.PlacementEvent{JobId: st.GetSourceJobId(), Role: st.GetTargetRole(), NodeId: st.GetTargetNodeId(),
			Kind: kind, Summary: summary, FailedNodeId: st.GetSourceNodeId(), Degradations: m.degradations},
	})
	cancel()
	if err != nil {
		if s.metrics != nil {
			s.metrics.MigrationDispatchFailed.Inc()
		}
		s.log.Error("migration target's start was refused", "migration", st.GetMigrationId(), "node", st.GetTargetNodeId(), "err", err)
		// A start whose answer was lost may still have been applied: never
		// leave a target bound under a key nobody will address.
		cctx, cancel := context.WithTimeout(ctx, callTimeout)
		_ = s.api.StopJob(cctx, st.GetSourceJobId(), st.GetTargetRole(), st.GetTargetNodeId(), norsk.StopJobOptions{MigrationID: st.GetMigrationId()})
		cancel()
		s.handleTargetLost(ctx, m, "target startJob dispatch failed: "+errorText(err))
		return false
	}
	return true
}

// markAborted records the migration aborted (the reason kept), answers a
// parked MigrateJob, and frees the job for another migration.
func (s *Saga) markAborted(ctx context.Context, m *migration, reason string) {
	m.st.AbortReason = reason
	s.release(m.st.GetSourceJobId(), m.st.GetMigrationId())
	s.advance(ctx, m, phAborted)
	if m.waiter != nil {
		m.waiter <- migrateResult{st: clone(m.st), err: apierr.New(apierr.Aborted, "migrateJob: migration %s aborted: %s", m.st.GetMigrationId(), reason)}
		m.waiter = nil
	}
	if s.metrics != nil {
		s.metrics.MigrationsEnded.WithLabelValues("aborted").Inc()
		s.metrics.observeMigration(m.st, "aborted")
	}
	s.log.Warn("migration aborted", "migration", m.st.GetMigrationId(), "job", m.st.GetSourceJobId(), "reason", reason,
		"pastPointOfNoReturn", m.st.GetPastPointOfNoReturn())
}

// performAbort is the clean rollback (before the point of no return):
// the migration marked aborted first, then, when anything reached a
// worker, MigrationAbort to both instances and the target stopped. The
// source is never touched: it was never told to stop. Best effort.
func (s *Saga) performAbort(ctx context.Context, m *migration, reason string, notifyWire bool) {
	if terminal(m.st.GetPhase()) {
		return
	}
	s.markAborted(ctx, m, reason)
	if !notifyWire {
		return
	}
	st := m.st
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	if err := s.api.AbortMigration(cctx, st.GetSourceJobId(), st.GetSourceRole(), st.GetTargetRole(), reason, st.GetMigrationId()); err != nil {
		s.log.Debug("migration abort could not reach both instances", "migration", st.GetMigrationId(), "err", err)
	}
	if st.GetTargetNodeId() != "" {
		// The target is never left running under a key nobody addresses.
		if err := s.api.StopJob(cctx, st.GetSourceJobId(), st.GetTargetRole(), st.GetTargetNodeId(), norsk.StopJobOptions{MigrationID: st.GetMigrationId()}); err != nil {
			s.log.Debug("stopping an aborted migration's target", "migration", st.GetMigrationId(), "err", err)
		}
	}
}

// handleTargetLost: the target is gone (failed, refused, its node lost).
// Before the point of no return a clean abort; after it, fail forward.
func (s *Saga) handleTargetLost(ctx context.Context, m *migration, reason string) {
	if terminal(m.st.GetPhase()) {
		return
	}
	if m.st.GetPastPointOfNoReturn() {
		s.failForward(ctx, m, reason)
		return
	}
	s.performAbort(ctx, m, reason, touchedWire(m.st))
}

// handleSourceLost: the source is gone mid-migration. With the target
// running, complete into it (the job carries on there, which is what a
// migration is for); otherwise abort, and ordinary recovery re-places
// the job.
func (s *Saga) handleSourceLost(ctx context.Context, m *migration, reason string) {
	if terminal(m.st.GetPhase()) {
		return
	}
	if targetIsRunning(m.st) {
		s.log.Info("migration source lost with its target running: completing into the target", "migration", m.st.GetMigrationId(), "reason", reason)
		s.complete(ctx, m)
		return
	}
	s.performAbort(ctx, m, reason, touchedWire(m.st))
}

// beginStoppingSource stops the source — the point of no return. If the
// stop itself fails there is no way back either (it may or may not have
// been acted on): proceed as if the source had stopped.
func (s *Saga) beginStoppingSource(ctx context.Context, m *migration) {
	m.st.PastPointOfNoReturn = true
	s.advance(ctx, m, phStoppingSource)
	st := m.st
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	err := s.api.StopJob(cctx, st.GetSourceJobId(), st.GetSourceRole(), st.GetSourceNodeId(), norsk.StopJobOptions{MigrationID: st.GetMigrationId()})
	cancel()
	if err != nil {
		s.log.Error("stopping the migration's source failed past the point of no return; proceeding as if stopped",
			"migration", st.GetMigrationId(), "job", st.GetSourceJobId(), "source", st.GetSourceRole(), "node", st.GetSourceNodeId(), "err", err)
		s.onSourceStopped(ctx, m)
	}
}

// onSourceStopped: the source's stopped landed (or its deadline stood in
// for it). stopThenStart now starts the prepared target; the others are
// done.
func (s *Saga) onSourceStopped(ctx context.Context, m *migration) {
	if m.st.GetPhase() != phStoppingSource {
		return
	}
	if m.st.GetStrategy() != stratStopThenStart {
		s.complete(ctx, m)
		return
	}
	s.advance(ctx, m, phStartingTarget)
	st := m.st
	if st.GetTargetNodeId() == "" {
		s.failForward(ctx, m, "no target node recorded at startingTarget")
		return
	}
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	err := s.api.StartPreparedJob(cctx, st.GetSourceJobId(), st.GetTargetRole(), st.GetTargetNodeId())
	cancel()
	if err != nil {
		s.failForward(ctx, m, "startPreparedJob failed: "+errorText(err))
	}
}

// complete: the job lives on the target, under the target's instance key
// from now on (placement reads it from the instances).
func (s *Saga) complete(ctx context.Context, m *migration) {
	if terminal(m.st.GetPhase()) {
		return
	}
	s.release(m.st.GetSourceJobId(), m.st.GetMigrationId())
	s.advance(ctx, m, phDone)
	if s.metrics != nil {
		s.metrics.MigrationsEnded.WithLabelValues("done").Inc()
		s.metrics.observeMigration(m.st, "done")
	}
	s.log.Info("migration done", "migration", m.st.GetMigrationId(), "job", m.st.GetSourceJobId(),
		"from", m.st.GetSourceNodeId(), "to", m.st.GetTargetNodeId(), "key", m.st.GetTargetRole())
}

// failForward: past the point of no return the target is lost, and the
// source is gone or going, so the job has nowhere to run. The migration
// is marked aborted, what remains of the target stopped, and the job left
// to ordinary recovery — the re-place a node loss would trigger, ceiling
// and policy included — under its slot key again.
func (s *Saga) failForward(ctx context.Context, m *migration, reason string) {
	if terminal(m.st.GetPhase()) {
		return
	}
	s.log.Warn("migration failing forward into ordinary recovery", "migration", m.st.GetMigrationId(), "phase", PhaseName(m.st.GetPhase()), "reason", reason)
	s.markAborted(ctx, m, reason)
	st := m.st
	if st.GetTargetNodeId() != "" {
		cctx, cancel := context.WithTimeout(ctx, callTimeout)
		if err := s.api.StopJob(cctx, st.GetSourceJobId(), st.GetTargetRole(), st.GetTargetNodeId(), norsk.StopJobOptions{MigrationID: st.GetMigrationId()}); err != nil {
			s.log.Debug("failForward: stopping the target", "migration", st.GetMigrationId(), "err", err)
		}
		cancel()
	}
}

// why names a pinned target's rejection.
func pinnedWhy(node, reason string) string {
	return fmt.Sprintf("; the named target %s was rejected: %s", node, reason)
}
