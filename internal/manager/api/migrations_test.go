package api_test

import (
	"strings"
	"testing"

	"connectrpc.com/connect"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
)

// TestMigrationHandlers: migration records, and the calls that need the
// primary's AutoManager or node controller, over a fake backend (which has
// neither: those answer UNAVAILABLE, having written and sent nothing).
func TestMigrationHandlers(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	e.seed(t, &storev1.Command{Cmd: &storev1.Command_CreateJob{CreateJob: &storev1.CreateJob{Job: job("j")}}})
	h := e.h
	mig := func(id string) *managerv1.MigrationState {
		return &managerv1.MigrationState{MigrationId: id, Phase: managerv1.MigrationPhase_MIGRATION_PHASE_PROPOSING,
			SourceJobId: "j", SourceRole: "primary", TargetRole: "backup"}
	}
	done := mig("m2")
	done.Phase = managerv1.MigrationPhase_MIGRATION_PHASE_DONE
	e.run(t, []hcase{
		{name: "RecordMigration/None", do: call(h.RecordMigration, &managerv1.RecordMigrationRequest{}),
			code: connect.CodeInvalidArgument, names: []string{"migration:"}},
		{name: "RecordMigration/NoID", do: call(h.RecordMigration, &managerv1.RecordMigrationRequest{Migration: &managerv1.MigrationState{}}),
			code: connect.CodeInvalidArgument, names: []string{"migration.migrationId:"}},
		{name: "RecordMigration/NoPhase", do: call(h.RecordMigration, &managerv1.RecordMigrationRequest{Migration: &managerv1.MigrationState{MigrationId: "m1"}}),
			code: connect.CodeInvalidArgument, names: []string{"migration.phase:"}},
		{name: "RecordMigration/BadTargetRole", do: call(h.RecordMigration, &managerv1.RecordMigrationRequest{Migration: func() *managerv1.MigrationState {
			m := mig("m1")
			m.TargetRole = ""
			return m
		}()}), code: connect.CodeInvalidArgument, names: []string{"migration.targetRole:"}},
		{name: "RecordMigration/Create", do: call(h.RecordMigration, &managerv1.RecordMigrationRequest{Migration: mig("m1"), Create: true}),
			want: []*storev1.Command{{Cmd: &storev1.Command_PutMigration{PutMigration: &storev1.PutMigration{Migration: mig("m1"), Create: true}}}}},
		{name: "GetMigration/NoID", do: call(h.GetMigration, &managerv1.GetMigrationRequest{}),
			code: connect.CodeInvalidArgument, names: []string{"migrationId:"}},
		{name: "GetMigration/TooLong", do: call(h.GetMigration, &managerv1.GetMigrationRequest{MigrationId: strings.Repeat("m", 65)}),
			code: connect.CodeInvalidArgument, names: []string{"migrationId:"}},
		{name: "ForgetMigration/Unknown", do: call(h.ForgetMigration, &managerv1.ForgetMigrationRequest{MigrationId: "mig-9"}),
			code: connect.CodeNotFound, names: []string{`"mig-9"`}},
		{name: "MigrateJob/BadJobID", do: call(h.MigrateJob, &managerv1.MigrateJobRequest{JobId: ""}),
			code: connect.CodeInvalidArgument, names: []string{"jobId:"}},
		{name: "MigrateJob/UnknownStrategy", do: call(h.MigrateJob, &managerv1.MigrateJobRequest{JobId: "j", Strategy: 99}),
			code: connect.CodeInvalidArgument, names: []string{"strategy:"}},
		{name: "MigrateJob/UnknownJob", do: call(h.MigrateJob, &managerv1.MigrateJobRequest{JobId: "nope"}),
			code: connect.CodeNotFound, names: []string{`"nope"`}},
		{name: "MigrateJob/NoAutoManager", do: call(h.MigrateJob, &managerv1.MigrateJobRequest{JobId: "j"}),
			code: connect.CodeUnavailable, names: []string{"no AutoManager"}},
		{name: "AbortMigration/NoID", do: call(h.AbortMigration, &managerv1.AbortMigrationRequest{}),
			code: connect.CodeInvalidArgument, names: []string{"migrationId:"}},
		{name: "AbortMigration/RollbackNoAutoManager", do: call(h.AbortMigration, &managerv1.AbortMigrationRequest{MigrationId: "m1"}),
			code: connect.CodeUnavailable, names: []string{"no AutoManager"}},
		{name: "AbortMigration/WireFormNoInstance", do: call(h.AbortMigration, &managerv1.AbortMigrationRequest{MigrationId: "m1", JobId: "j", SourceRole: "primary", TargetRole: "backup"}),
			code: connect.CodeNotFound, names: []string{"no live instance"}},
		{name: "NotifyMigrationGetState/NoKey", do: call(h.NotifyMigrationGetState, &managerv1.NotifyMigrationGetStateRequest{MigrationId: "m1"}),
			code: connect.CodeInvalidArgument, names: []string{"sourceJobKey:"}},
		{name: "NotifyMigrationCutoverApply/BadRole", do: call(h.NotifyMigrationCutoverApply, &managerv1.NotifyMigrationCutoverApplyRequest{MigrationId: "m1", TargetJobKey: &managerv1.JobKey{JobId: "j"}}),
			code: connect.CodeInvalidArgument, names: []string{"targetJobKey.role:"}},
		{name: "RecordMigration/Done", do: call(h.RecordMigration, &managerv1.RecordMigrationRequest{Migration: done, Create: true}),
			want: []*storev1.Command{{Cmd: &storev1.Command_PutMigration{PutMigration: &storev1.PutMigration{Migration: done, Create: true}}}}},
		{name: "ForgetMigration/Good", do: call(h.ForgetMigration, &managerv1.ForgetMigrationRequest{MigrationId: "m2"}),
			want: []*storev1.Command{{Cmd: &storev1.Command_ForgetMigrations{ForgetMigrations: &storev1.ForgetMigrations{MigrationIds: []string{"m2"}}}}}},
	})
}
