package state

import (
	"google.golang.org/protobuf/proto"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/pkg/apierr"
	"github.com/norsk-go/norsk-manager/pkg/jobspec"
)

func (t *tx) bundle(id string) (*managerv1.Bundle, error) {
	b := t.read().Bundle(nil, id)
	if b == nil {
		return nil, apierr.NotFoundf("no bundle %q", id)
	}
	return b, nil
}

// bundleJobIDs are the ids of every replica job a bundle expands into.
func (t *tx) putBundle(b *managerv1.Bundle) {
	b.Revision = t.index
	t.insert(tableBundles, b)
}

func (t *tx) bundleEvent(b *managerv1.Bundle, reason string) *managerv1.BundleEvent {
	return &managerv1.BundleEvent{Bundle: proto.Clone(b).(*managerv1.Bundle), Reason: reason}
}

// createBundle stores the bundle and creates its replica jobs in the same
// write: a bundle never exists without its jobs.
func (t *tx) createBundle(c *storev1.CreateBundle) error {
	if err := needKey("bundle id", c.GetBundle().GetBundleId()); err != nil {
		return err
	}
	b := proto.Clone(c.GetBundle()).(*managerv1.Bundle)
	if t.read().Bundle(nil, b.GetBundleId()) != nil {
		return apierr.AlreadyExistsf("bundle %q already exists", b.GetBundleId())
	}
	for _, id := range jobspec.BundleJobIDs(b) {
		if t.read().Job(nil, id) != nil {
			return apierr.AlreadyExistsf("job %q (of bundle %q) already exists", id, b.GetBundleId())
		}
	}
	b.State = managerv1.BundleState_BUNDLE_STATE_LIVE
	b.CreatedAt = t.now
	b.DeletingReason = ""
	t.putBundle(b)
	for r := 0; r < jobspec.Replicas(b); r++ {
		for i := range b.GetJobs() {
			if err := t.createJob(&storev1.CreateJob{Job: jobspec.ExpandBundleJob(b, i, r)}); err != nil {
				return err
			}
		}
	}
	t.emit(&managerv1.Event{Kind: &managerv1.Event_BundleCreated{BundleCreated: t.bundleEvent(b, "created")}})
	return nil
}

// updateBundle replaces a live bundle's specification. Replica jobs that
// are new are created; jobs no longer in it are deleted (their instances
// stopped); jobs whose template changed are left for the AutoManager to
// roll one replica at a time, so the bundle never restarts everywhere at
// once. A job's dormant mark is kept.
func (t *tx) updateBundle(c *storev1.UpdateBundle) error {
	if c.GetBundle() == nil {
		return errNoPayload("bundle")
	}
	nb := proto.Clone(c.GetBundle()).(*managerv1.Bundle)
	old, err := t.bundle(nb.GetBundleId())
	if err != nil {
		return err
	}
	if old.GetState() != managerv1.BundleState_BUNDLE_STATE_LIVE {
		return apierr.FailedPreconditionf("bundle %q is being deleted; it cannot be updated", nb.GetBundleId())
	}
	if nb.GetRevision() != 0 && nb.GetRevision() != old.GetRevision() {
		return apierr.FailedPreconditionf("bundle %q has changed: the update is against revision %d, the bundle is at revision %d; read it again and retry",
			nb.GetBundleId(), nb.GetRevision(), old.GetRevision())
	}
	keep := map[string]bool{}
	for _, id := range jobspec.BundleJobIDs(nb) {
		keep[id] = true
	}
	for _, id := range jobspec.BundleJobIDs(old) {
		if !keep[id] && t.read().Job(nil, id) != nil {
			if err := t.deleteJob(&storev1.DeleteJob{JobId: id}); err != nil {
				return err
			}
		}
	}
	for r := 0; r < jobspec.Replicas(nb); r++ {
		for i := range nb.GetJobs() {
			job := jobspec.ExpandBundleJob(nb, i, r)
			if t.read().Job(nil, job.GetJobId()) != nil {
				continue
			}
			if err := t.createJob(&storev1.CreateJob{Job: job}); err != nil {
				return err
			}
		}
	}
	nb.State = old.GetState()
	nb.CreatedAt = old.GetCreatedAt()
	nb.StopAt = old.GetStopAt()
	nb.LeaseExpiresAt = old.GetLeaseExpiresAt()
	t.putBundle(nb)
	t.emit(&managerv1.Event{Kind: &managerv1.Event_BundleUpdated{BundleUpdated: t.bundleEvent(nb, "updated")}})
	return nil
}

