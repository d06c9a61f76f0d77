package automanager

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/internal/clock"
	"github.com/norsk-go/norsk-manager/pkg/apierr"
	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

// Saga runs migrations: seed 004's MigrationSaga, ported phase by phase.
//
// One goroutine (run) owns every migration's state and makes every call;
// MigrateJob, CancelMigration, the event stream and the phase deadlines
// hand it work through a queue, so the saga's steps never interleave. The
// state of every migration is written back to the store (RecordMigration)
// at each step, so a new primary's AutoManager rebuilds it (rebuild) and
// carries on; a migration in flight is never abandoned because the primary
// changed. A step's calls to the Manager are bounded by callTimeout.
type Saga struct {
	api     API
	clk     clock.Clock
	log     *slog.Logger
	policy  Policy
	metrics *Metrics

	q chan func(context.Context)
	// kept, when set, places targets on the AutoManager's kept placement
	// state (nil: each placement reads the state).
	kept targetPlacer

	// Owned by run's goroutine.
	migs  map[string]*migration
	byJob map[string]string // job id → its in-flight migration
	// inFlight is len(byJob), for the event stream's reader: with no
	// migration in flight a job's history is none of the saga's business.
	inFlight atomic.Int32
}

// claim records id as job's migration in flight.
func (s *Saga) claim(job, id string) {
	s.byJob[job] = id
	s.inFlight.Store(int32(len(s.byJob)))
}

// release ends job's claim by migration id (if it holds it).
func (s *Saga) release(job, id string) {
	if s.byJob[job] == id {
		delete(s.byJob, job)
		s.inFlight.Store(int32(len(s.byJob)))
	}
}

// wants reports whether ev may concern the saga; the stream's reader skips
// the others rather than queue them.
func (s *Saga) wants(ev *managerv1.Event) bool {
	switch ev.GetKind().(type) {
	case *managerv1.Event_JobUpdated, *managerv1.Event_JobDeleted, *managerv1.Event_NodeLost:
		return s.inFlight.Load() > 0
	case *managerv1.Event_MigrationState, *managerv1.Event_MigrationInitialStateDelivered, *managerv1.Event_MigrationTargetReady,
		*managerv1.Event_MigrationSourceStoppedOutput, *managerv1.Event_MigrationTargetApplied, *managerv1.Event_MigrationAborted,
		*managerv1.Event_MigrationForgotten:
		return true
	}
	return false
}

// migration is one migration the saga runs.
type migration struct {
	st *managerv1.MigrationState
	// deadline is when the current phase times out (zero: none).
	deadline time.Time
	// resendAt is when a cutover message that found its worker
	// unreachable is to be told again (zero: none); the phase deadline
	// still bounds how long that goes on.
	resendAt time.Time
	// waiter is MigrateJob's caller, parked until the target is placed
	// and dispatched or the migration aborts.
	waiter chan<- migrateResult
	// job is the job as MigrateJob read it (for placement).
	opts MigrateOptions
	// degradations are the soft rules the target's node breaks, as its
	// placement found them (told to the target's start).
	degradations []*managerv1.PlacementRefusal
}

type migrateResult struct {
	st  *managerv1.MigrationState
	err error
}

// callTimeout bounds each call a saga step makes.
const callTimeout = 15 * time.Second

func newSaga(api API, clk clock.Clock, log *slog.Logger, p Policy, m *Metrics) *Saga {
	p.defaults()
	p.Migration.defaults()
	return &Saga{
		api: api, clk: clk, log: log.With("component", "migration"), policy: p, metrics: m,
		q:    make(chan func(context.Context), 1024),
		migs: map[string]*migration{}, byJob: map[string]string{},
	}
}

