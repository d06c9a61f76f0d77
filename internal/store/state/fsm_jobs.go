package state

import (
	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/pkg/apierr"
)

func (t *tx) job(id string) (*storev1.JobRecord, error) {
	rec := t.read().Job(nil, id)
	if rec == nil {
		return nil, apierr.NotFoundf("no job %q", id)
	}
	return rec, nil
}

// entry makes a history entry stamped with the command's time and index.
func (t *tx) entry() *managerv1.JobHistoryEntry {
	return &managerv1.JobHistoryEntry{Timestamp: t.now, Index: t.index}
}

// withHistory returns a copy of rec with entries prepended (newest first;
// entries given oldest first), trimmed to the history limit.
func (t *tx) withHistory(rec *storev1.JobRecord, entries ...*managerv1.JobHistoryEntry) *storev1.JobRecord {
	n := len(entries) + len(rec.GetHistory())
	if n > t.s.limits.MaxHistory {
		n = t.s.limits.MaxHistory
	}
	h := make([]*managerv1.JobHistoryEntry, 0, n)
	for i := len(entries) - 1; i >= 0 && len(h) < n; i-- {
		h = append(h, entries[i])
	}
	for _, e := range rec.GetHistory() {
		if len(h) == n {
			break
		}
		h = append(h, e)
	}
	return &storev1.JobRecord{
		Job:         rec.GetJob(),
		History:     h,
		CreateIndex: rec.GetCreateIndex(),
		ModifyIndex: rec.GetModifyIndex(),
		CreatedAt:   rec.GetCreatedAt(),
		UpdatedAt:   rec.GetUpdatedAt(),
	}
}

// withJob returns a copy of rec holding job.
func withJob(rec *storev1.JobRecord, job *managerv1.Job) *storev1.JobRecord {
	return &storev1.JobRecord{
		Job:         job,
		History:     rec.GetHistory(),
		CreateIndex: rec.GetCreateIndex(),
		ModifyIndex: rec.GetModifyIndex(),
		CreatedAt:   rec.GetCreatedAt(),
		UpdatedAt:   rec.GetUpdatedAt(),
	}
}

// putJobEvents stores rec and raises one job event per new entry (kind
// created for a JobCreated entry, updated otherwise).
func (t *tx) putJob(rec *storev1.JobRecord, entries ...*managerv1.JobHistoryEntry) {
	t.insert(tableJobs, rec)
	for _, e := range entries {
		ev := &managerv1.JobEvent{Entry: e}
		t.events = append(t.events, &managerv1.Event{})
		pos := len(t.events) - 1
		// The job view is rendered once the whole command has applied, so
		// every event of the command shows the job as it ended.
		t.deferView(pos, rec.GetJob().GetJobId(), ev, e.GetCreated() != nil)
	}
}

// touchJob raises a job-updated event (with no history entry) for a change
// that adds none, such as an instance's desired state.
func (t *tx) touchJob(jobID string) {
	ev := &managerv1.JobEvent{}
	t.events = append(t.events, &managerv1.Event{})
	t.deferView(len(t.events)-1, jobID, ev, false)
}

// deferView fills event pos with the final view of the job when the command
// commits.
func (t *tx) deferView(pos int, jobID string, ev *managerv1.JobEvent, created bool) {
	if created {
		t.events[pos].Kind = &managerv1.Event_JobCreated{JobCreated: ev}
	} else {
		t.events[pos].Kind = &managerv1.Event_JobUpdated{JobUpdated: ev}
	}
	t.pendingViews = append(t.pendingViews, pendingView{jobID: jobID, ev: ev})
}

func (t *tx) createJob(c *storev1.CreateJob) error {
	job := c.GetJob()
	if job == nil {
		return errNoPayload("job")
	}
	if err := needKey("job id", job.GetJobId()); err != nil {
		return err
	}
	if t.read().Job(nil, job.GetJobId()) != nil {
		return apierr.AlreadyExistsf("job %q already exists", job.GetJobId())
	}
	job.State = managerv1.JobState_JOB_STATE_PRE
	job.TerminalState = nil
	job.CurrentHash = t.index
	e := t.entry()
	e.Event = &managerv1.JobHistoryEntry_Created{Created: &managerv1.JobCreated{}}
	rec := &storev1.JobRecord{
		Job:         job,
		History:     []*managerv1.JobHistoryEntry{e},
		CreateIndex: t.index,
		ModifyIndex: t.index,
		CreatedAt:   t.now,
		UpdatedAt:   t.now,
	}
	t.putJob(rec, e)
	return nil
}

