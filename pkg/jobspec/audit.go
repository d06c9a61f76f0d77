package jobspec

import "github.com/norsk-go/norsk-manager/pkg/apierr"

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
