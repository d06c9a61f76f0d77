package state

import (
	"google.golang.org/protobuf/proto"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/pkg/apierr"
	"github.com/norsk-go/norsk-manager/pkg/jobspec"
)

// MaxMigrationPayload bounds a handshake payload (the job's own state) in a
// report or a migration record.
const MaxMigrationPayload = jobspec.MaxMigrationPayload

// putMigration writes a migration record (the AutoManager's saga state)
// and answers its new revision (the command's index). A job has at most
// one migration in flight, and a done or aborted migration stays so.
func (t *tx) putMigration(c *storev1.PutMigration) (uint64, error) {
	m := c.GetMigration()
	r := t.read()
	ex := r.Migration(nil, m.GetMigrationId())
	switch {
	case c.GetCreate() && ex != nil:
		return 0, apierr.AlreadyExistsf("migration %s already exists", m.GetMigrationId())
	case !c.GetCreate() && ex == nil:
		return 0, apierr.FailedPreconditionf("migration %s is not recorded (forgotten?)", m.GetMigrationId())
	case ex != nil && c.GetExpectedRevision() != 0 && ex.GetRevision() != c.GetExpectedRevision():
		return 0, apierr.FailedPreconditionf("migration %s is at revision %d, not %d: another writer moved it", m.GetMigrationId(), ex.GetRevision(), c.GetExpectedRevision())
	case ex != nil && MigrationTerminal(ex.GetPhase()) && ex.GetPhase() != m.GetPhase():
		return 0, apierr.FailedPreconditionf("migration %s is %s: it cannot move to %s", m.GetMigrationId(), MigrationPhaseName(ex.GetPhase()), MigrationPhaseName(m.GetPhase()))
	case ex != nil && ex.GetSourceJobId() != m.GetSourceJobId():
		return 0, apierr.Invalid("migration.sourceJobId", "migration %s is of job %s", m.GetMigrationId(), ex.GetSourceJobId())
	}
	if r.Job(nil, m.GetSourceJobId()) == nil && c.GetCreate() {
		return 0, apierr.NotFoundf("no job %q", m.GetSourceJobId())
	}
	if !MigrationTerminal(m.GetPhase()) {
		if other := r.MigrationInFlight(nil, m.GetSourceJobId()); other != nil && other.GetMigrationId() != m.GetMigrationId() {
			return 0, apierr.FailedPreconditionf("a migration is already in flight for job %s (%s, %s)", m.GetSourceJobId(), other.GetMigrationId(), MigrationPhaseName(other.GetPhase()))
		}
	}
	n := proto.Clone(m).(*managerv1.MigrationState)
	n.Revision, n.UpdatedAt = t.index, t.now
	t.insert(tableMigrations, n)
	t.emit(&managerv1.Event{Kind: &managerv1.Event_MigrationUpdated{MigrationUpdated: n}})
	return t.index, nil
}

// forgetMigrations deletes terminal migration records and answers the ids
// it deleted (*managerv1.ForgetTerminalMigrationsResponse). A named one in
// flight is refused; a named one not known is skipped.
func (t *tx) forgetMigrations(c *storev1.ForgetMigrations) (*managerv1.ForgetTerminalMigrationsResponse, error) {
	r := t.read()
	var gone []*managerv1.MigrationState
	if c.GetAllTerminal() {
		for _, m := range r.Migrations(nil, "") {
			if MigrationTerminal(m.GetPhase()) {
				gone = append(gone, m)
			}
		}
	}
	for _, id := range c.GetMigrationIds() {
		m := r.Migration(nil, id)
		switch {
		case m == nil:
			continue
		case !MigrationTerminal(m.GetPhase()):
			return nil, apierr.FailedPreconditionf("migration %s is still in flight (phase %s): abort it first — a migration that is still running cannot be forgotten", id, MigrationPhaseName(m.GetPhase()))
		}
		gone = append(gone, m)
	}
	out := &managerv1.ForgetTerminalMigrationsResponse{}
	seen := map[string]bool{}
	for _, m := range gone {
		if seen[m.GetMigrationId()] {
			continue
		}
		seen[m.GetMigrationId()] = true
		t.delete(tableMigrations, m)
		out.MigrationIds = append(out.MigrationIds, m.GetMigrationId())
	}
	if len(out.GetMigrationIds()) > 0 {
		t.emit(&managerv1.Event{Kind: &managerv1.Event_MigrationForgotten{MigrationForgotten: &managerv1.MigrationForgotten{MigrationIds: out.GetMigrationIds()}}})
	}
	return out, nil
}

