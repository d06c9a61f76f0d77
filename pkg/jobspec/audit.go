package jobspec

import (
	"math"
	"strings"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"

	"github.com/norsk-go/norsk-manager/pkg/apierr"
)

// Limits of a caller's own audit entry.
const (
	MaxAuditSourceLen  = 128
	MaxAuditKindLen    = 128
	MaxAuditPayloadLen = 64 << 10
)

// ValidateAuditAppend checks an AppendAuditEntry's fields.
func ValidateAuditAppend(source, kind, payload string) error {
	switch {
	case source == "":
		return apierr.Invalid("source", "must not be empty")
	case len(source) > MaxAuditSourceLen:
		return apierr.Invalid("source", "is %d bytes (at most %d)", len(source), MaxAuditSourceLen)
	case kind == "":
		return apierr.Invalid("kind", "must not be empty")
	case len(kind) > MaxAuditKindLen:
		return apierr.Invalid("kind", "is %d bytes (at most %d)", len(kind), MaxAuditKindLen)
	case len(payload) > MaxAuditPayloadLen:
		return apierr.Invalid("payload", "is %d bytes (at most %d)", len(payload), MaxAuditPayloadLen)
	}
	return nil
}

// AuditSourceExternal is the source under which every AppendAuditEntry is
// stored ("external/<the caller's sub-source>"): a caller cannot write an
// entry of the Manager's own sources.
const AuditSourceExternal = "external/"

// MaxAuditSubSourceLen bounds the sub-source a caller gives
// AppendAuditEntry: with the external prefix it is at most the stored
// source's limit.
const MaxAuditSubSourceLen = MaxAuditSourceLen - len(AuditSourceExternal)

// ExternalAuditSource is the source an AppendAuditEntry is stored under: the
// caller's sub-source under AuditSourceExternal (given with the prefix
// already, it is not repeated). A caller cannot choose "api", "manager" or
// any source the Manager writes itself.
func ExternalAuditSource(sub string) (string, error) {
	sub = strings.TrimPrefix(sub, AuditSourceExternal)
	switch {
	case sub == "":
		return "", apierr.Invalid("source", "must name a sub-source (stored as %q + it)", AuditSourceExternal)
	case len(sub) > MaxAuditSubSourceLen:
		return "", apierr.Invalid("source", "is %d bytes (at most %d)", len(sub), MaxAuditSubSourceLen)
	}
	return AuditSourceExternal + sub, nil
}

// Paging limits of GetAuditLog.
const (
	DefaultAuditPage = 100
	MaxAuditPage     = 1000
)

// ValidateAuditQuery checks GetAuditLog's paging and time bounds.
func ValidateAuditQuery(q *managerv1.GetAuditLogRequest) error {
	switch {
	case q.GetLimit() > MaxAuditPage:
		return apierr.Invalid("limit", "%d is more than %d", q.GetLimit(), MaxAuditPage)
	case q.GetBeforeSeq() < 0:
		return apierr.Invalid("beforeSeq", "%d must not be negative", q.GetBeforeSeq())
	case q.GetFromMs() < 0 || q.GetToMs() < 0 || math.IsNaN(q.GetFromMs()) || math.IsNaN(q.GetToMs()):
		return apierr.Invalid("fromMs", "times are ms since the epoch")
	case q.GetToMs() != 0 && q.GetFromMs() > q.GetToMs():
		return apierr.Invalid("toMs", "%.0f is before fromMs %.0f", q.GetToMs(), q.GetFromMs())
	}
	return nil
}

// ValidatePruneBefore checks PruneAuditLog's time against now (both ms
// since the epoch; 0 prunes everything).
func ValidatePruneBefore(before, nowMs float64) error {
	switch {
	case before < 0 || math.IsNaN(before) || math.IsInf(before, 0):
		return apierr.Invalid("beforeTimestampMs", "%v must be a time in ms since the epoch (0 = everything)", before)
	case before > nowMs:
		return apierr.Invalid("beforeTimestampMs", "%.0f is in the future (now is %.0f); pruning only removes the past", before, nowMs)
	}
	return nil
}
