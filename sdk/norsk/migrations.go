package norsk

import (
	"context"
	"strings"

	"connectrpc.com/connect"
	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
)

// From norsk/manager/v1/migration.proto: moving a running job to another
// node (seed 004's migration saga, run by the AutoManager).
type (
	JobKey                = managerv1.JobKey
	MigrationState        = managerv1.MigrationState
	MigrationPhase        = managerv1.MigrationPhase
	MigrationStrategy     = managerv1.MigrationStrategy
	MigrationEvent        = managerv1.MigrationEvent
	MigrationApplySummary = managerv1.MigrationApplySummary
)

// The event stream's migration events (and the placement event).
type (
	Event_Placement                      = managerv1.Event_Placement
	Event_MigrationUpdated               = managerv1.Event_MigrationUpdated
	Event_MigrationForgotten             = managerv1.Event_MigrationForgotten
	Event_MigrationState                 = managerv1.Event_MigrationState
	Event_MigrationInitialStateDelivered = managerv1.Event_MigrationInitialStateDelivered
	Event_MigrationTargetReady           = managerv1.Event_MigrationTargetReady
	Event_MigrationSourceStoppedOutput   = managerv1.Event_MigrationSourceStoppedOutput
	Event_MigrationTargetApplied         = managerv1.Event_MigrationTargetApplied
	Event_MigrationAborted               = managerv1.Event_MigrationAborted
)

// Migration strategies.
const (
	StrategyStopThenStart = managerv1.MigrationStrategy_MIGRATION_STRATEGY_STOP_THEN_START
	StrategyOverlap       = managerv1.MigrationStrategy_MIGRATION_STRATEGY_OVERLAP
	StrategyHandover      = managerv1.MigrationStrategy_MIGRATION_STRATEGY_HANDOVER
)

// Migration phases.
const (
	PhaseProposing            = managerv1.MigrationPhase_MIGRATION_PHASE_PROPOSING
	PhasePlacing              = managerv1.MigrationPhase_MIGRATION_PHASE_PLACING
	PhaseLaunching            = managerv1.MigrationPhase_MIGRATION_PHASE_LAUNCHING
	PhaseSettingStateOnTarget = managerv1.MigrationPhase_MIGRATION_PHASE_SETTING_STATE_ON_TARGET
	PhaseAwaitingTargetReady  = managerv1.MigrationPhase_MIGRATION_PHASE_AWAITING_TARGET_READY
	PhaseAwaitingSourceStop   = managerv1.MigrationPhase_MIGRATION_PHASE_AWAITING_SOURCE_STOP
	PhaseApplying             = managerv1.MigrationPhase_MIGRATION_PHASE_APPLYING
	PhaseStoppingSource       = managerv1.MigrationPhase_MIGRATION_PHASE_STOPPING_SOURCE
	PhaseStartingTarget       = managerv1.MigrationPhase_MIGRATION_PHASE_STARTING_TARGET
	PhaseDone                 = managerv1.MigrationPhase_MIGRATION_PHASE_DONE
	PhaseAborted              = managerv1.MigrationPhase_MIGRATION_PHASE_ABORTED
)

// PhaseName is a migration phase as seed 004 names it ("stoppingSource").
func PhaseName(p MigrationPhase) string {
	return camel(strings.TrimPrefix(p.String(), "MIGRATION_PHASE_"))
}

// StrategyName is a strategy as seed 004 names it ("stopThenStart"; the
// unset strategy is the default, stopThenStart).
func StrategyName(s MigrationStrategy) string {
	if s == managerv1.MigrationStrategy_MIGRATION_STRATEGY_UNSPECIFIED {
		s = StrategyStopThenStart
	}
	return camel(strings.TrimPrefix(s.String(), "MIGRATION_STRATEGY_"))
}

// camel turns UPPER_SNAKE into lowerCamel.
func camel(upperSnake string) string {
	w := strings.Split(strings.ToLower(upperSnake), "_")
	for i := 1; i < len(w); i++ {
		if w[i] != "" {
			w[i] = strings.ToUpper(w[i][:1]) + w[i][1:]
		}
	}
	return strings.Join(w, "")
}

// NotifyMigrationGetState is the propose: ask the source instance what it
// would hand over. The answer comes on the event stream as migrationState
// (a payload, or a refusal). Errors: ErrNotFound (no such instance),
// ErrFailedPrecondition (no job socket session; locked by another
// migration), ErrUnavailable (its worker is not connected).
func (m *Manager) NotifyMigrationGetState(ctx context.Context, source *JobKey, migrationID string) error {
	const op = "NotifyMigrationGetState"
	if err := m.alive(op); err != nil {
		return err
	}
	_, err := m.client.NotifyMigrationGetState(ctx, connect.NewRequest(&managerv1.NotifyMigrationGetStateRequest{SourceJobKey: source, MigrationId: migrationID}))
	return wrapError(op, err)
}

