package norsk

import (
	"context"

	"connectrpc.com/connect"
	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
)

// From norsk/manager/v1/lease.proto: the leases of lease-protected jobs
// (Job.LeaseProtected). A lease-protected instance runs only while its
// node's worker holds a lease: a worker that no Manager member has answered
// for two thirds of the lease TTL stops it, and the Manager starts a lost
// holder's job elsewhere only once its lease has expired.
type (
	LeaseStatus = managerv1.LeaseStatus
	Lease       = managerv1.Lease
)

// PauseLeases pauses leases, for a single Manager's maintenance: workers
// keep their lease-protected jobs without refreshing their leases, and no
// such job whose holder was lost starts again until ResumeLeases. reason
// (shown to every operator) and by (who pauses) are required. Pausing while
// paused changes nothing. Errors: ErrInvalidArgument (an empty reason or
// by), ErrPermissionDenied (not an admin token), ErrUnavailable (no
// primary).
func (m *Manager) PauseLeases(ctx context.Context, reason, by string) error {
	const op = "PauseLeases"
	if err := m.alive(op); err != nil {
		return err
	}
	_, err := m.client.PauseLeases(ctx, connect.NewRequest(&managerv1.PauseLeasesRequest{Reason: reason, By: by}))
	return wrapError(op, err)
}

// ResumeLeases ends a pause; every lease's grace then runs from now. by
// (who resumes) is required. Resuming while not paused changes nothing.
// Errors: ErrInvalidArgument (an empty by), ErrPermissionDenied (not an
// admin token), ErrUnavailable (no primary).
func (m *Manager) ResumeLeases(ctx context.Context, by string) error {
	const op = "ResumeLeases"
	if err := m.alive(op); err != nil {
		return err
	}
	_, err := m.client.ResumeLeases(ctx, connect.NewRequest(&managerv1.ResumeLeasesRequest{By: by}))
	return wrapError(op, err)
}

// GetLeaseStatus returns whether leases are paused (with the reason, who
// paused them and since when), the lease TTL workers are given, and every
// lease held now: one per lease-protected instance that has not stopped,
// with its node, fencing token, when it was last refreshed, when it
// expires and whether it has. Only the primary hears the workers'
// refreshes: a follower asks it. Errors: ErrUnavailable (no primary, or
// one that has not begun driving the workers yet).
func (m *Manager) GetLeaseStatus(ctx context.Context) (*LeaseStatus, error) {
	const op = "GetLeaseStatus"
	if err := m.alive(op); err != nil {
		return nil, err
	}
	res, err := m.client.GetLeaseStatus(ctx, connect.NewRequest(&managerv1.GetLeaseStatusRequest{}))
	if err != nil {
		return nil, wrapError(op, err)
	}
	return res.Msg, nil
}
