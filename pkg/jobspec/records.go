package jobspec

import (
	"fmt"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/pkg/apierr"
)

// MaxDrainItems bounds the instances one drain records.
const MaxDrainItems = 10000

// MaxMigrationPayload bounds a handshake payload (the job's own state) in a
// report or a migration record.
const MaxMigrationPayload = 4 << 20

// ValidateDrain refuses a malformed drain record (DrainNode's and
// RecordNodeDrain's).
func ValidateDrain(d *managerv1.NodeDrain) error {
	if _, ok := managerv1.MigrationStrategy_name[int32(d.GetStrategy())]; !ok {
		return apierr.Invalid("drain.strategy", "%d is not a strategy", d.GetStrategy())
	}
	if len(d.GetItems()) > MaxDrainItems {
		return apierr.Invalid("drain.items", "%d items (at most %d)", len(d.GetItems()), MaxDrainItems)
	}
	if len(d.GetRequestedBy()) > 256 {
		return apierr.Invalid("drain.requestedBy", "is %d bytes (at most 256)", len(d.GetRequestedBy()))
	}
	for i, it := range d.GetItems() {
		f := fmt.Sprintf("drain.items[%d]", i)
		if err := ValidateID(f+".jobId", it.GetJobId()); err != nil {
			return err
		}
		if err := ValidateRole(f+".role", it.GetRole()); err != nil {
			return err
		}
		if _, ok := managerv1.DrainItemResult_name[int32(it.GetResult())]; !ok || it.GetResult() == managerv1.DrainItemResult_DRAIN_ITEM_RESULT_UNSPECIFIED {
			return apierr.Invalid(f+".result", "%d is not a result", it.GetResult())
		}
		if len(it.GetReason()) > 2048 || len(it.GetMigrationId()) > 64 || len(it.GetTargetNodeId()) > 256 {
			return apierr.Invalid(f, "a field is over its bound (reason 2048, migrationId 64, targetNodeId 256 bytes)")
		}
	}
	return nil
}

// ValidateMigration refuses a malformed migration record (RecordMigration's).
func ValidateMigration(m *managerv1.MigrationState) error {
	if m == nil {
		return apierr.Invalid("migration", "is required")
	}
	switch {
	case m.GetMigrationId() == "":
		return apierr.Invalid("migration.migrationId", "is required")
	case len(m.GetMigrationId()) > 64:
		return apierr.Invalid("migration.migrationId", "is %d characters (at most 64)", len(m.GetMigrationId()))
	case m.GetPhase() == managerv1.MigrationPhase_MIGRATION_PHASE_UNSPECIFIED:
		return apierr.Invalid("migration.phase", "is required")
	case len(m.GetInitialState()) > MaxMigrationPayload || len(m.GetTargetPayload()) > MaxMigrationPayload || len(m.GetSourcePayload()) > MaxMigrationPayload:
		return apierr.Invalid("migration", "a payload is over %d bytes", MaxMigrationPayload)
	}
	if err := ValidateID("migration.sourceJobId", m.GetSourceJobId()); err != nil {
		return err
	}
	if err := ValidateRole("migration.sourceRole", m.GetSourceRole()); err != nil {
		return err
	}
	if err := ValidateRole("migration.targetRole", m.GetTargetRole()); err != nil {
		return err
	}
	return nil
}
