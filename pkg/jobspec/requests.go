package jobspec

import (
	"fmt"
	"time"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/pkg/apierr"
)

// Limits of request fields the Manager's calls check.
const (
	// MaxGraceMs bounds a stop's grace period (one hour).
	MaxGraceMs = 3_600_000
	// MaxReasonLen bounds a failure reason.
	MaxReasonLen = 4096
	// MaxStartJobs bounds the starts of one StartJobs call.
	MaxStartJobs = 1000
	// MinBundleLeaseTTL and MaxBundleLeaseTTL bound RenewBundleLease's ttl.
	MinBundleLeaseTTL = time.Second
	MaxBundleLeaseTTL = 7 * 24 * time.Hour
	// MaxIdleExpiry is the longest idle expiry SetNodeIdleExpiry takes.
	MaxIdleExpiry = 365 * 24 * time.Hour
	// MaxTokenTTL is the longest API token lifetime CreateToken takes.
	MaxTokenTTL = 100 * 365 * 24 * time.Hour
	// MaxAnnounceInterval is the longest announcement interval.
	MaxAnnounceInterval = 24 * time.Hour
	// MaxEpochMs is the last millisecond of year 9999: audit times are ms
	// since the epoch up to it.
	MaxEpochMs = 253402300799999
	// MaxShmSizeBytes bounds a service's /dev/shm (1 TiB).
	MaxShmSizeBytes = 1 << 40
	// MaxSecretLen bounds tokens and secrets a caller presents.
	MaxSecretLen = 1024
	// MinTierSecretLen is the shortest tier secret the Manager takes: node
	// tokens are HMACs under it.
	MinTierSecretLen = 32
)

// ValidateInstance checks the (job, role, node) of an instance call; field
// prefixes the names ("" or "starts[3].").
func ValidateInstance(field, jobID, role, nodeID string) error {
	if err := ValidateID(field+"jobId", jobID); err != nil {
		return err
	}
	if err := ValidateRole(field+"role", role); err != nil {
		return err
	}
	return ValidateID(field+"nodeId", nodeID)
}

// ValidateStart checks one start's own fields (not whether its job and
// node exist: that is the store's to say); field prefixes the names.
func ValidateStart(field string, m *managerv1.StartJobRequest) error {
	if err := ValidateInstance(field, m.GetJobId(), m.GetRole(), m.GetNodeId()); err != nil {
		return err
	}
	if rr := m.GetOptions().GetRuntimeRole(); rr != "" {
		if err := ValidateRole(field+"options.runtimeRole", rr); err != nil {
			return err
		}
	}
	if n := len(m.GetOptions().GetMigrationInitialState()); n > MaxMigrationPayload {
		return apierr.Invalid(field+"options.migrationInitialState", "is %d bytes (at most 4 MiB)", n)
	}
	return nil
}

// ValidateStarts checks a StartJobs call's starts: 1 to MaxStartJobs, no
// instance twice, each well formed (ValidateStart). Whether each job and
// node exist is the store's to say, start by start.
func ValidateStarts(starts []*managerv1.StartJobRequest) error {
	switch {
	case len(starts) == 0:
		return apierr.Invalid("starts", "give at least one start")
	case len(starts) > MaxStartJobs:
		return apierr.Invalid("starts", "%d starts (at most %d in one call)", len(starts), MaxStartJobs)
	}
	seen := make(map[[2]string]int, len(starts))
	for i, m := range starts {
		field := fmt.Sprintf("starts[%d].", i)
		key := [2]string{m.GetJobId(), m.GetRole()}
		if j, dup := seen[key]; dup {
			return apierr.Invalid(field+"role", "instance %s/%s is also starts[%d]", m.GetJobId(), m.GetRole(), j)
		}
		seen[key] = i
		if err := ValidateStart(field, m); err != nil {
			return err
		}
	}
	return nil
}

// ValidateGrace checks a stop's grace period; field names it.
func ValidateGrace(field string, ms uint32) error {
	if ms > MaxGraceMs {
		return apierr.Invalid(field, "%d is more than an hour (%d)", ms, MaxGraceMs)
	}
	return nil
}

// ValidateFailReason checks MarkJobFailed's reason.
func ValidateFailReason(reason string) error {
	switch {
	case reason == "":
		return apierr.Invalid("reason", "must say why the job failed")
	case len(reason) > MaxReasonLen:
		return apierr.Invalid("reason", "is %d bytes (at most %d)", len(reason), MaxReasonLen)
	}
	return nil
}

// ValidateLeaseTTL checks RenewBundleLease's ttl.
func ValidateLeaseTTL(ms int64) error {
	if ttl := time.Duration(ms) * time.Millisecond; ttl < MinBundleLeaseTTL || ttl > MaxBundleLeaseTTL {
		return apierr.Invalid("ttlMs", "%d: a lease lasts from %d ms to %d ms", ms, MinBundleLeaseTTL.Milliseconds(), MaxBundleLeaseTTL.Milliseconds())
	}
	return nil
}

// ValidateLeasePause checks PauseLeases' reason and who pauses.
func ValidateLeasePause(reason, by string) error {
	if reason == "" {
		return apierr.Invalid("reason", "say why leases are paused (it is shown to every operator)")
	}
	if by == "" {
		return apierr.Invalid("by", "name who pauses leases")
	}
	return nil
}

// ValidateLeaseResume checks ResumeLeases' who resumes.
func ValidateLeaseResume(by string) error {
	if by == "" {
		return apierr.Invalid("by", "name who resumes leases")
	}
	return nil
}