// NotifyMigrationCutoverReady tells the source "the target is ready at
// payload; stop output at or after it" (payload is the target's own,
// relayed opaque). The source answers with migrationSourceStoppedOutput.
// Errors as NotifyMigrationGetState.
func (m *Manager) NotifyMigrationCutoverReady(ctx context.Context, source *JobKey, migrationID string, payload []byte) error {
	const op = "NotifyMigrationCutoverReady"
	if err := m.alive(op); err != nil {
		return err
	}
	_, err := m.client.NotifyMigrationCutoverReady(ctx, connect.NewRequest(&managerv1.NotifyMigrationCutoverReadyRequest{SourceJobKey: source, MigrationId: migrationID, Payload: payload}))
	return wrapError(op, err)
}

// NotifyMigrationCutoverApply tells the target "the source stopped output
// at payload; begin output from there". The target answers with
// migrationTargetApplied. Errors as NotifyMigrationGetState.
func (m *Manager) NotifyMigrationCutoverApply(ctx context.Context, target *JobKey, migrationID string, payload []byte) error {
	const op = "NotifyMigrationCutoverApply"
	if err := m.alive(op); err != nil {
		return err
	}
	_, err := m.client.NotifyMigrationCutoverApply(ctx, connect.NewRequest(&managerv1.NotifyMigrationCutoverApplyRequest{TargetJobKey: target, MigrationId: migrationID, Payload: payload}))
	return wrapError(op, err)
}

// AbortMigration is the Manager's wire abort (seed 000): MigrationAbort to
// the workers of both instances of jobID (the source resumes output, the
// target tears its migration state down). migrationID lets a worker ignore
// an abort meant for a predecessor. Errors: ErrNotFound (neither instance
// exists), ErrUnavailable (neither worker could be told).
func (m *Manager) AbortMigration(ctx context.Context, jobID, sourceRole, targetRole, reason, migrationID string) error {
	const op = "AbortMigration"
	if err := m.alive(op); err != nil {
		return err
	}
	_, err := m.client.AbortMigration(ctx, connect.NewRequest(&managerv1.AbortMigrationRequest{
		JobId: jobID, SourceRole: sourceRole, TargetRole: targetRole, Reason: reason, MigrationId: migrationID,
	}))
	return wrapError(op, err)
}

// CancelMigration is the AutoManager's abort of an in-flight migration
// (seed 004's abortMigration(migrationId, reason)): the clean rollback —
// abort on the wire, the target stopped, the source untouched. A migration
// that already ended changes nothing. Errors: ErrNotFound (unknown id),
// ErrFailedPrecondition (past the point of no return: it can only fail
// forward), ErrUnavailable (no AutoManager runs).
func (m *Manager) CancelMigration(ctx context.Context, migrationID, reason string) error {
	const op = "AbortMigration"
	if err := m.alive(op); err != nil {
		return err
	}
	_, err := m.client.AbortMigration(ctx, connect.NewRequest(&managerv1.AbortMigrationRequest{MigrationId: migrationID, Reason: reason}))
	return wrapError(op, err)
}

// MigrateOptions are MigrateJob's options.
type MigrateOptions struct {
	// TargetNodeID pins the target: that node or nowhere (requirements are
	// still checked). "" lets placement choose, the source's node excluded.
	TargetNodeID string
	// Strategy is stopThenStart (the default), overlap or handover.
	Strategy MigrationStrategy
	// SourceRole is the source instance's key (default: the job's current).
	SourceRole string
	// OverrideReservation lets the target onto an exclusively reserved hot
	// spare.
	OverrideReservation bool
}

// MigrateJob moves a running, AutoManager-placed job to another node. It
// returns once the target is placed and its start dispatched (phase
// launching); follow the rest with GetMigration or the event stream
// (migrationUpdated events). Errors: ErrNotFound (no such job),
// ErrFailedPrecondition (not placed by the AutoManager, not running,
// already migrating, the target is its node), ErrAborted (started and
// rolled back: the source refused, nothing fits — a pinned target says why
// it was rejected —, the dispatch failed), ErrUnavailable (no AutoManager).
func (m *Manager) MigrateJob(ctx context.Context, jobID string, opts MigrateOptions) (*MigrationState, error) {
	const op = "MigrateJob"
	if err := m.alive(op); err != nil {
		return nil, err
	}
	res, err := m.client.MigrateJob(ctx, connect.NewRequest(&managerv1.MigrateJobRequest{
		JobId: jobID, TargetNodeId: opts.TargetNodeID, Strategy: opts.Strategy, SourceRole: opts.SourceRole, OverrideReservation: opts.OverrideReservation,
	}))
	if err != nil {
		return nil, wrapError(op, err)
	}
	return res.Msg.GetMigration(), nil
}

