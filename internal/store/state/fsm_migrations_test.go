package state_test

import (
	"testing"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/pkg/apierr"
)

func migrationRec(id, job string, phase managerv1.MigrationPhase) *managerv1.MigrationState {
	return &managerv1.MigrationState{MigrationId: id, SourceJobId: job, SourceRole: "primary", TargetRole: "primary@" + id[:8],
		Phase: phase, StartedAt: stamp(1)}
}

func cPutMigration(m *managerv1.MigrationState, rev uint64, create bool) *storev1.Command {
	return &storev1.Command{Cmd: &storev1.Command_PutMigration{PutMigration: &storev1.PutMigration{Migration: m, ExpectedRevision: rev, Create: create}}}
}

func cForget(all bool, ids ...string) *storev1.Command {
	return &storev1.Command{Cmd: &storev1.Command_ForgetMigrations{ForgetMigrations: &storev1.ForgetMigrations{MigrationIds: ids, AllTerminal: all}}}
}

// Migration records: created once, replaced only at the revision read,
// one in flight per job, done and aborted final; forgotten only when
// terminal.
func TestMigrationRecords(t *testing.T) {
	f := newFixture(t)
	f.createJob("j")
	f.createJob("k")
	m := migrationRec("aaaaaaaa-1", "j", managerv1.MigrationPhase_MIGRATION_PHASE_PLACING)
	res := f.must(cPutMigration(m, 0, true))
	rev := f.index
	if got := f.read().Migration(nil, m.GetMigrationId()); got.GetRevision() != rev || got.GetUpdatedAt() == nil {
		t.Fatalf("record = %v, want revision %d", got, rev)
	}
	if eventKinds(res.Events) != "migrationUpdated" {
		t.Errorf("events = %s", eventKinds(res.Events))
	}
	f.refused(cPutMigration(m, 0, true), apierr.AlreadyExists, "already exists")
	f.refused(cPutMigration(migrationRec("bbbbbbbb-2", "j", managerv1.MigrationPhase_MIGRATION_PHASE_PLACING), 0, true), apierr.FailedPrecondition, "already in flight", "aaaaaaaa-1")
	f.refused(cPutMigration(migrationRec("cccccccc-3", "nope", managerv1.MigrationPhase_MIGRATION_PHASE_PLACING), 0, true), apierr.NotFound, "nope")
	next := migrationRec("aaaaaaaa-1", "j", managerv1.MigrationPhase_MIGRATION_PHASE_LAUNCHING)
	f.refused(cPutMigration(next, rev+5, false), apierr.FailedPrecondition, "another writer")
	f.must(cPutMigration(next, rev, false))
	f.refused(cForget(false, "aaaaaaaa-1"), apierr.FailedPrecondition, "still in flight")
	done := migrationRec("aaaaaaaa-1", "j", managerv1.MigrationPhase_MIGRATION_PHASE_DONE)
	f.must(cPutMigration(done, f.read().Migration(nil, "aaaaaaaa-1").GetRevision(), false))
	f.refused(cPutMigration(migrationRec("aaaaaaaa-1", "j", managerv1.MigrationPhase_MIGRATION_PHASE_LAUNCHING), 0, false), apierr.FailedPrecondition, "done")
	// Another migration of the job may start now; one of another job too.
	f.must(cPutMigration(migrationRec("dddddddd-4", "j", managerv1.MigrationPhase_MIGRATION_PHASE_PLACING), 0, true))
	f.must(cPutMigration(migrationRec("eeeeeeee-5", "k", managerv1.MigrationPhase_MIGRATION_PHASE_ABORTED), 0, true))
	if got := f.read().MigrationInFlight(nil, "j").GetMigrationId(); got != "dddddddd-4" {
		t.Errorf("in flight for j = %q", got)
	}
	if n := len(f.read().Migrations(nil, "j")); n != 2 {
		t.Errorf("j has %d migrations, want 2", n)
	}
	res = f.must(cForget(true))
	out := res.Value.(*managerv1.ForgetTerminalMigrationsResponse)
	if len(out.GetMigrationIds()) != 2 || f.read().Migration(nil, "aaaaaaaa-1") != nil || f.read().Migration(nil, "dddddddd-4") == nil {
		t.Fatalf("forgot %v", out.GetMigrationIds())
	}
	// Unknown ids are skipped.
	if res := f.must(cForget(false, "zzzzzzzz-9")); len(res.Value.(*managerv1.ForgetTerminalMigrationsResponse).GetMigrationIds()) != 0 {
		t.Error("forgot an unknown id")
	}
}

// A handshake report becomes its event only from the instance's current
// binding on the reporting node.
func TestMigrationReports(t *testing.T) {
	f := newFixture(t)
	f.onlineNode("a")
	f.createJob("j")
	tok := f.bind("j", "primary", "a")
	rep := func(token uint64, kind managerv1.MigrationReportKind) *managerv1.MigrationReport {
		return &managerv1.MigrationReport{JobId: "j", Role: "primary", FencingToken: token, MigrationId: "m1", Kind: kind, Payload: []byte("p")}
	}
	res := f.must(&storev1.Command{Cmd: &storev1.Command_MigrationReports{MigrationReports: &storev1.MigrationReports{NodeId: "a", Reports: []*managerv1.MigrationReport{
		rep(tok, managerv1.MigrationReportKind_MIGRATION_REPORT_KIND_STATE),
		rep(tok-1, managerv1.MigrationReportKind_MIGRATION_REPORT_KIND_TARGET_READY),
		rep(tok, managerv1.MigrationReportKind_MIGRATION_REPORT_KIND_TARGET_APPLIED),
	}}}})
	if got := eventKinds(res.Events); got != "migrationState,migrationTargetApplied" {
		t.Fatalf("events = %s", got)
	}
	if ev := res.Events[0].GetMigrationState(); ev.GetNodeId() != "a" || string(ev.GetPayload()) != "p" || ev.GetJobKey().GetRole() != "primary" {
		t.Errorf("event = %v", ev)
	}
	res = f.must(&storev1.Command{Cmd: &storev1.Command_MigrationReports{MigrationReports: &storev1.MigrationReports{NodeId: "b", Reports: []*managerv1.MigrationReport{
		rep(tok, managerv1.MigrationReportKind_MIGRATION_REPORT_KIND_STATE),
	}}}})
	if len(res.Events) != 0 {
		t.Errorf("a report from another node raised %s", eventKinds(res.Events))
	}
}

// Draining a node marks it; placement reads the mark.
func TestSetNodeDraining(t *testing.T) {
	f := newFixture(t)
	f.onlineNode("a")
	res := f.must(&storev1.Command{Cmd: &storev1.Command_SetNodeDraining{SetNodeDraining: &storev1.SetNodeDraining{NodeId: "a", Draining: true}}})
	if !f.node("a").GetNode().GetDraining() || eventKinds(res.Events) != "nodeTagsUpdated" {
		t.Fatalf("node %v, events %s", f.node("a").GetNode(), eventKinds(res.Events))
	}
	f.refused(&storev1.Command{Cmd: &storev1.Command_SetNodeDraining{SetNodeDraining: &storev1.SetNodeDraining{NodeId: "zz", Draining: true}}}, apierr.NotFound, "zz")
}
