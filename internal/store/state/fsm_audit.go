package state

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/hashicorp/go-memdb"
	"google.golang.org/protobuf/proto"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/pkg/apierr"
	"github.com/norsk-go/norsk-manager/pkg/auditchain"
	"github.com/norsk-go/norsk-manager/pkg/jobspec"
)

// Audit entry sources and kinds the Manager writes itself.
const (
	AuditSourceAPI     = "api"
	AuditSourceManager = "manager"
	AuditKindPruned    = "audit-pruned"
	AuditKindCreated   = "store-created"
	AuditKindMigrated  = "store-migrated"
	// AuditSourceExternal is the source under which every AppendAuditEntry
	// is stored ("external/<the caller's sub-source>"): a caller cannot
	// write an entry of the Manager's own sources.
	AuditSourceExternal = jobspec.AuditSourceExternal
)

// auditState returns the chain's state (zero before the first entry).
func (r *Read) auditState() *storev1.AuditState {
	if raw, err := r.txn.First(tableSingletons, "id", singletonAudit); err == nil && raw != nil {
		return raw.(*singleton).Msg.(*storev1.AuditState)
	}
	return &storev1.AuditState{NextSeq: 1}
}

// AuditCheckpoint is where the retained chain starts (nil if never pruned).
func (r *Read) AuditCheckpoint() *managerv1.AuditCheckpoint {
	return r.auditState().GetCheckpoint()
}

// AuditBounds returns the oldest and newest retained seq (0, 0 when empty).
func (r *Read) AuditBounds() (first, last int64) {
	it, err := r.txn.Get(tableAudit, "id")
	if err == nil {
		if raw := it.Next(); raw != nil {
			first = raw.(*managerv1.AuditLogEntry).GetSeq()
		}
	}
	rit, err := r.txn.GetReverse(tableAudit, "id")
	if err == nil {
		if raw := rit.Next(); raw != nil {
			last = raw.(*managerv1.AuditLogEntry).GetSeq()
		}
	}
	return first, last
}

// AuditEntries calls fn for retained entries, newest first from seq < before
// (0 = from the newest), until fn returns false. Entries must not be
// modified.
func (r *Read) AuditEntries(ws memdb.WatchSet, before int64, fn func(*managerv1.AuditLogEntry) bool) {
	var it memdb.ResultIterator
	var err error
	if before > 0 {
		it, err = r.txn.ReverseLowerBound(tableAudit, "id", before-1)
	} else {
		it, err = r.txn.GetReverse(tableAudit, "id")
	}
	if err != nil {
		panic("state read: " + err.Error())
	}
	r.watch(ws, tableAudit, "id_prefix")
	for raw := it.Next(); raw != nil; raw = it.Next() {
		if !fn(raw.(*managerv1.AuditLogEntry)) {
			return
		}
	}
}

// AuditChainOldestFirst returns every retained entry, oldest first (for
// verification).
func (r *Read) AuditChainOldestFirst() []*managerv1.AuditLogEntry {
	it, err := r.txn.Get(tableAudit, "id")
	if err != nil {
		panic("state read: " + err.Error())
	}
	var out []*managerv1.AuditLogEntry
	for raw := it.Next(); raw != nil; raw = it.Next() {
		out = append(out, raw.(*managerv1.AuditLogEntry))
	}
	return out
}

// VerifyAuditChain re-checks the whole retained chain, and that it ends
// where the chain's recorded head says (so entries dropped from the end, or
// a re-hashed newest entry, are caught too): nil, or a
// *auditchain.BrokenError naming the first broken entry.
func (r *Read) VerifyAuditChain() error {
	entries := r.AuditChainOldestFirst()
	if err := auditchain.Verify(r.AuditCheckpoint(), entries); err != nil {
		return err
	}
	st := r.auditState()
	headSeq, headHash := st.GetNextSeq()-1, st.GetLastHash()
	if st.GetNextSeq() == 0 {
		headSeq = 0
	}
	if len(entries) == 0 {
		if cp := r.AuditCheckpoint(); headSeq != cp.GetSeq() || headHash != cp.GetHash() {
			return &auditchain.BrokenError{Seq: cp.GetSeq() + 1, Reason: fmt.Sprintf("the chain's head is entry %d but no entry after the checkpoint (seq %d) is left", headSeq, cp.GetSeq())}
		}
		return nil
	}
	last := entries[len(entries)-1]
	switch {
	case last.GetSeq() != headSeq:
		return &auditchain.BrokenError{Seq: last.GetSeq() + 1, Reason: fmt.Sprintf("the chain's head is entry %d but the newest entry left is %d (entries were removed from the end)", headSeq, last.GetSeq())}
	case last.GetHash() != headHash:
		return &auditchain.BrokenError{Seq: last.GetSeq(), Reason: "its hash is not the chain's recorded head (it was altered and re-hashed)"}
	}
	return nil
}

// appendAudit chains a new entry, without a caller, at the command's time.
func (t *tx) appendAudit(source, kind, payload string) *managerv1.AuditLogEntry {
	return t.appendAuditBy(nil, source, kind, payload)
}

