package jobspec

import (
	"fmt"
	"time"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/pkg/apierr"
)

// MaxDrainItems bounds the instances one drain records.
const MaxDrainItems = 10000

// Bounds of DrainNode's request.
const (
	// DefaultDrainDeadline is a drain's deadline when the request gives none.
	DefaultDrainDeadline = time.Hour
	// MaxDrainDeadline is the longest deadline DrainNode takes.
	MaxDrainDeadline = 7 * 24 * time.Hour
	// MaxDrainParallel bounds a drain's parallelism.
	MaxDrainParallel = 64
)

// ValidateDrainRequest checks DrainNode's options (not the node: that is
// the store's to say).
func ValidateDrainRequest(m *managerv1.DrainNodeRequest) error {
	if m.GetUndo() {
		if m.GetDeadlineMs() != 0 || m.GetNoDeadline() || m.GetParallel() != 0 || m.GetStrategy() != managerv1.MigrationStrategy_MIGRATION_STRATEGY_UNSPECIFIED {
			return apierr.Invalid("undo", "undo takes no other option (strategy, deadlineMs, noDeadline, parallel)")
		}
		return nil
	}
	if _, ok := managerv1.MigrationStrategy_name[int32(m.GetStrategy())]; !ok {
		return apierr.Invalid("strategy", "%d is not a strategy (stopThenStart, overlap, handover)", m.GetStrategy())
	}
	switch {
	case m.GetDeadlineMs() < 0:
		return apierr.Invalid("deadlineMs", "is %d: want 0 (the default, %s) or more", m.GetDeadlineMs(), DefaultDrainDeadline)
	case m.GetDeadlineMs() > MaxDrainDeadline.Milliseconds():
		return apierr.Invalid("deadlineMs", "is %d (at most %d, 7 days)", m.GetDeadlineMs(), MaxDrainDeadline.Milliseconds())
	case m.GetNoDeadline() && m.GetDeadlineMs() != 0:
		return apierr.Invalid("noDeadline", "give a deadline or none, not both")
	case m.GetParallel() > MaxDrainParallel:
		return apierr.Invalid("parallel", "is %d (at most %d)", m.GetParallel(), MaxDrainParallel)
	}
	return nil
}

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

// ValidateJobKey checks a (job, role) key; field names it ("sourceJobKey").
func ValidateJobKey(field string, k *managerv1.JobKey) error {
	if k == nil {
		return apierr.Invalid(field, "is required")
	}
	if err := ValidateID(field+".jobId", k.GetJobId()); err != nil {
		return err
	}
	return ValidateRole(field+".role", k.GetRole())
}

// ValidateMigrationID checks a migration id: 1 to 64 characters.
func ValidateMigrationID(id string) error {
	switch {
	case id == "":
		return apierr.Invalid("migrationId", "is required")
	case len(id) > 64:
		return apierr.Invalid("migrationId", "is %d characters (at most 64)", len(id))
	}
	return nil
}

// ValidateMigrationRelay checks a NotifyMigration… call: the instance's
// key (field names it), the migration id and the payload.
func ValidateMigrationRelay(field string, key *managerv1.JobKey, id string, payload []byte) error {
	if err := ValidateJobKey(field, key); err != nil {
		return err
	}
	if err := ValidateMigrationID(id); err != nil {
		return err
	}
	if len(payload) > MaxMigrationPayload {
		return apierr.Invalid("payload", "is %d bytes (at most %d)", len(payload), MaxMigrationPayload)
	}
	return nil
}

// ValidateAbortMigration checks AbortMigration's id and reason.
func ValidateAbortMigration(m *managerv1.AbortMigrationRequest) error {
	if err := ValidateMigrationID(m.GetMigrationId()); err != nil {
		return err
	}
	if len(m.GetReason()) > 1024 {
		return apierr.Invalid("reason", "is %d bytes (at most 1024)", len(m.GetReason()))
	}
	return nil
}