func (t *tx) updateJob(c *storev1.UpdateJob) error {
	job := c.GetJob()
	if job == nil {
		return errNoPayload("job")
	}
	rec, err := t.job(job.GetJobId())
	if err != nil {
		return err
	}
	old := rec.GetJob()
	if job.GetCurrentHash() != old.GetCurrentHash() {
		return apierr.FailedPreconditionf("job %q has changed: the update is against hash %d, the job is at hash %d; read it again and retry",
			job.GetJobId(), job.GetCurrentHash(), old.GetCurrentHash())
	}
	job.State = old.GetState()
	job.TerminalState = old.GetTerminalState()
	job.CurrentHash = t.index
	e := t.entry()
	e.Event = &managerv1.JobHistoryEntry_Updated{Updated: &managerv1.JobUpdated{PreviousHash: old.GetCurrentHash(), Hash: job.GetCurrentHash()}}
	nrec := t.withHistory(withJob(rec, job), e)
	nrec.ModifyIndex = t.index
	nrec.UpdatedAt = t.now
	t.putJob(nrec, e)
	return nil
}

func (t *tx) deleteJob(c *storev1.DeleteJob) error {
	rec, err := t.job(c.GetJobId())
	if err != nil {
		return err
	}
	id := rec.GetJob().GetJobId()
	for _, in := range t.read().InstancesOfJob(nil, id) {
		if in.GetPhase() == managerv1.InstancePhase_INSTANCE_PHASE_STOPPED {
			t.delete(tableInstances, in)
			continue
		}
		// The instance outlives its job until its worker confirms the stop.
		t.requestStop(in, managerv1.StoppingReason_STOPPING_REASON_USER_REQUESTED, "job deleted", 0, "")
	}
	t.delete(tableJobs, rec)
	t.dropPendingViews(id)
	t.emit(&managerv1.Event{Kind: &managerv1.Event_JobDeleted{JobDeleted: &managerv1.JobDeleted{JobId: id}}})
	return nil
}

func (t *tx) completeJob(c *storev1.CompleteJob) error {
	rec, err := t.job(c.GetJobId())
	if err != nil {
		return err
	}
	switch rec.GetJob().GetTerminalState().GetKind() {
	case managerv1.TerminalKind_TERMINAL_KIND_COMPLETED:
		return nil // already completed: idempotent
	case managerv1.TerminalKind_TERMINAL_KIND_FAILED:
		return apierr.FailedPreconditionf("job %q has been marked failed (%s); it cannot be completed", c.GetJobId(), rec.GetJob().GetTerminalState().GetReason())
	}
	t.stopAllInstances(rec.GetJob().GetJobId(), managerv1.StoppingReason_STOPPING_REASON_USER_REQUESTED, "job completed")
	rec = t.read().Job(nil, c.GetJobId())
	job := shallowCopy(rec.GetJob())
	job.State = managerv1.JobState_JOB_STATE_POST
	job.TerminalState = &managerv1.TerminalState{Kind: managerv1.TerminalKind_TERMINAL_KIND_COMPLETED, At: t.now}
	e := t.entry()
	e.Event = &managerv1.JobHistoryEntry_Completed{Completed: &managerv1.JobCompleted{}}
	t.putJob(t.withHistory(withJob(rec, job), e), e)
	return nil
}

func (t *tx) markJobFailed(c *storev1.MarkJobFailed) error {
	rec, err := t.job(c.GetJobId())
	if err != nil {
		return err
	}
	switch rec.GetJob().GetTerminalState().GetKind() {
	case managerv1.TerminalKind_TERMINAL_KIND_FAILED:
		return nil // idempotent: the first verdict stands
	case managerv1.TerminalKind_TERMINAL_KIND_COMPLETED:
		return apierr.FailedPreconditionf("job %q has completed; it cannot be marked failed", c.GetJobId())
	}
	t.stopAllInstances(rec.GetJob().GetJobId(), managerv1.StoppingReason_STOPPING_REASON_JOB_FAILED, c.GetReason())
	rec = t.read().Job(nil, c.GetJobId())
	job := shallowCopy(rec.GetJob())
	job.State = managerv1.JobState_JOB_STATE_POST
	job.TerminalState = &managerv1.TerminalState{Kind: managerv1.TerminalKind_TERMINAL_KIND_FAILED, Reason: c.GetReason(), At: t.now}
	e := t.entry()
	e.Event = &managerv1.JobHistoryEntry_Rejected{Rejected: &managerv1.JobRejected{Reason: "marked failed: " + c.GetReason()}}
	t.putJob(t.withHistory(withJob(rec, job), e), e)
	return nil
}

// stopAllInstances asks every live instance of a job to stop.
func (t *tx) stopAllInstances(jobID string, reason managerv1.StoppingReason, why string) {
	for _, in := range t.read().InstancesOfJob(nil, jobID) {
		if in.GetDesired() == managerv1.InstanceDesired_INSTANCE_DESIRED_STOPPED {
			continue
		}
		t.requestStop(in, reason, why, 0, "")
	}
}
