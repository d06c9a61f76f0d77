package state

import (
	"encoding/json"

	"github.com/hashicorp/go-memdb"

	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/pkg/apierr"
)

// SchemaVersion is the version of the state's record formats this binary
// writes. History:
//
//	1  jobs, instances, nodes
//	2  + the audit log, the KV store, the store's own meta, API tokens,
//	     the discovery fleet and the access replica
//
// A binary reads every older version and migrates it with MigrateSchema
// commands (migrations below), after taking a backup.
const SchemaVersion = 2

// SchemaVersion is the version of the data in this view: the store's meta,
// or 1 for a store that has data but no meta (written by a version-1
// binary), or 0 for a store that has nothing yet.
func (r *Read) SchemaVersion() uint32 {
	if raw, err := r.txn.First(tableSingletons, "id", singletonStore); err == nil && raw != nil {
		return raw.(*singleton).Msg.(*storev1.StoreMeta).GetSchemaVersion()
	}
	if hasData(r.txn) {
		return 1
	}
	return 0
}

// hasData reports whether any job, node or instance exists.
func hasData(txn *memdb.Txn) bool {
	for _, table := range []string{tableJobs, tableNodes, tableInstances} {
		if raw, err := txn.First(table, "id_prefix", ""); err == nil && raw != nil {
			return true
		}
	}
	return false
}

// migrations[v] moves the state from version v to v+1.
var migrations = map[uint32]func(t *tx){
	// 1 → 2: the audit log and the KV store arrive. The chain starts with
	// an entry recording the migration, so a store's audit history begins
	// where the upgraded binary began keeping it.
	1: func(t *tx) {
		b, _ := json.Marshal(map[string]uint32{"from": 1, "to": 2})
		t.appendAudit(AuditSourceManager, AuditKindMigrated, string(b))
	},
}

// migrateSchema applies MigrateSchema: from 0 initialises a new store at
// to; otherwise every migration from .. to-1 runs in order.
func (t *tx) migrateSchema(c *storev1.MigrateSchema) error {
	cur := t.read().SchemaVersion()
	from, to := c.GetFrom(), c.GetTo()
	switch {
	case from != cur:
		return apierr.FailedPreconditionf("the store is at schema version %d, the migration starts from %d", cur, from)
	case to > SchemaVersion:
		return apierr.FailedPreconditionf("schema version %d is newer than this binary's %d; upgrade this member", to, SchemaVersion)
	case to <= from:
		return apierr.FailedPreconditionf("a migration goes forward: %d to %d", from, to)
	}
	if from == 0 {
		b, _ := json.Marshal(map[string]uint32{"schemaVersion": to})
		t.appendAudit(AuditSourceManager, AuditKindCreated, string(b))
	} else {
		for v := from; v < to; v++ {
			m, ok := migrations[v]
			if !ok {
				return apierr.FailedPreconditionf("no migration from schema version %d", v)
			}
			m(t)
		}
	}
	t.insert(tableSingletons, &singleton{Key: singletonStore, Msg: &storev1.StoreMeta{SchemaVersion: to}})
	return nil
}
