package state

import (
	"fmt"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/pkg/apierr"
)

const (
	phaseProvisioned = managerv1.InstancePhase_INSTANCE_PHASE_PROVISIONED
	phasePrepared    = managerv1.InstancePhase_INSTANCE_PHASE_PREPARED
	phaseRunning     = managerv1.InstancePhase_INSTANCE_PHASE_RUNNING
	phaseStopping    = managerv1.InstancePhase_INSTANCE_PHASE_STOPPING
	phaseStopped     = managerv1.InstancePhase_INSTANCE_PHASE_STOPPED

	desiredRunning  = managerv1.InstanceDesired_INSTANCE_DESIRED_RUNNING
	desiredPrepared = managerv1.InstanceDesired_INSTANCE_DESIRED_PREPARED
	desiredStopped  = managerv1.InstanceDesired_INSTANCE_DESIRED_STOPPED

	nodeOnline = managerv1.NodeState_NODE_STATE_ONLINE
)

func ref(in *managerv1.Instance) *managerv1.InstanceRef {
	return &managerv1.InstanceRef{Role: in.GetRole(), NodeId: in.GetNodeId(), FencingToken: in.GetFencingToken()}
}

// record appends instance history entries to the instance's job, if the job
// still exists (an instance outlives a deleted job until it has stopped).
func (t *tx) record(jobID string, entries ...*managerv1.JobHistoryEntry) {
	if len(entries) == 0 {
		return
	}
	rec := t.read().Job(nil, jobID)
	if rec == nil {
		return
	}
	t.putJob(t.withHistory(rec, entries...), entries...)
}

func (t *tx) stoppingEntry(in *managerv1.Instance, reason managerv1.StoppingReason, why string) *managerv1.JobHistoryEntry {
	e := t.entry()
	e.Event = &managerv1.JobHistoryEntry_Stopping{Stopping: &managerv1.InstanceStopping{
		Instance: ref(in), Reason: reason, AdditionalReason: why,
	}}
	return e
}

func (t *tx) stoppedEntry(in *managerv1.Instance, exitCodes map[string]int32) *managerv1.JobHistoryEntry {
	e := t.entry()
	e.Event = &managerv1.JobHistoryEntry_Stopped{Stopped: &managerv1.InstanceStopped{Instance: ref(in), ExitCodes: exitCodes}}
	return e
}

// putInstance stores an instance; a stopped instance of a deleted job is
// removed instead.
func (t *tx) putInstance(in *managerv1.Instance) {
	if in.GetPhase() == phaseStopped && t.read().Job(nil, in.GetJobId()) == nil {
		if old := t.read().Instance(nil, in.GetJobId(), in.GetRole()); old != nil {
			t.delete(tableInstances, old)
		}
		return
	}
	t.insert(tableInstances, in)
}

// requestStop records that an instance must stop. Its phase becomes
// stopping (with a history entry) unless it already is.
func (t *tx) requestStop(in *managerv1.Instance, reason managerv1.StoppingReason, why string, graceMs uint32, migrationID string) {
	n := shallowCopy(in)
	n.Desired = desiredStopped
	n.StopReason = reason
	n.StopAdditionalReason = why
	n.StopGraceMs = graceMs
	if migrationID != "" {
		n.MigrationId = migrationID
	}
	if n.GetPhase() == phaseStopped {
		t.putInstance(n)
		return
	}
	n.Phase = phaseStopping
	t.putInstance(n)
	e := t.stoppingEntry(n, reason, why)
	e.GetStopping().MigrationId = migrationID
	t.record(n.GetJobId(), e)
}

// markStopped records an instance as stopped without its worker's word (its
// node was terminated, or it was missing when the worker reconnected).
func (t *tx) markStopped(in *managerv1.Instance, reason managerv1.StoppingReason, why string) {
	if in.GetPhase() == phaseStopped {
		return
	}
	n := shallowCopy(in)
	var entries []*managerv1.JobHistoryEntry
	if n.GetPhase() != phaseStopping {
		entries = append(entries, t.stoppingEntry(n, reason, why))
		n.StopReason = reason
		n.StopAdditionalReason = why
	}
	n.Phase = phaseStopped
	n.Desired = desiredStopped
	n.ServicePortMappings = nil
	entries = append(entries, t.stoppedEntry(n, nil))
	t.putInstance(n)
	t.record(n.GetJobId(), entries...)
}