// instanceGone reports whether an instance no longer runs anywhere the
// Manager could reach: stopped, or on a node that is lost, terminated or
// gone (its worker stops it under the superseded token if it returns).
func (t *tx) instanceGone(in *managerv1.Instance) bool {
	if in.GetPhase() == phaseStopped {
		return true
	}
	n := t.read().Node(nil, in.GetNodeId())
	if n == nil {
		return true
	}
	switch n.GetNode().GetState() {
	case nodeOnline, managerv1.NodeState_NODE_STATE_STOPPING:
		return false
	}
	return true
}

// deleteBundle runs the first step of a deletion (mark DELETING, ask every
// instance to stop) or, called again once every instance is gone, the last
// (delete the jobs and the bundle). The answer is true when the bundle is
// gone.
func (t *tx) deleteBundle(c *storev1.DeleteBundle) (any, error) {
	b, err := t.bundle(c.GetBundleId())
	if err != nil {
		return false, err
	}
	ids := jobspec.BundleJobIDs(b)
	if b.GetState() == managerv1.BundleState_BUNDLE_STATE_LIVE {
		nb := proto.Clone(b).(*managerv1.Bundle)
		nb.State = managerv1.BundleState_BUNDLE_STATE_DELETING
		nb.DeletingReason = c.GetReason()
		t.putBundle(nb)
		for _, id := range ids {
			if t.read().Job(nil, id) != nil {
				t.stopAllInstances(id, managerv1.StoppingReason_STOPPING_REASON_USER_REQUESTED, "bundle deleted: "+c.GetReason())
			}
		}
		t.emit(&managerv1.Event{Kind: &managerv1.Event_BundleUpdated{BundleUpdated: t.bundleEvent(nb, "deleting: "+c.GetReason())}})
		b = nb
	}
	for _, id := range ids {
		for _, in := range t.read().InstancesOfJob(nil, id) {
			if !t.instanceGone(in) {
				return false, nil // still stopping: a later call finishes
			}
		}
	}
	for _, id := range ids {
		if t.read().Job(nil, id) != nil {
			if err := t.deleteJob(&storev1.DeleteJob{JobId: id}); err != nil {
				return false, err
			}
		}
	}
	t.delete(tableBundles, b)
	t.emit(&managerv1.Event{Kind: &managerv1.Event_BundleDeleted{BundleDeleted: &managerv1.BundleDeleted{BundleId: b.GetBundleId(), Reason: b.GetDeletingReason()}}})
	return true, nil
}

// bundleJob finds one replica job of a live bundle.
func (t *tx) bundleJob(bundleID string, replica uint32, jobName string) (*managerv1.Bundle, *storev1.JobRecord, error) {
	b, err := t.bundle(bundleID)
	if err != nil {
		return nil, nil, err
	}
	if b.GetState() != managerv1.BundleState_BUNDLE_STATE_LIVE {
		return nil, nil, apierr.FailedPreconditionf("bundle %q is being deleted", bundleID)
	}
	if int(replica) >= jobspec.Replicas(b) {
		return nil, nil, apierr.Invalid("replicaIndex", "bundle %q has %d replica(s); %d is not one", bundleID, jobspec.Replicas(b), replica)
	}
	found := false
	for _, j := range b.GetJobs() {
		found = found || j.GetJobName() == jobName
	}
	if !found {
		return nil, nil, apierr.Invalid("jobName", "bundle %q has no job %q", bundleID, jobName)
	}
	rec, err := t.job(jobspec.BundleJobID(bundleID, jobName, int(replica)))
	if err != nil {
		return nil, nil, err
	}
	return b, rec, nil
}

