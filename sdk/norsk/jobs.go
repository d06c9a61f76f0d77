package norsk

import (
	"context"
	"fmt"
	"strings"
	"time"

	"connectrpc.com/connect"
	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
)

// CreateJob creates job and returns its hash, the revision UpdateJob must
// present. The Manager ignores job.State, job.CurrentHash and
// job.TerminalState. Errors: ErrInvalidArgument (a malformed spec; the
// message names the field), ErrAlreadyExists (the job id is taken),
// ErrUnavailable (no primary).
func (m *Manager) CreateJob(ctx context.Context, job *Job) (uint64, error) {
	const op = "CreateJob"
	if err := m.alive(op); err != nil {
		return 0, err
	}
	res, err := m.client.CreateJob(ctx, connect.NewRequest(&managerv1.CreateJobRequest{Job: job}))
	if err != nil {
		return 0, wrapError(op, err)
	}
	return res.Msg.GetHash(), nil
}

// UpdateJob replaces the specification of job.JobId and returns the new hash.
// job.CurrentHash must be the hash the caller read (from CreateJob, an
// earlier UpdateJob or JobById): a stale one is refused with
// ErrFailedPrecondition and changes nothing. Running instances keep the
// specification they were started with. Errors: ErrNotFound,
// ErrInvalidArgument, ErrFailedPrecondition (stale hash, terminal job),
// ErrUnavailable.
func (m *Manager) UpdateJob(ctx context.Context, job *Job) (uint64, error) {
	const op = "UpdateJob"
	if err := m.alive(op); err != nil {
		return 0, err
	}
	res, err := m.client.UpdateJob(ctx, connect.NewRequest(&managerv1.UpdateJobRequest{Job: job}))
	if err != nil {
		return 0, wrapError(op, err)
	}
	return res.Msg.GetHash(), nil
}

// DeleteJob deletes the job jobID; its live instances are stopped (reason
// userRequested, "job deleted") and leave their nodes once their workers
// confirm. Errors: ErrNotFound, ErrUnavailable.
func (m *Manager) DeleteJob(ctx context.Context, jobID string) error {
	const op = "DeleteJob"
	if err := m.alive(op); err != nil {
		return err
	}
	_, err := m.client.DeleteJob(ctx, connect.NewRequest(&managerv1.DeleteJobRequest{JobId: jobID}))
	return wrapError(op, err)
}

// JobById returns the job jobID with its history (newest first) and its
// instances. Errors: ErrNotFound.
func (m *Manager) JobById(ctx context.Context, jobID string) (*JobWithHistory, error) {
	const op = "JobById"
	if err := m.alive(op); err != nil {
		return nil, err
	}
	res, err := m.client.JobById(ctx, connect.NewRequest(&managerv1.JobByIdRequest{JobId: jobID}))
	if err != nil {
		return nil, wrapError(op, err)
	}
	return res.Msg, nil
}

// StartJobOptions are the optional parts of StartJob.
type StartJobOptions struct {
	// RuntimeRole is the role the job is told (NORSK_RUNTIME_ROLE); empty =
	// the instance's role.
	RuntimeRole string
	// DeferStart creates every container and starts none: the instance
	// becomes prepared, and StartPreparedJob starts it.
	DeferStart bool
	// MigrationID ties the start to a migration.
	MigrationID string
	// MigrationInitialState is handed, opaque, to the instance's job socket.
	MigrationInitialState []byte
	// MigrationHandover marks a handover's target: its job socket is handed
	// MigrationInitialState (possibly empty) and it waits for apply-from.
	MigrationHandover bool
	// Placement is the placer's account of the choice (the AutoManager sets
	// it): kept on the instance and carried by the placement event.
	Placement *PlacementEvent
}

// StartJob binds the instance (jobID, role) to the node nodeID and tells the
// node's worker to start it; role is typically "primary" or "backup". It
// returns the binding's fencing token (its store index): the instance's
// history entries carry it, and an event stream resumed after it sees every
// step of the start (provisioned, prepared or running, or stopping/stopped
// when the start fails). Errors: ErrNotFound (job or node),
// ErrFailedPrecondition (node offline, instance already bound elsewhere,
// terminal job), ErrInvalidArgument, ErrUnavailable.
func (m *Manager) StartJob(ctx context.Context, jobID, role, nodeID string, opts StartJobOptions) (uint64, error) {
	const op = "StartJob"
	if err := m.alive(op); err != nil {
		return 0, err
	}
	res, err := m.client.StartJob(ctx, connect.NewRequest(Start{JobID: jobID, Role: role, NodeID: nodeID, Options: opts}.request()))
	if err != nil {
		return 0, wrapError(op, err)
	}
	return res.Msg.GetFencingToken(), nil
}

// Start is one start of StartJobs: what StartJob takes.
type Start struct {
	JobID, Role, NodeID string
	Options             StartJobOptions
}

func (s Start) request() *managerv1.StartJobRequest {
	return &managerv1.StartJobRequest{
		JobId:  s.JobID,
		Role:   s.Role,
		NodeId: s.NodeID,
		Options: &managerv1.StartJobOptions{
			RuntimeRole:           s.Options.RuntimeRole,
			DeferStart:            s.Options.DeferStart,
			MigrationId:           s.Options.MigrationID,
			MigrationInitialState: s.Options.MigrationInitialState,
			MigrationHandover:     s.Options.MigrationHandover,
			Placement:             s.Options.Placement,
		},
	}
}

// StartOutcome is one start's result: its fencing token, or Err (an *Error
// matching the sentinels as StartJob's would: ErrNotFound,
// ErrFailedPrecondition, ...).
type StartOutcome struct {
	FencingToken uint64
	Err          error
}

