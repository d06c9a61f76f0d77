package norsk

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/timestamppb"
	"sigs.k8s.io/yaml"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
)

// From norsk/manager/v1/bundle.proto: bundles (AutoManager v1). A bundle
// expands into replica jobs with the ids <bundleId>.<jobName>.<replicaIndex>,
// tagged bundleId, replicaIndex and jobName (and dormant while a manual-start
// job waits for StartBundleJob); replica 0 is the primary, 1 the backup, n
// replica-n.
type (
	Bundle              = managerv1.Bundle
	BundleJobSpec       = managerv1.BundleJobSpec
	ResiliencePolicy    = managerv1.ResiliencePolicy
	IntraReplicaRules   = managerv1.IntraReplicaRules
	BundleWithJobs      = managerv1.BundleWithJobs
	BundleJobStatus     = managerv1.BundleJobStatus
	BundleEvent         = managerv1.BundleEvent
	BundleDeleted       = managerv1.BundleDeleted
	Event_BundleCreated = managerv1.Event_BundleCreated
	Event_BundleUpdated = managerv1.Event_BundleUpdated
	Event_BundleDeleted = managerv1.Event_BundleDeleted
	AntiAffinity        = managerv1.AntiAffinity
	BundleState         = managerv1.BundleState
)

// AntiAffinity values.
const (
	AntiAffinityAllow  = managerv1.AntiAffinity_ANTI_AFFINITY_ALLOW
	AntiAffinityForbid = managerv1.AntiAffinity_ANTI_AFFINITY_FORBID
)

// BundleState values.
const (
	BundleStateLive     = managerv1.BundleState_BUNDLE_STATE_LIVE
	BundleStateDeleting = managerv1.BundleState_BUNDLE_STATE_DELETING
)

// CreateBundle creates bundle and its replica jobs (in one write) and returns
// the bundle's id: bundle.BundleId, or one the Manager makes up when it is
// empty. The Manager ignores the fields it owns (state, stop time, lease,
// revision, creation time). Jobs with start mode "manual" are created
// dormant; the others are placed by the AutoManager. Errors:
// ErrInvalidArgument (a malformed bundle — e.g. two jobs of one name, a
// coLocateWith or separateFrom naming no job of the bundle, a negative
// requiredCapacity, an unknown pool; the message names the field, e.g.
// "bundle.jobs[1].jobName"), ErrAlreadyExists (the bundle id, or the id of
// one of its replica jobs, is taken), ErrUnavailable.
func (m *Manager) CreateBundle(ctx context.Context, bundle *Bundle) (string, error) {
	const op = "CreateBundle"
	if err := m.alive(op); err != nil {
		return "", err
	}
	res, err := m.client.CreateBundle(ctx, connect.NewRequest(&managerv1.CreateBundleRequest{Bundle: bundle}))
	if err != nil {
		return "", wrapError(op, err)
	}
	return res.Msg.GetBundleId(), nil
}

// UpdateBundle replaces the specification of the live bundle
// bundle.BundleId and returns its new revision. With bundle.Revision set
// (the revision read from BundleById or ListBundles) the update applies only
// if the bundle is still at that revision; 0 overwrites whatever is there.
// Replica jobs new to the bundle are created, jobs no longer in it are
// stopped and deleted, and jobs whose template changed are rolled by the
// AutoManager one replica at a time; a job's dormant mark, the stop time and
// the lease are kept. Errors: ErrNotFound, ErrInvalidArgument,
// ErrFailedPrecondition (a stale revision, a bundle being deleted),
// ErrUnavailable.
func (m *Manager) UpdateBundle(ctx context.Context, bundle *Bundle) (uint64, error) {
	const op = "UpdateBundle"
	if err := m.alive(op); err != nil {
		return 0, err
	}
	res, err := m.client.UpdateBundle(ctx, connect.NewRequest(&managerv1.UpdateBundleRequest{Bundle: bundle}))
	if err != nil {
		return 0, wrapError(op, err)
	}
	return res.Msg.GetRevision(), nil
}

// DeleteBundle starts the deletion of the bundle bundleID: it is marked
// deleting (BundleStateDeleting) and every instance of its jobs is asked to
// stop; once they have stopped, the jobs and the bundle are removed (the
// deletion resumes across Manager restarts). Deleting a bundle already being
// deleted changes nothing. Errors: ErrNotFound, ErrInvalidArgument (a
// malformed id), ErrUnavailable.
func (m *Manager) DeleteBundle(ctx context.Context, bundleID string) error {
	const op = "DeleteBundle"
	if err := m.alive(op); err != nil {
		return err
	}
	_, err := m.client.DeleteBundle(ctx, connect.NewRequest(&managerv1.DeleteBundleRequest{BundleId: bundleID}))
	return wrapError(op, err)
}

// BundleById returns the bundle bundleID and, for every replica job
// (replica by replica, in the order of the bundle's jobs), its role, whether
// it is dormant, the node and phase of its instance and the soft placement
// rules that node breaks. Errors: ErrNotFound, ErrInvalidArgument.
func (m *Manager) BundleById(ctx context.Context, bundleID string) (*BundleWithJobs, error) {
	const op = "BundleById"
	if err := m.alive(op); err != nil {
		return nil, err
	}
	res, err := m.client.BundleById(ctx, connect.NewRequest(&managerv1.BundleByIdRequest{BundleId: bundleID}))
	if err != nil {
		return nil, wrapError(op, err)
	}
	return res.Msg, nil
}

// ListBundles returns every bundle, in id order, with its replica jobs as
// BundleById does.
func (m *Manager) ListBundles(ctx context.Context) ([]*BundleWithJobs, error) {
	const op = "ListBundles"
	if err := m.alive(op); err != nil {
		return nil, err
	}
	res, err := m.client.ListBundles(ctx, connect.NewRequest(&managerv1.ListBundlesRequest{}))
	if err != nil {
		return nil, wrapError(op, err)
	}
	return res.Msg.GetBundles(), nil
}

