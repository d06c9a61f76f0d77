package automanager

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/pkg/jobsocket"
	"github.com/norsk-go/norsk-manager/pkg/jobspec"
	"github.com/norsk-go/norsk-manager/pkg/placement"
	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

// JobSocketCapability is the capability a worker started with --job-socket
// advertises (pkg/jobsocket.Capability): a handover's target must have it.
const JobSocketCapability = jobsocket.Capability

// Migration phase-deadline defaults (seed 004): target launch and workflow
// init typically complete well under two minutes, a source stops quickly,
// applying is a handful of wire hops, a prepared container starts in
// seconds.
const (
	DefaultProposeDeadline        = 30 * time.Second
	DefaultLaunchingDeadline      = 120 * time.Second
	DefaultTargetReadyDeadline    = 120 * time.Second
	DefaultSourceStopDeadline     = 30 * time.Second
	DefaultApplyingDeadline       = 10 * time.Second
	DefaultStoppingSourceDeadline = 30 * time.Second
	DefaultStartingTargetDeadline = 60 * time.Second
)

// MigrationDeadlines bound each phase of a migration (zero = the default).
// Expiry before the point of no return aborts; stoppingSource's expiry
// proceeds as if the source had stopped; startingTarget's fails forward.
// settingStateOnTarget shares awaitingTargetReady's deadline (it is the
// wait for the target's ready).
type MigrationDeadlines struct {
	Propose        time.Duration
	Launching      time.Duration
	TargetReady    time.Duration
	SourceStop     time.Duration
	Applying       time.Duration
	StoppingSource time.Duration
	StartingTarget time.Duration
}

func (d *MigrationDeadlines) defaults() {
	set := func(v *time.Duration, def time.Duration) {
		if *v <= 0 {
			*v = def
		}
	}
	set(&d.Propose, DefaultProposeDeadline)
	set(&d.Launching, DefaultLaunchingDeadline)
	set(&d.TargetReady, DefaultTargetReadyDeadline)
	set(&d.SourceStop, DefaultSourceStopDeadline)
	set(&d.Applying, DefaultApplyingDeadline)
	set(&d.StoppingSource, DefaultStoppingSourceDeadline)
	set(&d.StartingTarget, DefaultStartingTargetDeadline)
}

// of is the deadline of phase p (0: none).
func (d MigrationDeadlines) of(p managerv1.MigrationPhase) time.Duration {
	switch p {
	case phProposing:
		return d.Propose
	case phLaunching:
		return d.Launching
	case phSettingState, phAwaitingReady:
		return d.TargetReady
	case phAwaitingSourceStop:
		return d.SourceStop
	case phApplying:
		return d.Applying
	case phStoppingSource:
		return d.StoppingSource
	case phStartingTarget:
		return d.StartingTarget
	}
	return 0 // placing is synchronous; done and aborted are final
}

// MigrateOptions are MigrateJob's options.
type MigrateOptions struct {
	// TargetNodeID pins the target (that node or nowhere).
	TargetNodeID string
	// Strategy: stopThenStart (default), overlap or handover.
	Strategy managerv1.MigrationStrategy
	// SourceRole is the source instance's key (default: the job's current).
	SourceRole string
	// OverrideReservation lets the target onto an exclusive hot spare.
	OverrideReservation bool
	// RequestedBy is recorded on the migration.
	RequestedBy string
	// Repair marks the AutoManager's repair of a degraded anti-affinity
	// (recorded, counted against the repair limits, and its target's
	// placement told kind "repair"); Reason says why it was started.
	Repair bool
	Reason string
}

