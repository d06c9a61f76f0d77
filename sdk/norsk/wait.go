package norsk

import (
	"context"
	"fmt"
	"slices"

	"connectrpc.com/connect"
)

// WaitForJob waits until the job jobID has an instance of role (any role
// when role is "") in phase, and returns the job as it was then. It follows
// the event stream (no polling): it subscribes, reads the job once, then
// looks at each of the job's events, so a phase reached at any moment
// after the call starts is seen, and one reached before is answered at
// once. It waits for as long as ctx allows: give ctx a deadline.
//
// Errors: ErrInvalidArgument (an empty jobID or an unspecified phase),
// ErrNotFound (no such job, or it was deleted while waiting), ErrCanceled
// or ErrDeadlineExceeded (ctx ended first), and what the event stream ends
// with.
func (m *Manager) WaitForJob(ctx context.Context, jobID, role string, phase InstancePhase) (*JobWithHistory, error) {
	const op = "WaitForJob"
	switch {
	case jobID == "":
		return nil, &Error{Op: op, Code: connect.CodeInvalidArgument, Message: "jobId: must not be empty"}
	case phase == InstancePhaseUnspecified:
		return nil, &Error{Op: op, Code: connect.CodeInvalidArgument, Message: "phase: must be given"}
	}
	reached := func(j *JobWithHistory) bool {
		return slices.ContainsFunc(j.GetInstances(), func(in *Instance) bool {
			return (role == "" || in.GetRole() == role) && in.GetPhase() == phase
		})
	}
	return waitFor(ctx, m, op, EventStreamSettings{SkipSnapshot: true, JobIDs: []string{jobID}},
		func(ctx context.Context) (*JobWithHistory, error) { return m.JobById(ctx, jobID) },
		func(ev *Event) (*JobWithHistory, bool, error) {
			if ev.GetJobDeleted().GetJobId() == jobID {
				return nil, true, &Error{Op: op, Code: connect.CodeNotFound, Message: fmt.Sprintf("job %q was deleted", jobID)}
			}
			j := EventJob(ev)
			if j.GetJob().GetJobId() != jobID {
				return nil, false, nil
			}
			return j, reached(j), nil
		},
		func(j *JobWithHistory) (bool, error) { return reached(j), nil })
}

// WaitForMigration waits until the migration migrationID is in one of
// phases (when none are given: a terminal phase, PhaseDone or
// PhaseAborted) and returns its record as it was then. It follows the event
// stream as WaitForJob does.
//
// A migration that ends in a terminal phase not among phases will never
// reach them: WaitForMigration then returns its record and an
// ErrFailedPrecondition naming the phase it ended in. Other errors:
// ErrInvalidArgument (an empty migrationID), ErrNotFound (no such
// migration, or it was forgotten while waiting), ErrCanceled or
// ErrDeadlineExceeded (ctx ended first), and what the event stream ends
// with.
func (m *Manager) WaitForMigration(ctx context.Context, migrationID string, phases ...MigrationPhase) (*MigrationState, error) {
	const op = "WaitForMigration"
	if migrationID == "" {
		return nil, &Error{Op: op, Code: connect.CodeInvalidArgument, Message: "migrationId: must not be empty"}
	}
	if len(phases) == 0 {
		phases = []MigrationPhase{PhaseDone, PhaseAborted}
	}
	check := func(st *MigrationState) (bool, error) {
		p := st.GetPhase()
		switch {
		case slices.Contains(phases, p):
			return true, nil
		case p == PhaseDone || p == PhaseAborted:
			return true, &Error{Op: op, Code: connect.CodeFailedPrecondition,
				Message: fmt.Sprintf("migration %s ended %s, not in %v", migrationID, p, phases)}
		}
		return false, nil
	}
	kinds := []EventKind{EventKindMigrationUpdated, EventKindMigrationForgotten}
	return waitFor(ctx, m, op, EventStreamSettings{SkipSnapshot: true, Kinds: kinds},
		func(ctx context.Context) (*MigrationState, error) { return m.GetMigration(ctx, migrationID) },
		func(ev *Event) (*MigrationState, bool, error) {
			if slices.Contains(ev.GetMigrationForgotten().GetMigrationIds(), migrationID) {
				return nil, true, &Error{Op: op, Code: connect.CodeNotFound, Message: fmt.Sprintf("migration %s was forgotten", migrationID)}
			}
			st := EventMigration(ev)
			if st.GetMigrationId() != migrationID {
				return nil, false, nil
			}
			done, err := check(st)
			return st, done, err
		},
		check)
}

// waitFor is the loop of the waits: subscribe, read the object once (read),
// then look at events (onEvent) until one says done. A resync snapshot
// (the stream could not resume exactly) reads the object again.
func waitFor[T any](ctx context.Context, m *Manager, op string, settings EventStreamSettings,
	read func(context.Context) (T, error),
	onEvent func(*Event) (T, bool, error),
	check func(T) (bool, error),
) (T, error) {
	var zero T
	if err := m.alive(op); err != nil {
		return zero, err
	}
	s := m.EventStream(ctx, settings)
	defer s.Close()
	readAndCheck := func() (T, bool, error) {
		v, err := read(ctx)
		if err != nil {
			return zero, true, wrapError(op, err)
		}
		done, err := check(v)
		return v, done, err
	}
	v, done, err := readAndCheck()
	if done {
		return v, err
	}
	for s.Next() {
		ev := s.Event()
		if idc := ev.GetInitialDataComplete(); idc != nil {
			if idc.GetResync() {
				if v, done, err := readAndCheck(); done {
					return v, err
				}
			}
			continue
		}
		if v, done, err := onEvent(ev); done {
			return v, err
		}
	}
	if err := s.Err(); err != nil {
		return zero, wrapError(op, err)
	}
	if err := ctx.Err(); err != nil {
		return zero, wrapError(op, err)
	}
	return zero, &Error{Op: op, Code: connect.CodeCanceled, Message: "the event stream ended"}
}