// MaxStartJobs is the most starts one StartJobs call takes.
const MaxStartJobs = 1000

// StartJobs binds many instances in one store write — a placement plan —
// each exactly as StartJob would, succeeding or failing on its own. It
// returns one outcome per start, in order; the error is for the call as a
// whole: ErrInvalidArgument (no starts, more than MaxStartJobs, an
// instance twice, a malformed item), ErrUnavailable.
func (m *Manager) StartJobs(ctx context.Context, starts []Start) ([]StartOutcome, error) {
	const op = "StartJobs"
	if err := m.alive(op); err != nil {
		return nil, err
	}
	req := &managerv1.StartJobsRequest{Starts: make([]*managerv1.StartJobRequest, len(starts))}
	for i, s := range starts {
		req.Starts[i] = s.request()
	}
	res, err := m.client.StartJobs(ctx, connect.NewRequest(req))
	if err != nil {
		return nil, wrapError(op, err)
	}
	got := res.Msg.GetResults()
	if len(got) != len(starts) {
		return nil, &Error{Op: op, Code: connect.CodeInternal, Message: fmt.Sprintf("the Manager answered %d results for %d starts", len(got), len(starts))}
	}
	out := make([]StartOutcome, len(got))
	for i, r := range got {
		if r.GetErrorCode() == "" {
			out[i].FencingToken = r.GetFencingToken()
			continue
		}
		var code connect.Code
		if code.UnmarshalText([]byte(strings.ToLower(r.GetErrorCode()))) != nil {
			code = connect.CodeUnknown
		}
		out[i].Err = &Error{Op: op, Code: code, Message: r.GetErrorMessage()}
	}
	return out, nil
}

// StopJobOptions are the optional parts of StopJob.
type StopJobOptions struct {
	// MigrationID ties the stop to a migration.
	MigrationID string
	// Grace is how long services get to exit before they are killed; 0 = the
	// worker's default. Sent in whole milliseconds.
	Grace time.Duration
	// Reason is recorded in the instance's stopping history entry.
	Reason string
}

// StopJob stops the instance (jobID, role) running on nodeID. It returns once
// the Manager has recorded the stop; the instance's history then shows
// stopping and, when its services have exited, stopped. Stopping an
// instance that is stopping or stopped changes nothing and is not an error.
// Errors: ErrNotFound (job, or no such instance on the node),
// ErrFailedPrecondition, ErrUnavailable.
func (m *Manager) StopJob(ctx context.Context, jobID, role, nodeID string, opts StopJobOptions) error {
	const op = "StopJob"
	if err := m.alive(op); err != nil {
		return err
	}
	_, err := m.client.StopJob(ctx, connect.NewRequest(&managerv1.StopJobRequest{
		JobId:  jobID,
		Role:   role,
		NodeId: nodeID,
		Options: &managerv1.StopJobOptions{
			MigrationId: opts.MigrationID,
			GraceMs:     durationMs32(opts.Grace),
			Reason:      opts.Reason,
		},
	}))
	return wrapError(op, err)
}

// StartPreparedJob starts an instance that StartJob provisioned with
// DeferStart (every container exists, none runs). The worker answers with a
// running entry in the job's history. Starting one that runs already changes
// nothing and is not an error. Errors: ErrNotFound, ErrFailedPrecondition
// (the instance is neither prepared nor running on nodeID), ErrUnavailable.
func (m *Manager) StartPreparedJob(ctx context.Context, jobID, role, nodeID string) error {
	const op = "StartPreparedJob"
	if err := m.alive(op); err != nil {
		return err
	}
	_, err := m.client.StartPreparedJob(ctx, connect.NewRequest(&managerv1.StartPreparedJobRequest{JobId: jobID, Role: role, NodeId: nodeID}))
	return wrapError(op, err)
}

// CompleteJob marks the job completed: its running instances are stopped and
// it is never started again (its terminal state is completed). Completing a
// completed job changes nothing and is not an error. Errors: ErrNotFound,
// ErrFailedPrecondition (the job has been marked failed), ErrUnavailable.
func (m *Manager) CompleteJob(ctx context.Context, jobID string) error {
	const op = "CompleteJob"
	if err := m.alive(op); err != nil {
		return err
	}
	_, err := m.client.CompleteJob(ctx, connect.NewRequest(&managerv1.CompleteJobRequest{JobId: jobID}))
	return wrapError(op, err)
}

// MarkJobFailed records a durable, terminal failed verdict on the job with
// reason (the AutoManager's writeback when it gives up), so that it is not
// placed again, even after a restart. Marking a failed job again changes
// nothing (the first verdict and reason stand) and is not an error. Errors:
// ErrNotFound, ErrFailedPrecondition (the job has completed),
// ErrInvalidArgument (empty reason), ErrUnavailable.
func (m *Manager) MarkJobFailed(ctx context.Context, jobID, reason string) error {
	const op = "MarkJobFailed"
	if err := m.alive(op); err != nil {
		return err
	}
	_, err := m.client.MarkJobFailed(ctx, connect.NewRequest(&managerv1.MarkJobFailedRequest{JobId: jobID, Reason: reason}))
	return wrapError(op, err)
}

// durationMs32 converts d to whole milliseconds, saturating at the uint32
// range (not positive = 0; under a millisecond = 1).
func durationMs32(d time.Duration) uint32 {
	ms := d.Milliseconds()
	switch {
	case d <= 0:
		return 0
	case ms == 0:
		return 1
	case ms > int64(^uint32(0)):
		return ^uint32(0)
	}
	return uint32(ms)
}
