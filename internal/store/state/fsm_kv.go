package state

import (
	"fmt"
	"sort"
	"unicode/utf8"

	"github.com/hashicorp/go-memdb"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/internal/apierr"
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

func containsNUL(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] == 0 {
			return true
		}
	}
	return false
}

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

// KVGet returns a key's record, or nil when absent.
func (r *Read) KVGet(ws memdb.WatchSet, ns, key string) *storev1.KvRecord {
	if raw := r.first(ws, tableKV, "id", KVID(ns, key)); raw != nil {
		return raw.(*storev1.KvRecord)
	}
	return nil
}

// KVList calls fn for each key of ns starting with prefix, in key order,
// until fn returns false.
func (r *Read) KVList(ws memdb.WatchSet, ns, prefix string, fn func(*storev1.KvRecord) bool) {
	it := r.iter(ws, tableKV, "id_prefix", KVID(ns, prefix))
	for raw := it.Next(); raw != nil; raw = it.Next() {
		if !fn(raw.(*storev1.KvRecord)) {
			return
		}
	}
}

// KVSchemaVersion is a namespace's schema version (0 when never set).
func (r *Read) KVSchemaVersion(ws memdb.WatchSet, ns string) int64 {
	if raw := r.first(ws, tableKVNS, "id", ns); raw != nil {
		return raw.(*storev1.KvNamespace).GetSchemaVersion()
	}
	return 0
}

// kvCommit applies a commit all or nothing; the answer is the
// *managerv1.KvCommitResponse.
func (t *tx) kvCommit(c *storev1.KvCommit) (*managerv1.KvCommitResponse, error) {
	opts := c.GetOptions()
	if opts == nil {
		opts = &managerv1.KvCommitOptions{}
	}
	ns := c.GetNamespace()
	if err := ValidateKVCommit(ns, c.GetWrites(), opts); err != nil {
		return nil, err
	}
	r := t.read()
	schema := r.KVSchemaVersion(nil, ns)
	if opts.ExpectedSchemaVersion != nil && opts.GetExpectedSchemaVersion() != schema {
		return nil, apierr.FailedPreconditionf("namespace %q is at schema version %d, the commit expects %d", ns, schema, opts.GetExpectedSchemaVersion())
	}
	// Every precondition first: a mismatch changes nothing.
	for i, w := range c.GetWrites() {
		if w.ExpectedRevision == nil {
			continue
		}
		cur := r.KVGet(nil, ns, w.GetKey())
		have := cur.GetEntry().GetRevision()
		if have != w.GetExpectedRevision() {
			switch {
			case w.GetExpectedRevision() == 0:
				return nil, apierr.FailedPreconditionf("writes[%d]: key %q exists (revision %d); the write expects it not to", i, w.GetKey(), have)
			case cur == nil:
				return nil, apierr.FailedPreconditionf("writes[%d]: key %q does not exist; the write expects revision %d", i, w.GetKey(), w.GetExpectedRevision())
			default:
				return nil, apierr.FailedPreconditionf("writes[%d]: key %q is at revision %d; the write expects %d", i, w.GetKey(), have, w.GetExpectedRevision())
			}
		}
	}
	rev := t.index
	for _, w := range c.GetWrites() {
		cur := r.KVGet(nil, ns, w.GetKey())
		switch op := w.GetOp().(type) {
		case *managerv1.KvWrite_Put:
			created := rev
			if cur != nil {
				created = cur.GetEntry().GetCreateRevision()
			}
			t.insert(tableKV, &storev1.KvRecord{Namespace: ns, Entry: &managerv1.KvEntry{
				Key: w.GetKey(), Value: op.Put, Revision: rev, CreateRevision: created,
			}})
		case *managerv1.KvWrite_Delete:
			if cur != nil {
				t.delete(tableKV, cur)
			}
		}
	}
	if opts.SetSchemaVersion != nil {
		schema = opts.GetSetSchemaVersion()
		t.insert(tableKVNS, &storev1.KvNamespace{Name: ns, SchemaVersion: schema})
	}
	return &managerv1.KvCommitResponse{Revision: rev, SchemaVersion: schema}, nil
}

// kvNamespaces lists namespace rows in name order (snapshots).
func (r *Read) kvNamespaces() []*storev1.KvNamespace {
	var out []*storev1.KvNamespace
	it := r.iter(nil, tableKVNS, "id_prefix", "")
	for raw := it.Next(); raw != nil; raw = it.Next() {
		out = append(out, raw.(*storev1.KvNamespace))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].GetName() < out[j].GetName() })
	return out
}
