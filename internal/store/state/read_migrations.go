package state

import (
	"cmp"
	"slices"

	"github.com/hashicorp/go-memdb"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
)

// MigrationTerminal reports whether a migration phase is final (done or
// aborted).
func MigrationTerminal(p managerv1.MigrationPhase) bool {
	return p == managerv1.MigrationPhase_MIGRATION_PHASE_DONE || p == managerv1.MigrationPhase_MIGRATION_PHASE_ABORTED
}

// Migration returns the migration with the given id, or nil. Callers must
// not modify it.
func (r *Read) Migration(ws memdb.WatchSet, id string) *managerv1.MigrationState {
	if raw := r.first(ws, tableMigrations, "id", id); raw != nil {
		return raw.(*managerv1.MigrationState)
	}
	return nil
}

// Migrations returns the migrations of job jobID ("" = all), newest first
// (by start, then id).
func (r *Read) Migrations(ws memdb.WatchSet, jobID string) []*managerv1.MigrationState {
	var it memdb.ResultIterator
	if jobID == "" {
		it = r.iter(ws, tableMigrations, "id_prefix", "")
	} else {
		it = r.iter(ws, tableMigrations, "job", jobID)
	}
	var out []*managerv1.MigrationState
	for raw := it.Next(); raw != nil; raw = it.Next() {
		out = append(out, raw.(*managerv1.MigrationState))
	}
	slices.SortFunc(out, func(a, b *managerv1.MigrationState) int {
		if c := b.GetStartedAt().AsTime().Compare(a.GetStartedAt().AsTime()); c != 0 {
			return c
		}
		return cmp.Compare(a.GetMigrationId(), b.GetMigrationId())
	})
	return out
}

// MigrationInFlight returns the job's migration that is neither done nor
// aborted, or nil (there is at most one).
func (r *Read) MigrationInFlight(ws memdb.WatchSet, jobID string) *managerv1.MigrationState {
	it := r.iter(ws, tableMigrations, "job", jobID)
	for raw := it.Next(); raw != nil; raw = it.Next() {
		if m := raw.(*managerv1.MigrationState); !MigrationTerminal(m.GetPhase()) {
			return m
		}
	}
	return nil
}
