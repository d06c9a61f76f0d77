package api_test

import (
	"testing"

	"connectrpc.com/connect"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
)

// TestMigrationHandlers: migration records over a fake backend.
func TestMigrationHandlers(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	h := e.h
	e.run(t, []hcase{
		{name: "RecordMigration/NoID", do: call(h.RecordMigration, &managerv1.RecordMigrationRequest{Migration: &managerv1.MigrationState{}}),
			code: connect.CodeInvalidArgument, names: []string{"migration.migrationId:"}},
		{name: "ForgetMigration/Unknown", do: call(h.ForgetMigration, &managerv1.ForgetMigrationRequest{MigrationId: "mig-9"}),
			code: connect.CodeNotFound, names: []string{`"mig-9"`}},
		{name: "MigrateJob/UnknownStrategy", do: call(h.MigrateJob, &managerv1.MigrateJobRequest{JobId: "j", Strategy: 99}),
			code: connect.CodeInvalidArgument, names: []string{"strategy:"}},
	})
}