func (t *tx) bindInstance(c *storev1.BindInstance) (uint64, error) {
	if err := needKey("role", c.GetRole()); err != nil {
		return 0, err
	}
	rec, err := t.job(c.GetJobId())
	if err != nil {
		return 0, err
	}
	if ts := rec.GetJob().GetTerminalState(); ts != nil {
		return 0, apierr.FailedPreconditionf("job %q is %s; it cannot be started again", c.GetJobId(), terminalWord(ts))
	}
	node := t.read().Node(nil, c.GetNodeId())
	if node == nil {
		return 0, apierr.NotFoundf("no node %q", c.GetNodeId())
	}
	if st := node.GetNode().GetState(); st != nodeOnline || node.GetDeregistering() {
		return 0, apierr.FailedPreconditionf("node %q is %s, not online; a job can only be started on an online node", c.GetNodeId(), nodeStateWord(node))
	}
	if ex := t.read().Instance(nil, c.GetJobId(), c.GetRole()); ex != nil {
		exNode := t.read().Node(nil, ex.GetNodeId())
		// The old copy may still run where its worker is connected: an
		// online node, or one being terminated or deregistered (whose
		// worker is stopping its instances until the node is terminated).
		exReachable := false
		if exNode != nil {
			switch exNode.GetNode().GetState() {
			case nodeOnline, managerv1.NodeState_NODE_STATE_STOPPING:
				exReachable = true
			}
		}
		switch {
		case ex.GetDesired() != desiredStopped && exReachable:
			return 0, apierr.FailedPreconditionf("instance %s/%s is already %s on node %q (fencing token %d); stop it first",
				c.GetJobId(), c.GetRole(), phaseWord(ex.GetPhase()), ex.GetNodeId(), ex.GetFencingToken())
		case ex.GetPhase() != phaseStopped && exReachable:
			return 0, apierr.FailedPreconditionf("instance %s/%s is still stopping on node %q; start it again once it has stopped",
				c.GetJobId(), c.GetRole(), ex.GetNodeId())
		}
		// Otherwise the old binding is stopped, or its node is lost or
		// terminated: the new binding's higher fencing token supersedes it,
		// and the old node is told to stop it if it ever comes back.
	}
	opts := c.GetOptions()
	in := &managerv1.Instance{
		JobId:                 c.GetJobId(),
		Role:                  c.GetRole(),
		NodeId:                c.GetNodeId(),
		FencingToken:          t.index,
		Desired:               desiredRunning,
		Phase:                 phaseProvisioned,
		RuntimeRole:           opts.GetRuntimeRole(),
		MigrationId:           opts.GetMigrationId(),
		MigrationInitialState: opts.GetMigrationInitialState(),
		MigrationHandover:     opts.GetMigrationHandover(),
		BoundAt:               t.now,
		JobHash:               rec.GetJob().GetCurrentHash(),
	}
	if pl := opts.GetPlacement(); pl != nil {
		pl = proto.Clone(pl).(*managerv1.PlacementEvent)
		pl.JobId, pl.Role, pl.NodeId, pl.FencingToken = in.GetJobId(), in.GetRole(), in.GetNodeId(), t.index
		in.Placement = pl
		t.emit(&managerv1.Event{Kind: &managerv1.Event_Placement{Placement: pl}})
	}
	if in.RuntimeRole == "" {
		in.RuntimeRole = c.GetRole()
	}
	if opts.GetDeferStart() {
		in.Desired = desiredPrepared
	}
	t.insert(tableInstances, in)
	e := t.entry()
	e.Event = &managerv1.JobHistoryEntry_Provisioned{Provisioned: &managerv1.InstanceProvisioned{
		Instance: ref(in), RuntimeRole: in.GetRuntimeRole(), DeferStart: opts.GetDeferStart(), MigrationId: in.GetMigrationId(),
	}}
	if rec.GetJob().GetState() == managerv1.JobState_JOB_STATE_PRE {
		job := shallowCopy(rec.GetJob())
		job.State = managerv1.JobState_JOB_STATE_ACTIVE
		rec = withJob(rec, job)
	}
	t.putJob(t.withHistory(rec, e), e)
	return t.index, nil
}

