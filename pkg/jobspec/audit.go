package jobspec

import (
	"strings"

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