// ListMigrations returns every migration the store holds (of jobID; "" =
// all), newest first: in flight, done and aborted until forgotten.
func (m *Manager) ListMigrations(ctx context.Context, jobID string) ([]*MigrationState, error) {
	const op = "ListMigrations"
	if err := m.alive(op); err != nil {
		return nil, err
	}
	res, err := m.client.ListMigrations(ctx, connect.NewRequest(&managerv1.ListMigrationsRequest{JobId: jobID}))
	if err != nil {
		return nil, wrapError(op, err)
	}
	return res.Msg.GetMigrations(), nil
}

// GetMigration returns one migration. Errors: ErrNotFound.
func (m *Manager) GetMigration(ctx context.Context, migrationID string) (*MigrationState, error) {
	const op = "GetMigration"
	if err := m.alive(op); err != nil {
		return nil, err
	}
	res, err := m.client.GetMigration(ctx, connect.NewRequest(&managerv1.GetMigrationRequest{MigrationId: migrationID}))
	if err != nil {
		return nil, wrapError(op, err)
	}
	return res.Msg, nil
}

// MigrationForJob returns the job's in-flight migration. Errors:
// ErrNotFound (none in flight).
func (m *Manager) MigrationForJob(ctx context.Context, jobID string) (*MigrationState, error) {
	const op = "MigrationForJob"
	if err := m.alive(op); err != nil {
		return nil, err
	}
	res, err := m.client.MigrationForJob(ctx, connect.NewRequest(&managerv1.MigrationForJobRequest{JobId: jobID}))
	if err != nil {
		return nil, wrapError(op, err)
	}
	return res.Msg, nil
}

// ForgetMigration deletes a terminal migration's record (true once
// deleted). Errors: ErrNotFound (no migration of that id),
// ErrFailedPrecondition (still in flight: abort it first).
func (m *Manager) ForgetMigration(ctx context.Context, migrationID string) (bool, error) {
	const op = "ForgetMigration"
	if err := m.alive(op); err != nil {
		return false, err
	}
	res, err := m.client.ForgetMigration(ctx, connect.NewRequest(&managerv1.ForgetMigrationRequest{MigrationId: migrationID}))
	if err != nil {
		return false, wrapError(op, err)
	}
	return res.Msg.GetForgotten(), nil
}

// ForgetTerminalMigrations deletes every done or aborted migration and
// returns their ids; in-flight ones are left alone.
func (m *Manager) ForgetTerminalMigrations(ctx context.Context) ([]string, error) {
	const op = "ForgetTerminalMigrations"
	if err := m.alive(op); err != nil {
		return nil, err
	}
	res, err := m.client.ForgetTerminalMigrations(ctx, connect.NewRequest(&managerv1.ForgetTerminalMigrationsRequest{}))
	if err != nil {
		return nil, wrapError(op, err)
	}
	return res.Msg.GetMigrationIds(), nil
}

// RecordMigration is the AutoManager's write-back of a migration's state:
// it creates the record (create) or replaces it if still at
// expectedRevision (0 = unconditionally), and returns the new revision.
// Errors: ErrFailedPrecondition (the revision moved, the record is gone or
// already done), ErrAlreadyExists (create of a known id), ErrInvalidArgument.
func (m *Manager) RecordMigration(ctx context.Context, st *MigrationState, expectedRevision uint64, create bool) (uint64, error) {
	const op = "RecordMigration"
	if err := m.alive(op); err != nil {
		return 0, err
	}
	res, err := m.client.RecordMigration(ctx, connect.NewRequest(&managerv1.RecordMigrationRequest{Migration: st, ExpectedRevision: expectedRevision, Create: create}))
	if err != nil {
		return 0, wrapError(op, err)
	}
	return res.Msg.GetRevision(), nil
}

// SetNodeDraining marks the node drained (placement puts nothing new on
// it; what runs keeps running) or not, and returns it. Errors: ErrNotFound.
func (m *Manager) SetNodeDraining(ctx context.Context, nodeID string, draining bool) (*Node, error) {
	const op = "SetNodeDraining"
	if err := m.alive(op); err != nil {
		return nil, err
	}
	res, err := m.client.SetNodeDraining(ctx, connect.NewRequest(&managerv1.SetNodeDrainingRequest{NodeId: nodeID, Draining: draining}))
	if err != nil {
		return nil, wrapError(op, err)
	}
	return res.Msg.GetNode(), nil
}
