package state

import (
	"sort"

	"github.com/hashicorp/go-memdb"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/pkg/apierr"
)

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
