package jobspec

import (
	"fmt"
	"strings"
	"unicode/utf8"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/pkg/apierr"
)

// Limits of the KV store.
const (
	MaxKVNamespaceLen  = 128
	MaxKVKeyLen        = 512
	MaxKVValueLen      = 256 << 10
	MaxKVWrites        = 128
	MaxKVCommitPayload = 4 << 20
)

// ValidateKVNamespace checks a namespace name.
func ValidateKVNamespace(ns string) error {
	switch {
	case ns == "":
		return apierr.Invalid("namespace", "must not be empty")
	case len(ns) > MaxKVNamespaceLen:
		return apierr.Invalid("namespace", "is %d bytes (at most %d)", len(ns), MaxKVNamespaceLen)
	case !utf8.ValidString(ns) || containsNUL(ns):
		return apierr.Invalid("namespace", "must be UTF-8 without NUL")
	}
	return nil
}

// ValidateKVKey checks a key; field names it in the error.
func ValidateKVKey(field, key string) error {
	switch {
	case key == "":
		return apierr.Invalid(field, "must not be empty")
	case len(key) > MaxKVKeyLen:
		return apierr.Invalid(field, "is %d bytes (at most %d)", len(key), MaxKVKeyLen)
	case !utf8.ValidString(key) || containsNUL(key):
		return apierr.Invalid(field, "must be UTF-8 without NUL")
	}
	return nil
}

func containsNUL(s string) bool { return strings.IndexByte(s, 0) >= 0 }

// ValidateKVCommit checks a commit's form (not its preconditions).
func ValidateKVCommit(ns string, writes []*managerv1.KvWrite, opts *managerv1.KvCommitOptions) error {
	if err := ValidateKVNamespace(ns); err != nil {
		return err
	}
	if len(writes) > MaxKVWrites {
		return apierr.Invalid("writes", "has %d writes (at most %d per commit)", len(writes), MaxKVWrites)
	}
	if len(writes) == 0 && opts.SetSchemaVersion == nil {
		return apierr.Invalid("writes", "nothing to commit: give writes or options.setSchemaVersion")
	}
	if opts.ExpectedSchemaVersion != nil && opts.GetExpectedSchemaVersion() < 0 {
		return apierr.Invalid("options.expectedSchemaVersion", "%d must not be negative", opts.GetExpectedSchemaVersion())
	}
	if opts.SetSchemaVersion != nil && opts.GetSetSchemaVersion() < 0 {
		return apierr.Invalid("options.setSchemaVersion", "%d must not be negative", opts.GetSetSchemaVersion())
	}
	seen := map[string]int{}
	total := 0
	for i, w := range writes {
		f := fmt.Sprintf("writes[%d]", i)
		if w == nil {
			return apierr.Invalid(f, "is empty")
		}
		if err := ValidateKVKey(f+".key", w.GetKey()); err != nil {
			return err
		}
		if j, dup := seen[w.GetKey()]; dup {
			return apierr.Invalid(f+".key", "%q is also written by writes[%d]; one write per key per commit", w.GetKey(), j)
		}
		seen[w.GetKey()] = i
		switch op := w.GetOp().(type) {
		case *managerv1.KvWrite_Put:
			if len(op.Put) > MaxKVValueLen {
				return apierr.Invalid(f+".put", "value is %d bytes (at most %d)", len(op.Put), MaxKVValueLen)
			}
			total += len(op.Put)
		case *managerv1.KvWrite_Delete:
			if !op.Delete {
				return apierr.Invalid(f+".delete", "must be true for a delete")
			}
		default:
			return apierr.Invalid(f, "needs put or delete")
		}
	}
	if total > MaxKVCommitPayload {
		return apierr.Invalid("writes", "values add up to %d bytes (at most %d per commit)", total, MaxKVCommitPayload)
	}
	return nil
}