// StartBundleJob activates the job jobName of replica replicaIndex of the
// bundle bundleID: its dormant mark is cleared and the AutoManager places it.
// Starting a job that is not dormant changes nothing. Errors: ErrNotFound
// (bundle), ErrInvalidArgument (no such replica or job in the bundle),
// ErrFailedPrecondition (the bundle is being deleted), ErrUnavailable.
func (m *Manager) StartBundleJob(ctx context.Context, bundleID string, replicaIndex uint32, jobName string) error {
	const op = "StartBundleJob"
	if err := m.alive(op); err != nil {
		return err
	}
	_, err := m.client.StartBundleJob(ctx, connect.NewRequest(&managerv1.StartBundleJobRequest{
		BundleId: bundleID, ReplicaIndex: replicaIndex, JobName: jobName,
	}))
	return wrapError(op, err)
}

// StopBundleJobOptions are the optional parts of StopBundleJob.
type StopBundleJobOptions struct {
	// Grace is how long services get to exit before they are killed; 0 = the
	// worker's default, at most an hour. Sent in whole milliseconds.
	Grace time.Duration
}

// StopBundleJob stops the job jobName of replica replicaIndex of the bundle
// bundleID and keeps it down: the job is marked dormant (so the AutoManager
// does not place it again) and its instances are asked to stop. Stopping a
// dormant job changes nothing; StartBundleJob brings it back. Errors:
// ErrNotFound (bundle), ErrInvalidArgument (no such replica or job, a grace
// over an hour), ErrFailedPrecondition (the bundle is being deleted),
// ErrUnavailable.
func (m *Manager) StopBundleJob(ctx context.Context, bundleID string, replicaIndex uint32, jobName string, opts StopBundleJobOptions) error {
	const op = "StopBundleJob"
	if err := m.alive(op); err != nil {
		return err
	}
	_, err := m.client.StopBundleJob(ctx, connect.NewRequest(&managerv1.StopBundleJobRequest{
		BundleId: bundleID, ReplicaIndex: replicaIndex, JobName: jobName, GraceMs: durationMs32(opts.Grace),
	}))
	return wrapError(op, err)
}

// SetBundleStopTime sets when the bundle bundleID is deleted (as by
// DeleteBundle) to *stopAt, or clears it when stopAt is nil. No job is
// touched now; a time already past deletes the bundle at once. Errors:
// ErrNotFound, ErrInvalidArgument (a time outside the protobuf range),
// ErrFailedPrecondition (the bundle is being deleted), ErrUnavailable.
func (m *Manager) SetBundleStopTime(ctx context.Context, bundleID string, stopAt *time.Time) error {
	const op = "SetBundleStopTime"
	if err := m.alive(op); err != nil {
		return err
	}
	req := &managerv1.SetBundleStopTimeRequest{BundleId: bundleID}
	if stopAt != nil {
		req.StopAt = timestamppb.New(*stopAt)
	}
	_, err := m.client.SetBundleStopTime(ctx, connect.NewRequest(req))
	return wrapError(op, err)
}

// RenewBundleLease moves the lease of the bundle bundleID to ttl from now
// (the Manager's clock) and returns when it now runs out. A bundle whose
// lease runs out unrenewed is deleted, as by DeleteBundle; a bundle that was
// never renewed has no lease. ttl is sent in whole milliseconds and must be
// from a second to seven days. Errors: ErrNotFound, ErrInvalidArgument (ttl
// out of range), ErrFailedPrecondition (the bundle is being deleted),
// ErrUnavailable.
func (m *Manager) RenewBundleLease(ctx context.Context, bundleID string, ttl time.Duration) (time.Time, error) {
	const op = "RenewBundleLease"
	if err := m.alive(op); err != nil {
		return time.Time{}, err
	}
	res, err := m.client.RenewBundleLease(ctx, connect.NewRequest(&managerv1.RenewBundleLeaseRequest{
		BundleId: bundleID, TtlMs: ttl.Milliseconds(),
	}))
	if err != nil {
		return time.Time{}, wrapError(op, err)
	}
	return res.Msg.GetExpiresAt().AsTime(), nil
}

// DecodeBundleSpec reads one bundle specification written in YAML or JSON,
// with the protobuf JSON field names of Bundle (bundleId, resiliencePolicy,
// jobs[].jobName, jobs[].job, …) or the proto names, by the rules of
// DecodeJobSpec: short enum values (sameNode: forbid), strict types, and
// errors that name the field's path from "bundle", e.g.
//
//	bundle.jobs[0].job.services[0].restart.mode: unknown value "sometimes" (want one of never, on-failure, always)
//
// It checks the form only; the Manager validates the content when the bundle
// is created.
func DecodeBundleSpec(data []byte) (*Bundle, error) {
	const what = "bundle spec"
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) == 0 || trimmed[0] != '{' {
		js, err := yaml.YAMLToJSONStrict(data)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		trimmed = js
	}
	dec := json.NewDecoder(bytes.NewReader(trimmed))
	dec.UseNumber()
	var tree any
	if err := dec.Decode(&tree); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("%s: more than one JSON value", what)
	}
	if tree == nil {
		return nil, errors.New(what + ": empty")
	}
	b := &Bundle{}
	tree, err := normalizeMessage(b.ProtoReflect().Descriptor(), tree, "bundle")
	if err != nil {
		return nil, err
	}
	normalized, err := json.Marshal(tree)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	if err := protojson.Unmarshal(normalized, b); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return b, nil
}