// setBundleJobDormant marks a replica job dormant (stopping its instances
// with the grace given) or clears the mark. Either is idempotent.
func (t *tx) setBundleJobDormant(c *storev1.SetBundleJobDormant) error {
	_, rec, err := t.bundleJob(c.GetBundleId(), c.GetReplicaIndex(), c.GetJobName())
	if err != nil {
		return err
	}
	id := rec.GetJob().GetJobId()
	dormant := rec.GetJob().GetTags()[jobspec.TagDormant] == "true"
	if c.GetDormant() {
		for _, in := range t.read().InstancesOfJob(nil, id) {
			if in.GetDesired() != desiredStopped {
				t.requestStop(in, managerv1.StoppingReason_STOPPING_REASON_USER_REQUESTED, "stopped by StopBundleJob", c.GetGraceMs(), "")
			}
		}
	}
	if dormant == c.GetDormant() {
		return nil
	}
	rec = t.read().Job(nil, id)
	job := proto.Clone(rec.GetJob()).(*managerv1.Job)
	if c.GetDormant() {
		job.Tags[jobspec.TagDormant] = "true"
	} else {
		delete(job.Tags, jobspec.TagDormant)
	}
	job.CurrentHash = t.index
	e := t.entry()
	e.Event = &managerv1.JobHistoryEntry_Updated{Updated: &managerv1.JobUpdated{PreviousHash: rec.GetJob().GetCurrentHash(), Hash: job.GetCurrentHash()}}
	nrec := t.withHistory(withJob(rec, job), e)
	nrec.ModifyIndex = t.index
	nrec.UpdatedAt = t.now
	t.putJob(nrec, e)
	return nil
}

// setBundleStopTime sets or clears the time the bundle is deleted at; no
// job is touched.
func (t *tx) setBundleStopTime(c *storev1.SetBundleStopTime) error {
	b, err := t.bundle(c.GetBundleId())
	if err != nil {
		return err
	}
	if b.GetState() != managerv1.BundleState_BUNDLE_STATE_LIVE {
		return apierr.FailedPreconditionf("bundle %q is being deleted", c.GetBundleId())
	}
	nb := proto.Clone(b).(*managerv1.Bundle)
	nb.StopAt = c.GetStopAt()
	t.putBundle(nb)
	reason := "stop time cleared"
	if nb.StopAt != nil {
		reason = "stop time set"
	}
	t.emit(&managerv1.Event{Kind: &managerv1.Event_BundleUpdated{BundleUpdated: t.bundleEvent(nb, reason)}})
	return nil
}

// renewBundleLease moves the bundle's lease expiry; no job is touched.
func (t *tx) renewBundleLease(c *storev1.RenewBundleLease) error {
	b, err := t.bundle(c.GetBundleId())
	if err != nil {
		return err
	}
	if b.GetState() != managerv1.BundleState_BUNDLE_STATE_LIVE {
		return apierr.FailedPreconditionf("bundle %q is being deleted; its lease cannot be renewed", c.GetBundleId())
	}
	if c.GetExpiresAt() == nil {
		return apierr.Invalid("expiresAt", "is required")
	}
	nb := proto.Clone(b).(*managerv1.Bundle)
	nb.LeaseExpiresAt = c.GetExpiresAt()
	t.putBundle(nb)
	t.emit(&managerv1.Event{Kind: &managerv1.Event_BundleUpdated{BundleUpdated: t.bundleEvent(nb, "lease renewed")}})
	return nil
}

// setLeasesPaused pauses or resumes leases. Resuming while running, or
// pausing while paused, changes nothing.
func (t *tx) setLeasesPaused(c *storev1.SetLeasesPaused) error {
	cur := t.read().LeaseState()
	if cur.GetPaused() == c.GetPaused() {
		return nil
	}
	ls := &storev1.LeaseState{Paused: c.GetPaused(), By: c.GetBy(), Since: t.now, ChangedIndex: t.index}
	if c.GetPaused() {
		ls.Reason = c.GetReason()
	}
	t.insert(tableSingletons, &singleton{Key: singletonLeases, Msg: ls})
	t.emit(&managerv1.Event{Kind: &managerv1.Event_LeaseStatus{LeaseStatus: &managerv1.LeaseStatus{
		Paused: ls.GetPaused(), Reason: ls.GetReason(), By: ls.GetBy(), Since: ls.GetSince(),
	}}})
	return nil
}