// bindInstances applies each bind as bindInstance would, on its own: a
// refused bind changes nothing (bindInstance checks everything before it
// writes) and the others still apply. It answers with a
// *managerv1.StartJobsResponse: one result per bind, its fencing token (the
// command's index) or the refusal's code and message.
func (t *tx) bindInstances(c *storev1.BindInstances) *managerv1.StartJobsResponse {
	out := &managerv1.StartJobsResponse{Results: make([]*managerv1.StartResult, len(c.GetBinds()))}
	seen := make(map[string]bool, len(c.GetBinds()))
	for i, b := range c.GetBinds() {
		r := &managerv1.StartResult{}
		out.Results[i] = r
		var err error
		if key := InstanceID(b.GetJobId(), b.GetRole()); seen[key] {
			err = apierr.Invalid(fmt.Sprintf("starts[%d]", i), "instance %s/%s is started twice in one call", b.GetJobId(), b.GetRole())
		} else {
			seen[key] = true
			r.FencingToken, err = t.bindInstance(b)
		}
		if err != nil {
			r.FencingToken = 0
			r.ErrorCode, r.ErrorMessage = apierr.CodeOf(err).String(), err.Error()
		}
	}
	return out
}

// instanceOn returns the instance (job, role) bound to node.
func (t *tx) instanceOn(jobID, role, nodeID string) (*managerv1.Instance, error) {
	if _, err := t.job(jobID); err != nil {
		return nil, err
	}
	in := t.read().Instance(nil, jobID, role)
	switch {
	case in == nil:
		return nil, apierr.NotFoundf("job %q has no instance with role %q", jobID, role)
	case in.GetNodeId() != nodeID:
		return nil, apierr.NotFoundf("instance %s/%s is bound to node %q, not %q", jobID, role, in.GetNodeId(), nodeID)
	}
	return in, nil
}

func (t *tx) stopInstance(c *storev1.StopInstance) error {
	in, err := t.instanceOn(c.GetJobId(), c.GetRole(), c.GetNodeId())
	if err != nil {
		return err
	}
	if in.GetDesired() == desiredStopped {
		return nil // already stopping or stopped: idempotent
	}
	t.requestStop(in, managerv1.StoppingReason_STOPPING_REASON_USER_REQUESTED, c.GetReason(), c.GetGraceMs(), c.GetMigrationId())
	return nil
}

func (t *tx) startPrepared(c *storev1.StartPreparedInstance) error {
	in, err := t.instanceOn(c.GetJobId(), c.GetRole(), c.GetNodeId())
	if err != nil {
		return err
	}
	switch in.GetDesired() {
	case desiredRunning:
		return nil // already started: idempotent
	case desiredStopped:
		return apierr.FailedPreconditionf("instance %s/%s is %s; only a prepared instance can be started", c.GetJobId(), c.GetRole(), phaseWord(in.GetPhase()))
	}
	if node := t.read().Node(nil, c.GetNodeId()); node == nil || node.GetNode().GetState() != nodeOnline {
		return apierr.FailedPreconditionf("node %q is %s, not online", c.GetNodeId(), nodeStateWord(node))
	}
	n := shallowCopy(in)
	n.Desired = desiredRunning
	t.insert(tableInstances, n)
	t.touchJob(n.GetJobId())
	return nil
}

func (t *tx) instanceReports(c *storev1.InstanceReports) (any, error) {
	var stale int
	for _, r := range c.GetReports() {
		if !t.applyReport(c.GetNodeId(), r, false) {
			stale++
		}
	}
	for _, n := range c.GetNotices() {
		t.recordNotice(c.GetNodeId(), n)
	}
	return stale, nil
}

// Bounds of a worker notice's kind and message as recorded.
const (
	maxNoticeKind    = 64
	maxNoticeMessage = 1024
)

// recordNotice writes what a worker did without being asked to the history
// of the job it names (nothing when the job does not exist).
func (t *tx) recordNotice(nodeID string, n *managerv1.WorkerNotice) {
	e := t.entry()
	e.Event = &managerv1.JobHistoryEntry_Notice{Notice: &managerv1.InstanceNotice{
		Instance: &managerv1.InstanceRef{Role: n.GetRole(), NodeId: nodeID, FencingToken: n.GetFencingToken()},
		Kind:     truncateUTF8(n.GetKind(), maxNoticeKind),
		Message:  truncateUTF8(n.GetMessage(), maxNoticeMessage),
	}}
	t.record(n.GetJobId(), e)
}

