package norsk

import (
	"context"
	"fmt"

	"connectrpc.com/connect"
	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
)

// Limits of the Manager's key/value store.
const (
	MaxKvNamespaceLen  = 128       // bytes of a namespace name (at least 1)
	MaxKvKeyLen        = 512       // bytes of a key (at least 1)
	MaxKvValueLen      = 256 << 10 // bytes of one value
	MaxKvWrites        = 128       // writes per commit
	MaxKvCommitPayload = 4 << 20   // bytes of all the values of one commit
)

// KvWrite is one write of a KvCommit: a put (KvPut) or a delete (KvDelete),
// optionally guarded by the revision the caller read (IfRevision, IfAbsent).
type KvWrite struct {
	// Key is the key written: 1-512 bytes of UTF-8 without NUL.
	Key string
	// Value is the value a put stores (nil stores an empty value).
	Value []byte
	// Delete makes the write a delete (Value must then be empty). Deleting
	// an absent key is not an error unless a revision is expected.
	Delete bool
	// ExpectedRevision, when set, is the revision the key must be at for the
	// commit to apply; 0 = the key must not exist. Nil = no check.
	ExpectedRevision *uint64
}

// KvPut is a write that stores value under key.
func KvPut(key string, value []byte) KvWrite { return KvWrite{Key: key, Value: value} }

// KvDelete is a write that removes key.
func KvDelete(key string) KvWrite { return KvWrite{Key: key, Delete: true} }

// IfRevision returns w guarded by the key's revision: the commit applies only
// if the key is at revision (the Revision of the KvEntry the caller read); 0
// means the key must not exist.
func (w KvWrite) IfRevision(revision uint64) KvWrite {
	w.ExpectedRevision = &revision
	return w
}

// IfAbsent returns w guarded so that the commit applies only if the key does
// not exist (IfRevision(0)).
func (w KvWrite) IfAbsent() KvWrite { return w.IfRevision(0) }

// KvCommitOptions are the namespace-wide parts of a KvCommit. The schema
// version is the client's own number for the namespace's layout: the Manager
// only stores and compares it.
type KvCommitOptions struct {
	// ExpectSchemaVersion, when set, is the schema version the namespace must
	// be at for the commit to apply (0 = never set).
	ExpectSchemaVersion *int64
	// SetSchemaVersion, when set, sets the namespace's schema version in the
	// same commit. A commit may consist of this alone.
	SetSchemaVersion *int64
}

// ExpectingSchema returns o with ExpectSchemaVersion set to v.
func (o KvCommitOptions) ExpectingSchema(v int64) KvCommitOptions {
	o.ExpectSchemaVersion = &v
	return o
}

// SettingSchema returns o with SetSchemaVersion set to v.
func (o KvCommitOptions) SettingSchema(v int64) KvCommitOptions {
	o.SetSchemaVersion = &v
	return o
}

// Int64 returns a pointer to v, for the schema versions of KvCommitOptions.
func Int64(v int64) *int64 { return &v }

// Uint64 returns a pointer to v, for KvWrite.ExpectedRevision (a store
// index, as every revision, index and fencing token of the SDK).
func Uint64(v uint64) *uint64 { return &v }

// KvCommit writes to the namespace of the Manager's key/value store, all or
// nothing: every write's expected revision and the options' expected schema
// version are checked first, and a single mismatch rejects the whole commit
// with ErrFailedPrecondition (the message names the write and the revision the
// key is at) and changes nothing. It returns the commit's revision: the
// revision of every key it wrote (its store index; revisions only grow).
//
// Limits: a namespace of 1-128 bytes, keys of 1-512 bytes, values of at most
// 256 KiB, at most 128 writes and 4 MiB of values per commit, no key twice in
// one commit; a commit needs a write or SetSchemaVersion. Errors:
// ErrInvalidArgument (a limit, naming the write as writes[i]),
// ErrFailedPrecondition, ErrUnavailable (no primary).
func (m *Manager) KvCommit(ctx context.Context, namespace string, writes []KvWrite, opts KvCommitOptions) (uint64, error) {
	const op = "KvCommit"
	if err := m.alive(op); err != nil {
		return 0, err
	}
	req := &managerv1.KvCommitRequest{
		Namespace: namespace,
		Options:   &managerv1.KvCommitOptions{ExpectedSchemaVersion: opts.ExpectSchemaVersion, SetSchemaVersion: opts.SetSchemaVersion},
	}
	for i, w := range writes {
		pw := &managerv1.KvWrite{Key: w.Key, ExpectedRevision: w.ExpectedRevision}
		switch {
		case w.Delete && len(w.Value) > 0:
			return 0, &Error{Op: op, Code: connect.CodeInvalidArgument, Message: fmt.Sprintf("writes[%d]: a delete of %q carries a value", i, w.Key)}
		case w.Delete:
			pw.Op = &managerv1.KvWrite_Delete{Delete: true}
		default:
			value := w.Value
			if value == nil {
				value = []byte{}
			}
			pw.Op = &managerv1.KvWrite_Put{Put: value}
		}
		req.Writes = append(req.Writes, pw)
	}
	res, err := m.client.KvCommit(ctx, connect.NewRequest(req))
	if err != nil {
		return 0, wrapError(op, err)
	}
	return res.Msg.GetRevision(), nil
}

// KvGet returns one key of the namespace, with its revision (the revision
// of its last write; pass it to IfRevision to update it safely) and create
// revision. An absent key is ErrNotFound, as an absent job is for JobById
// (the wire answer is an unset entry; the SDK maps it): test it with
// errors.Is, and use revision 0 (IfAbsent) to create it. An empty value is
// an entry with an empty Value, not an absent key. Errors: ErrNotFound,
// ErrInvalidArgument (a bad namespace or key).
func (m *Manager) KvGet(ctx context.Context, namespace, key string) (*KvEntry, error) {
	const op = "KvGet"
	if err := m.alive(op); err != nil {
		return nil, err
	}
	res, err := m.client.KvGet(ctx, connect.NewRequest(&managerv1.KvGetRequest{Namespace: namespace, Key: key}))
	if err != nil {
		return nil, wrapError(op, err)
	}
	if res.Msg.GetEntry() == nil {
		return nil, &Error{Op: op, Code: connect.CodeNotFound, Message: fmt.Sprintf("key %q of namespace %q not found", key, namespace)}
	}
	return res.Msg.GetEntry(), nil
}

// KvList returns every key of the namespace that starts with keyPrefix (""
// = all), in key order, and the namespace's schema version (0 when never
// set). A namespace that holds nothing is an empty list, not an error.
// Errors: ErrInvalidArgument (a bad namespace).
func (m *Manager) KvList(ctx context.Context, namespace, keyPrefix string) (entries []*KvEntry, schemaVersion int64, err error) {
	const op = "KvList"
	if err := m.alive(op); err != nil {
		return nil, 0, err
	}
	res, err := m.client.KvList(ctx, connect.NewRequest(&managerv1.KvListRequest{Namespace: namespace, KeyPrefix: keyPrefix}))
	if err != nil {
		return nil, 0, wrapError(op, err)
	}
	return res.Msg.GetEntries(), res.Msg.GetSchemaVersion(), nil
}