// run processes the queue and the phase deadlines until ctx ends. Parked
// MigrateJob callers are answered UNAVAILABLE then; their migrations stay
// in the store for the next AutoManager.
func (s *Saga) run(ctx context.Context) {
	defer func() {
		for _, m := range s.migs {
			if m.waiter != nil {
				m.waiter <- migrateResult{st: clone(m.st), err: apierr.Unavailablef("the AutoManager stopped (its primary term ended); migration %s goes on under the next primary", m.st.GetMigrationId())}
				m.waiter = nil
			}
		}
	}()
	for {
		s.fireDue(ctx)
		var tc <-chan time.Time
		var t clock.Timer
		if next := s.nextDeadline(); !next.IsZero() {
			t = s.clk.NewTimer(max(next.Sub(s.clk.Now()), 0))
			tc = t.C()
		}
		select {
		case <-ctx.Done():
			if t != nil {
				t.Stop()
			}
			return
		case f := <-s.q:
			if t != nil {
				t.Stop()
			}
			s.fireDue(ctx) // deadlines that passed before f was queued come first
			f(ctx)
		case <-tc:
		}
	}
}

// do queues f for run's goroutine.
func (s *Saga) do(ctx context.Context, f func(context.Context)) error {
	select {
	case s.q <- f:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *Saga) nextDeadline() time.Time {
	var next time.Time
	for _, m := range s.migs {
		if terminal(m.st.GetPhase()) {
			continue
		}
		for _, t := range []time.Time{m.deadline, m.resendAt} {
			if !t.IsZero() && (next.IsZero() || t.Before(next)) {
				next = t
			}
		}
	}
	return next
}

// fireDue handles every phase deadline that has passed: before the point
// of no return the migration aborts; stoppingSource proceeds as if the
// source had stopped (it was told to; waiting longer helps nobody);
// startingTarget fails forward.
func (s *Saga) fireDue(ctx context.Context) {
	now := s.clk.Now()
	for _, id := range sortedKeys(s.migs) {
		if m := s.migs[id]; m != nil && !m.resendAt.IsZero() && !now.Before(m.resendAt) {
			m.resendAt = time.Time{}
			if !terminal(m.st.GetPhase()) && (m.deadline.IsZero() || now.Before(m.deadline)) {
				s.resendCutover(ctx, m)
			}
		}
	}
	for _, id := range sortedKeys(s.migs) {
		m := s.migs[id]
		if m == nil || m.deadline.IsZero() || now.Before(m.deadline) || terminal(m.st.GetPhase()) {
			continue
		}
		phase := m.st.GetPhase()
		m.deadline = time.Time{}
		reason := "phase timeout: " + PhaseName(phase)
		s.log.Warn("migration phase deadline passed", "migration", m.st.GetMigrationId(), "phase", PhaseName(phase))
		switch phase {
		case phStoppingSource:
			s.log.Error("no stopped report from the source within its deadline; proceeding as if stopped",
				"migration", m.st.GetMigrationId(), "job", m.st.GetSourceJobId(), "source", m.st.GetSourceRole())
			s.onSourceStopped(ctx, m)
		case phStartingTarget:
			s.failForward(ctx, m, reason)
		default:
			s.performAbort(ctx, m, reason, touchedWire(m.st))
		}
	}
}

// MigrateJob starts a migration of jobID (seed 004's migrateJob) and
// returns once its target is placed and dispatched (phase launching). See
// Manager.MigrateJob for the errors; a migration that was started and
// rolled back answers ABORTED with its record.
func (s *Saga) MigrateJob(ctx context.Context, jobID string, opts MigrateOptions) (*managerv1.MigrationState, error) {
	res := make(chan migrateResult, 1)
	if err := s.do(ctx, func(ctx context.Context) { s.begin(ctx, jobID, opts, res) }); err != nil {
		return nil, err
	}
	select {
	case r := <-res:
		return r.st, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// CancelMigration aborts an in-flight migration cleanly (seed 004's
// abortMigration): MigrationAbort to both instances, the target stopped,
// the source untouched. A migration already ended changes nothing; one
// past the point of no return is refused (FAILED_PRECONDITION).
func (s *Saga) CancelMigration(ctx context.Context, migrationID, reason string) error {
	res := make(chan error, 1)
	if err := s.do(ctx, func(ctx context.Context) { res <- s.cancel(ctx, migrationID, reason) }); err != nil {
		return err
	}
	select {
	case err := <-res:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *Saga) cancel(ctx context.Context, id, reason string) error {
	if reason == "" {
		reason = "aborted by request"
	}
	m := s.migs[id]
	if m == nil {
		cctx, cancel := context.WithTimeout(ctx, callTimeout)
		defer cancel()
		st, err := s.api.GetMigration(cctx, id)
		switch {
		case errors.Is(err, norsk.ErrNotFound):
			return apierr.NotFoundf("no migration %q (never started, or forgotten)", id)
		case err != nil:
			return err
		case terminal(st.GetPhase()):
			return nil
		}
		return apierr.Unavailablef("migration %s is in flight but not run by this AutoManager (it is rebuilding); retry", id)
	}
	switch {
	case terminal(m.st.GetPhase()):
		return nil
	case m.st.GetPastPointOfNoReturn():
		return apierr.FailedPreconditionf("migration %s is past the point of no return (phase %s): the source has been told to stop, so the migration can only fail forward — it will complete into the target, or fall into ordinary recovery if the target is lost",
			id, PhaseName(m.st.GetPhase()))
	}
	s.performAbort(ctx, m, reason, touchedWire(m.st))
	return nil
}

// begin checks and records a new migration, then proposes (handover) or
// places its target. res is answered by place, or by the abort.
func (s *Saga) begin(ctx context.Context, jobID string, opts MigrateOptions, res chan<- migrateResult) {
	fail := func(err error) { res <- migrateResult{err: err} }
	if id := s.byJob[jobID]; id != "" {
		fail(apierr.FailedPreconditionf("migrateJob: a migration is already in flight for job %s (%s, phase %s)", jobID, id, PhaseName(s.migs[id].st.GetPhase())))
		return
	}
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	jh, err := s.api.JobById(cctx, jobID)
	cancel()
	switch {
	case errors.Is(err, norsk.ErrNotFound):
		fail(apierr.NotFoundf("migrateJob: unknown job %s", jobID))
		return
	case err != nil:
		fail(fmt.Errorf("migrateJob: read job %s: %w", jobID, err))
		return
	}
	job := jh.GetJob()
	slot, ok := slotForJob(job)
	if !ok {
		fail(apierr.FailedPreconditionf("migrateJob: job %s is not an AutoManager-placed job (no placement requirements / bundle tags) — only placed jobs migrate", jobID))
		return
	}
	if ts := job.GetTerminalState(); ts != nil {
		fail(apierr.FailedPreconditionf("migrateJob: job %s has ended (%s) — nothing to migrate", jobID, ts.GetKind()))
		return
	}
	var src *managerv1.Instance
	if opts.SourceRole != "" {
		for _, in := range jh.GetInstances() {
			if in.GetRole() == opts.SourceRole {
				src = in
			}
		}
	} else {
		src = currentInstance(jh, slot)
	}
	if src == nil || src.GetPhase() == phaseStopped {
		fail(apierr.FailedPreconditionf("migrateJob: job %s is not bound to a node — nothing to migrate", jobID))
		return
	}
	if opts.TargetNodeID != "" && opts.TargetNodeID == src.GetNodeId() {
		fail(apierr.FailedPreconditionf("migrateJob: target node %s is where job %s already runs", opts.TargetNodeID, jobID))
		return
	}
	if src.GetPhase() != managerv1.InstancePhase_INSTANCE_PHASE_RUNNING || src.GetDesired() == desiredStopped {
		fail(apierr.FailedPreconditionf("migrateJob: instance %s/%s is not running on %s (phase %s) — only a running instance migrates",
			jobID, src.GetRole(), src.GetNodeId(), phaseWord(src.GetPhase())))
		return
	}
	strategy := opts.Strategy
	if strategy == managerv1.MigrationStrategy_MIGRATION_STRATEGY_UNSPECIFIED {
		strategy = stratStopThenStart
	}
	id := newMigrationID()
	now := timestamppb.New(s.clk.Now())
	first := phPlacing
	if strategy == stratHandover {
		first = phProposing
	}
	st := &managerv1.MigrationState{
		MigrationId: id, SourceJobId: jobID, SourceRole: src.GetRole(), SourceNodeId: src.GetNodeId(),
		Strategy: strategy, TargetRole: TargetRole(slot, id), StartedAt: now, Phase: first,
		PhaseHistory: []*managerv1.MigrationPhaseEntry{{Phase: first, At: now}},
		RuntimeRole:  slot, RequestedTargetNodeId: opts.TargetNodeID, OverrideReservation: opts.OverrideReservation,
		RequestedBy: opts.RequestedBy, Repair: opts.Repair, Reason: opts.Reason,
	}
	m := &migration{st: st, waiter: res, opts: opts}
	if err := s.save(ctx, m, true); err != nil {
		m.waiter = nil
		fail(err)
		return
	}
	s.migs[id] = m
	s.claim(jobID, id)
	s.arm(m)
	if s.metrics != nil {
		s.metrics.MigrationsStarted.WithLabelValues(StrategyName(strategy)).Inc()
	}
	s.log.Info("migration started", "migration", id, "job", jobID, "source", st.GetSourceRole(), "from", st.GetSourceNodeId(),
		"strategy", StrategyName(strategy), "target", st.GetTargetRole(), "phase", PhaseName(first), "requestedTarget", opts.TargetNodeID)
	if first == phProposing {
		// Phase F: ask the source what it would hand over; its answer
		// comes back as a migrationState event (onState).
		cctx, cancel := context.WithTimeout(ctx, callTimeout)
		err := s.api.NotifyMigrationGetState(cctx, &managerv1.JobKey{JobId: jobID, Role: st.GetSourceRole()}, id)
		cancel()
		if err != nil {
			// The source is told to unlock even if it never heard us: the
			// abort clears its lock either way.
			s.performAbort(ctx, m, "notifyMigrationGetState failed: "+errorText(err), true)
		}
		return
	}
	s.place(ctx, m)
}

// save writes the migration's record back (create: its first write). A
// record another writer moved is given up: that writer owns it now.
func (s *Saga) save(ctx context.Context, m *migration, create bool) error {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), callTimeout)
	defer cancel()
	rev, err := s.api.RecordMigration(cctx, m.st, m.st.GetRevision(), create)
	if err != nil {
		if !create && errors.Is(err, norsk.ErrFailedPrecondition) {
			s.log.Warn("migration record moved under this AutoManager; leaving it to its new owner", "migration", m.st.GetMigrationId(), "err", err)
			s.drop(m)
		} else {
			s.log.Warn("cannot write a migration's record back", "migration", m.st.GetMigrationId(), "err", err)
		}
		return err
	}
	m.st.Revision = rev
	return nil
}

// drop forgets a migration this saga no longer runs.
func (s *Saga) drop(m *migration) {
	id := m.st.GetMigrationId()
	s.release(m.st.GetSourceJobId(), id)
	delete(s.migs, id)
}

// arm sets the deadline of the migration's current phase, counted from
// when it entered it (so a rebuilt migration keeps its own clock).
func (s *Saga) arm(m *migration) {
	m.deadline = time.Time{}
	if terminal(m.st.GetPhase()) {
		return
	}
	d := s.policy.Migration.of(m.st.GetPhase())
	if d <= 0 {
		return
	}
	at := s.clk.Now()
	if h := m.st.GetPhaseHistory(); len(h) > 0 && h[len(h)-1].GetPhase() == m.st.GetPhase() {
		at = h[len(h)-1].GetAt().AsTime()
	}
	m.deadline = at.Add(d)
}

// advance moves the migration to phase (no-op if it is there), re-arms
// the deadline and writes the record back.
func (s *Saga) advance(ctx context.Context, m *migration, phase managerv1.MigrationPhase) {
	if m.st.GetPhase() == phase {
		return
	}
	m.st.Phase = phase
	m.st.PhaseHistory = append(m.st.PhaseHistory, &managerv1.MigrationPhaseEntry{Phase: phase, At: timestamppb.New(s.clk.Now())})
	s.arm(m)
	s.log.Info("migration phase", "migration", m.st.GetMigrationId(), "job", m.st.GetSourceJobId(), "phase", PhaseName(phase))
	_ = s.save(ctx, m, false)
}

func clone(st *managerv1.MigrationState) *managerv1.MigrationState {
	return proto.Clone(st).(*managerv1.MigrationState)
}

// errorText is an error's message without the SDK's operation prefix noise.
func errorText(err error) string {
	var e *norsk.Error
	if errors.As(err, &e) && e.Message != "" {
		return e.Message
	}
	return err.Error()
}