const (
	phProposing          = managerv1.MigrationPhase_MIGRATION_PHASE_PROPOSING
	phPlacing            = managerv1.MigrationPhase_MIGRATION_PHASE_PLACING
	phLaunching          = managerv1.MigrationPhase_MIGRATION_PHASE_LAUNCHING
	phSettingState       = managerv1.MigrationPhase_MIGRATION_PHASE_SETTING_STATE_ON_TARGET
	phAwaitingReady      = managerv1.MigrationPhase_MIGRATION_PHASE_AWAITING_TARGET_READY
	phAwaitingSourceStop = managerv1.MigrationPhase_MIGRATION_PHASE_AWAITING_SOURCE_STOP
	phApplying           = managerv1.MigrationPhase_MIGRATION_PHASE_APPLYING
	phStoppingSource     = managerv1.MigrationPhase_MIGRATION_PHASE_STOPPING_SOURCE
	phStartingTarget     = managerv1.MigrationPhase_MIGRATION_PHASE_STARTING_TARGET
	phDone               = managerv1.MigrationPhase_MIGRATION_PHASE_DONE
	phAborted            = managerv1.MigrationPhase_MIGRATION_PHASE_ABORTED

	stratStopThenStart = managerv1.MigrationStrategy_MIGRATION_STRATEGY_STOP_THEN_START
	stratOverlap       = managerv1.MigrationStrategy_MIGRATION_STRATEGY_OVERLAP
	stratHandover      = managerv1.MigrationStrategy_MIGRATION_STRATEGY_HANDOVER
)

func terminal(p managerv1.MigrationPhase) bool { return p == phDone || p == phAborted }

// PhaseName is a phase as seed 004 names it (norsk.PhaseName).
func PhaseName(p managerv1.MigrationPhase) string { return norsk.PhaseName(p) }

// StrategyName is a strategy as seed 004 names it (norsk.StrategyName).
func StrategyName(s managerv1.MigrationStrategy) string { return norsk.StrategyName(s) }

// TargetRole is the instance key a migration target wears: the source's
// slot and the first eight hex of the migration id ("primary@3f9c1e2a").
// Unique per migration, so a source and its target, and the targets of
// successive migrations, are distinct instances; the job is still told the
// slot (NORSK_RUNTIME_ROLE).
func TargetRole(slot, migrationID string) string {
	id := strings.ReplaceAll(migrationID, "-", "")
	if len(id) > 8 {
		id = id[:8]
	}
	return slot + "@" + id
}

// newMigrationID is a random (version 4) UUID.
func newMigrationID() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("crypto/rand: " + err.Error())
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// ReadApplySummary decodes the apply summary a handover target sent: JSON
// {"applied": [ids], "failed": [{"id", "reason"}], "skewMs": n}. It is nil
// for no payload or bytes that are not one; it never fails (the payload
// rides the event stream from a job's own code).
func ReadApplySummary(payload []byte) *managerv1.MigrationApplySummary {
	if len(payload) == 0 || !utf8.Valid(payload) {
		return nil
	}
	var raw struct {
		Applied []any `json:"applied"`
		Failed  []any `json:"failed"`
		SkewMs  any   `json:"skewMs"`
	}
	if err := json.Unmarshal(payload, &raw); err != nil {
		return nil
	}
	out := &managerv1.MigrationApplySummary{}
	for _, a := range raw.Applied {
		if s, ok := a.(string); ok {
			out.Applied = append(out.Applied, s)
		}
	}
	for _, f := range raw.Failed {
		m, ok := f.(map[string]any)
		if !ok {
			continue
		}
		id, ok := m["id"].(string)
		if !ok {
			continue
		}
		reason, _ := m["reason"].(string)
		out.Failed = append(out.Failed, &managerv1.MigrationApplyFailure{Id: id, Reason: reason})
	}
	if v, ok := raw.SkewMs.(float64); ok {
		out.SkewMs = v
	}
	return out
}

// slotForJob is the job's runtime slot, from its bundle replica index (a
// job placed through autoPlacement alone runs in "primary"); ok is false
// for a job the AutoManager does not place.
func slotForJob(job *managerv1.Job) (string, bool) {
	if _, replica, _, ok := placement.BundleJobOf(job); ok {
		return jobspec.ReplicaRole(replica), true
	}
	if job.GetAutoPlacement() != nil {
		return "primary", true
	}
	return "", false
}

// currentInstance is the slot's current instance of the job
// (jobspec.SlotInstance).
func currentInstance(jh *managerv1.JobWithHistory, slot string) *managerv1.Instance {
	return jobspec.SlotInstance(jh.GetInstances(), slot)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func phaseWord(p managerv1.InstancePhase) string {
	return strings.ToLower(strings.TrimPrefix(p.String(), "INSTANCE_PHASE_"))
}