// appendAuditBy chains a new entry at the command's time. A stamp that
// names a caller records it in the entry (hash format 2); without one the
// entry is format 1, as every entry written before callers were recorded
// (so a replayed log hashes its old entries as it always did).
func (t *tx) appendAuditBy(stamp *storev1.AuditStamp, source, kind, payload string) *managerv1.AuditLogEntry {
	st := proto.Clone(t.read().auditState()).(*storev1.AuditState)
	if st.GetNextSeq() == 0 {
		st.NextSeq = 1
	}
	ts := float64(t.now.AsTime().UnixNano()) / 1e6
	e := &managerv1.AuditLogEntry{
		Seq:         st.GetNextSeq(),
		TimestampMs: ts,
		Source:      source,
		Kind:        kind,
		Payload:     payload,
		PrevHash:    st.GetLastHash(),
	}
	if stamp.GetCaller() != "" {
		e.Caller, e.CallerTokenId, e.HashVersion = stamp.GetCaller(), stamp.GetCallerTokenId(), auditchain.VersionCaller
	}
	e.Hash = auditchain.EntryHash(e)
	t.insert(tableAudit, e)
	st.NextSeq++
	st.LastHash = e.GetHash()
	t.insert(tableSingletons, &singleton{Key: singletonAudit, Msg: st})
	return e
}

// apiAuditPayload is the payload of the entry every audited call leaves.
type apiAuditPayload struct {
	Who     string `json:"who"`
	Method  string `json:"method"`
	Target  string `json:"target,omitempty"`
	Outcome string `json:"outcome"`
	Index   uint64 `json:"index"`
}

// auditCall records an API call that changed the state.
func (t *tx) auditCall(stamp *storev1.AuditStamp) {
	b, _ := json.Marshal(apiAuditPayload{
		Who: stamp.GetWho(), Method: stamp.GetMethod(), Target: stamp.GetTarget(), Outcome: "ok", Index: t.index,
	})
	source := stamp.GetSource()
	if source == "" {
		source = AuditSourceAPI
	}
	t.appendAuditBy(stamp, source, stamp.GetMethod(), string(b))
}

// appendAuditCmd appends an entry a command carries whole. A command that
// names its caller (every one since callers are recorded) is either that
// caller's own entry, under a source below AuditSourceExternal, or the
// Manager's account of the very call being made (source AuditSourceManager,
// kind the call's method: ReloadExternalConfig audits itself this way), so
// a caller's words can never pass for the Manager's. Older commands replay
// as they were written.
func (t *tx) appendAuditCmd(c *storev1.AppendAudit, stamp *storev1.AuditStamp) (*managerv1.AuditLogEntry, error) {
	managersOwn := c.GetSource() == AuditSourceManager && c.GetKind() == stamp.GetMethod()
	if stamp.GetCaller() != "" && !managersOwn && (!strings.HasPrefix(c.GetSource(), AuditSourceExternal) || len(c.GetSource()) == len(AuditSourceExternal)) {
		return nil, apierr.Invalid("source", "%s is not under %q: a caller's entry is stored under the Manager's external source", apierr.Quote(c.GetSource()), AuditSourceExternal)
	}
	return t.appendAuditBy(stamp, c.GetSource(), c.GetKind(), c.GetPayload()), nil
}

type prunedPayload struct {
	Who               string  `json:"who,omitempty"`
	Removed           int64   `json:"removed"`
	CheckpointSeq     int64   `json:"checkpointSeq"`
	BeforeTimestampMs float64 `json:"beforeTimestampMs"`
}

// pruneAudit front-prunes the chain; the answer is a *storev1.PruneAuditResult.
func (t *tx) pruneAudit(c *storev1.PruneAudit, stamp *storev1.AuditStamp) (*storev1.PruneAuditResult, error) {
	before := c.GetBeforeTimestampMs()
	r := t.read()
	var last *managerv1.AuditLogEntry
	var removed int64
	for _, e := range r.AuditChainOldestFirst() {
		// Front-pruning only: stop at the first entry that is kept, so the
		// retained chain stays one unbroken run.
		if before != 0 && e.GetTimestampMs() >= before {
			break
		}
		t.delete(tableAudit, e)
		last = e
		removed++
	}
	res := &storev1.PruneAuditResult{Removed: removed}
	st := proto.Clone(r.auditState()).(*storev1.AuditState)
	if last != nil {
		st.Checkpoint = &managerv1.AuditCheckpoint{Seq: last.GetSeq(), Hash: last.GetHash(), TimestampMs: last.GetTimestampMs()}
		t.insert(tableSingletons, &singleton{Key: singletonAudit, Msg: st})
	}
	res.CheckpointSeq = st.GetCheckpoint().GetSeq()
	b, _ := json.Marshal(prunedPayload{Who: stamp.GetWho(), Removed: removed, CheckpointSeq: res.GetCheckpointSeq(), BeforeTimestampMs: before})
	t.appendAuditBy(stamp, AuditSourceManager, AuditKindPruned, string(b))
	return res, nil
}