// migrationReports turns each handshake report of an instance's current
// binding on the reporting node into its migration event; a report of a
// superseded binding, another node or an oversized payload is dropped.
func (t *tx) migrationReports(c *storev1.MigrationReports) {
	r := t.read()
	for _, rep := range c.GetReports() {
		in := r.Instance(nil, rep.GetJobId(), rep.GetRole())
		if in == nil || in.GetNodeId() != c.GetNodeId() || in.GetFencingToken() != rep.GetFencingToken() || len(rep.GetPayload()) > MaxMigrationPayload {
			continue
		}
		ev := &managerv1.MigrationEvent{
			JobKey:      &managerv1.JobKey{JobId: rep.GetJobId(), Role: rep.GetRole()},
			MigrationId: rep.GetMigrationId(), Payload: rep.GetPayload(), Refused: rep.GetRefused(), Reason: rep.GetReason(), NodeId: c.GetNodeId(),
		}
		var e *managerv1.Event
		switch rep.GetKind() {
		case managerv1.MigrationReportKind_MIGRATION_REPORT_KIND_STATE:
			e = &managerv1.Event{Kind: &managerv1.Event_MigrationState{MigrationState: ev}}
		case managerv1.MigrationReportKind_MIGRATION_REPORT_KIND_INITIAL_STATE_DELIVERED:
			e = &managerv1.Event{Kind: &managerv1.Event_MigrationInitialStateDelivered{MigrationInitialStateDelivered: ev}}
		case managerv1.MigrationReportKind_MIGRATION_REPORT_KIND_TARGET_READY:
			e = &managerv1.Event{Kind: &managerv1.Event_MigrationTargetReady{MigrationTargetReady: ev}}
		case managerv1.MigrationReportKind_MIGRATION_REPORT_KIND_SOURCE_STOPPED_OUTPUT:
			e = &managerv1.Event{Kind: &managerv1.Event_MigrationSourceStoppedOutput{MigrationSourceStoppedOutput: ev}}
		case managerv1.MigrationReportKind_MIGRATION_REPORT_KIND_TARGET_APPLIED:
			e = &managerv1.Event{Kind: &managerv1.Event_MigrationTargetApplied{MigrationTargetApplied: ev}}
		case managerv1.MigrationReportKind_MIGRATION_REPORT_KIND_ABORTED:
			e = &managerv1.Event{Kind: &managerv1.Event_MigrationAborted{MigrationAborted: ev}}
		default:
			continue
		}
		t.emit(e)
	}
}

// setNodeDraining marks a node drained (placement puts nothing new on it)
// or not; not draining also cancels the node's running drain.
func (t *tx) setNodeDraining(c *storev1.SetNodeDraining) error {
	rec, err := t.node(c.GetNodeId())
	if err != nil {
		return err
	}
	if rec.GetNode().GetDraining() == c.GetDraining() && (c.GetDraining() || !DrainRunning(rec.GetNode().GetDrain())) {
		return nil
	}
	nrec, n := t.withNode(rec)
	if !c.GetDraining() {
		// Undo: a running drain is cancelled with the flag.
		t.cancelDrain(n)
	}
	changed := n.GetDraining() != c.GetDraining()
	n.Draining = c.GetDraining()
	t.insert(tableNodes, nrec)
	if !changed {
		return nil
	}
	why := "draining: no new work"
	if !c.GetDraining() {
		why = "no longer draining"
	}
	t.emit(&managerv1.Event{Kind: &managerv1.Event_NodeTagsUpdated{NodeTagsUpdated: t.nodeEvent(nrec, why)}})
	return nil
}