// truncateUTF8 cuts s to at most n bytes without splitting a character.
func truncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// applyReport applies one worker report; it reports false when the report is
// stale (no such instance on this node under this token) and was ignored.
func (t *tx) applyReport(nodeID string, r *managerv1.InstanceReport, atHello bool) bool {
	in := t.read().Instance(nil, r.GetJobId(), r.GetRole())
	if in == nil || in.GetNodeId() != nodeID || in.GetFencingToken() != r.GetFencingToken() {
		return false
	}
	n := shallowCopy(in)
	n.Restarts = r.GetRestarts()
	if r.GetJobHash() != 0 {
		n.JobHash = r.GetJobHash()
	}
	var entries []*managerv1.JobHistoryEntry
	q, d := in.GetPhase(), in.GetDesired()
	// lost: its node was lost (nodeLost made it stopping without asking for
	// a stop) and this is the worker's word on it after all.
	lost := q == phaseStopping && d != desiredStopped
	switch r.GetPhase() {
	case phasePrepared:
		// Prepared, or held prepared by a node that was lost and came back.
		if q == phaseProvisioned || lost {
			n.Phase = phasePrepared
			e := t.entry()
			e.Event = &managerv1.JobHistoryEntry_Prepared{Prepared: &managerv1.InstancePrepared{Instance: ref(n)}}
			entries = append(entries, e)
		}
	case phaseRunning:
		switch {
		case q == phaseProvisioned || q == phasePrepared:
		case lost:
			// Its node was lost and has come back with it still running.
		case q == phaseRunning && !portsEqual(in.GetServicePortMappings(), r.GetServicePortMappings()):
			// A service restarted under its restart policy with new ports.
		default:
			// Nothing new (or a stop is already on its way).
			if !proto.Equal(n, in) {
				t.insert(tableInstances, n)
			}
			return true
		}
		n.Phase = phaseRunning
		n.ServicePortMappings = r.GetServicePortMappings()
		e := t.entry()
		e.Event = &managerv1.JobHistoryEntry_Running{Running: &managerv1.InstanceRunning{
			Instance: ref(n), ServicePortMappings: r.GetServicePortMappings(), Adopted: atHello,
		}}
		entries = append(entries, e)
	case phaseStopping:
		// The worker is stopping it of its own accord (a failed job): its
		// reason is the real one, also when the node's loss got here first.
		if (q != phaseStopping && q != phaseStopped) || lost {
			n.Phase = phaseStopping
			n.Desired = desiredStopped
			n.StopReason = r.GetReason()
			n.StopAdditionalReason = r.GetAdditionalReason()
			entries = append(entries, t.stoppingEntry(n, r.GetReason(), r.GetAdditionalReason()))
		}
	case phaseStopped:
		if q != phaseStopped {
			// Unless a stop was asked for (whose reason stands), the
			// worker's reason is why it stopped: a tombstone of a job that
			// failed while its node was lost carries the failure (the
			// node's loss said only "stopping").
			if q != phaseStopping || (lost && r.GetReason() != managerv1.StoppingReason_STOPPING_REASON_NODE_STOPPED) {
				n.StopReason = r.GetReason()
				n.StopAdditionalReason = r.GetAdditionalReason()
				entries = append(entries, t.stoppingEntry(n, r.GetReason(), r.GetAdditionalReason()))
			}
			n.Phase = phaseStopped
			n.Desired = desiredStopped
			n.ServicePortMappings = nil
			entries = append(entries, t.stoppedEntry(n, r.GetExitCodes()))
		}
	}
	if len(entries) == 0 && proto.Equal(n, in) {
		return true
	}
	t.putInstance(n)
	t.record(n.GetJobId(), entries...)
	return true
}

func portsEqual(a, b map[string]*managerv1.ResolvedPortMappings) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		w, ok := b[k]
		if !ok || !proto.Equal(v, w) {
			return false
		}
	}
	return true
}
