package norsktest

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"strings"

	"connectrpc.com/connect"
	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/pkg/auditchain"
	"github.com/norsk-go/norsk-manager/pkg/jobspec"
	"github.com/norsk-go/norsk-manager/pkg/snapshotfile"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// SchemaVersion is the store schema version the fake reports and writes in
// its snapshots.
const SchemaVersion = 2

// TamperAuditEntry applies edit to the stored audit entry seq in place,
// without re-hashing it — as someone editing the store behind the Manager's
// back would — so that a client-side verification finds the chain broken
// there. It reports whether the entry exists.
func (s *Server) TamperAuditEntry(seq int64, edit func(e *managerv1.AuditLogEntry)) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range s.audit {
		if e.Seq == seq {
			edit(e)
			return true
		}
	}
	return false
}

// SetAuditBootVerdict sets what GetAuditLog reports as the Manager's own
// verification of its chain at boot (default: verified).
func (s *Server) SetAuditBootVerdict(verified bool, detail string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.auditBootOK, s.auditBoot = verified, detail
}

// AuditEntries returns a copy of the retained audit entries, oldest first.
func (s *Server) AuditEntries() []*managerv1.AuditLogEntry {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*managerv1.AuditLogEntry, len(s.audit))
	for i, e := range s.audit {
		out[i] = proto.Clone(e).(*managerv1.AuditLogEntry)
	}
	return out
}

// SetStoreInfo makes GetStoreInfo answer info (nil restores the default:
// one "state" store at SchemaVersion, booted normally, no backups).
func (s *Server) SetStoreInfo(info *managerv1.StoreInfo) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.storeInfo = info
}

// SetSnapshotData makes SnapshotSave stream data as it is (e.g. a damaged
// snapshot); nil restores the default, a snapshot of the fake's state.
func (s *Server) SetSnapshotData(data []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.snapshotData = slices.Clone(data)
}

// nowMs is the fake's clock in ms since the epoch. Callers hold mu.
func (s *Server) nowMs() float64 { return float64(s.now().UnixNano()) / 1e6 }

// appendAudit chains a new entry. Callers hold mu.
func (s *Server) appendAudit(source, kind, payload string) *managerv1.AuditLogEntry {
	e := &managerv1.AuditLogEntry{
		Seq: s.auditNextSeq, TimestampMs: s.nowMs(), Source: source, Kind: kind, Payload: payload, PrevHash: s.auditLast,
	}
	e.Hash = auditchain.EntryHash(e)
	s.audit = append(s.audit, e)
	s.auditNextSeq++
	s.auditLast = e.Hash
	return e
}

// auditCall records an API call as the Manager does: source "api", the
// method as kind, and who / method / target / index as JSON. Callers hold
// mu.
func (s *Server) auditCall(peer, method, target string, index uint64) {
	who := "unknown"
	if peer != "" {
		who = "peer:" + peer
	}
	b, _ := json.Marshal(struct {
		Who     string `json:"who"`
		Method  string `json:"method"`
		Target  string `json:"target,omitempty"`
		Outcome string `json:"outcome"`
		Index   uint64 `json:"index"`
	}{who, method, target, "ok", index})
	s.appendAudit("api", method, string(b))
}

// AppendAuditEntry implements the Manager service.
func (s *Server) AppendAuditEntry(_ context.Context, req *connect.Request[managerv1.AppendAuditEntryRequest]) (*connect.Response[managerv1.AppendAuditEntryResponse], error) {
	m := req.Msg
	source, err := jobspec.ExternalAuditSource(m.GetSource())
	if err != nil {
		return nil, refuse(err)
	}
	if err := jobspec.ValidateAuditAppend(source, m.GetKind(), m.GetPayload()); err != nil {
		return nil, refuse(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nextIndex()
	e := s.appendAudit(source, m.GetKind(), m.GetPayload())
	return connect.NewResponse(&managerv1.AppendAuditEntryResponse{Entry: proto.Clone(e).(*managerv1.AuditLogEntry)}), nil
}

// GetAuditLog implements the Manager service: newest first, paged by
// before_seq, filtered as the Manager filters.
func (s *Server) GetAuditLog(_ context.Context, req *connect.Request[managerv1.GetAuditLogRequest]) (*connect.Response[managerv1.GetAuditLogResponse], error) {
	q := req.Msg
	if err := jobspec.ValidateAuditQuery(q); err != nil {
		return nil, refuse(err)
	}
	limit := int(q.GetLimit())
	if limit == 0 {
		limit = jobspec.DefaultAuditPage
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := &managerv1.GetAuditLogResponse{ChainVerifiedAtBoot: s.auditBootOK, VerificationDetail: s.auditBoot}
	if s.auditCkpt != nil {
		out.Checkpoint = proto.Clone(s.auditCkpt).(*managerv1.AuditCheckpoint)
	}
	if n := len(s.audit); n > 0 {
		out.FirstSeq, out.LastSeq = s.audit[0].Seq, s.audit[n-1].Seq
	}
	for _, e := range slices.Backward(s.audit) {
		if q.GetBeforeSeq() > 0 && e.Seq >= q.GetBeforeSeq() {
			continue
		}
		if q.GetFromMs() != 0 && e.TimestampMs < q.GetFromMs() {
			break
		}
		if len(out.Entries) == limit {
			out.NextBeforeSeq = out.Entries[len(out.Entries)-1].Seq
			break
		}
		if (q.GetSource() != "" && e.Source != q.GetSource()) ||
			(q.GetKind() != "" && e.Kind != q.GetKind()) ||
			(q.GetToMs() != 0 && e.TimestampMs > q.GetToMs()) {
			continue
		}
		out.Entries = append(out.Entries, proto.Clone(e).(*managerv1.AuditLogEntry))
	}
	return connect.NewResponse(out), nil
}

// PruneAuditLog implements the Manager service: front-prunes, records the
// checkpoint and appends an audit-pruned marker.
func (s *Server) PruneAuditLog(_ context.Context, req *connect.Request[managerv1.PruneAuditLogRequest]) (*connect.Response[managerv1.PruneAuditLogResponse], error) {
	before := req.Msg.GetBeforeTimestampMs()
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.nowMs()
	if err := jobspec.ValidatePruneBefore(before, now); err != nil {
		return nil, refuse(err)
	}
	var removed int64
	for len(s.audit) > 0 && (before == 0 || s.audit[0].TimestampMs < before) {
		e := s.audit[0]
		s.auditCkpt = &managerv1.AuditCheckpoint{Seq: e.Seq, Hash: e.Hash, TimestampMs: e.TimestampMs}
		s.audit = s.audit[1:]
		removed++
	}
	res := &managerv1.PruneAuditLogResponse{Removed: removed, CheckpointSeq: s.auditCkpt.GetSeq()}
	b, _ := json.Marshal(map[string]any{"who": whoOf(req.Peer().Addr), "removed": removed, "checkpointSeq": res.CheckpointSeq, "beforeTimestampMs": before})
	s.nextIndex()
	s.appendAudit("manager", "audit-pruned", string(b))
	return connect.NewResponse(res), nil
}

func whoOf(addr string) string {
	if addr == "" {
		return "unknown"
	}
	return "peer:" + addr
}

// KvCommit implements the Manager service: every precondition first, then
// every write at one new index.
func (s *Server) KvCommit(_ context.Context, req *connect.Request[managerv1.KvCommitRequest]) (*connect.Response[managerv1.KvCommitResponse], error) {
	m := req.Msg
	ns, opts := m.GetNamespace(), m.GetOptions()
	if opts == nil {
		opts = &managerv1.KvCommitOptions{}
	}
	if err := jobspec.ValidateKVCommit(ns, m.GetWrites(), opts); err != nil {
		return nil, refuse(err)
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	schema := s.kvSchema[ns]
	if opts.ExpectedSchemaVersion != nil && opts.GetExpectedSchemaVersion() != schema {
		return nil, errorf(connect.CodeFailedPrecondition, "namespace %q is at schema version %d, the commit expects %d", ns, schema, opts.GetExpectedSchemaVersion())
	}
	keys := s.kv[ns]
	for i, w := range m.GetWrites() {
		if w.ExpectedRevision == nil {
			continue
		}
		cur, want := keys[w.GetKey()], w.GetExpectedRevision()
		switch {
		case cur.GetRevision() == want:
		case want == 0:
			return nil, errorf(connect.CodeFailedPrecondition, "writes[%d]: key %q exists (revision %d); the write expects it not to", i, w.GetKey(), cur.GetRevision())
		case cur == nil:
			return nil, errorf(connect.CodeFailedPrecondition, "writes[%d]: key %q does not exist; the write expects revision %d", i, w.GetKey(), want)
		default:
			return nil, errorf(connect.CodeFailedPrecondition, "writes[%d]: key %q is at revision %d; the write expects %d", i, w.GetKey(), cur.GetRevision(), want)
		}
	}
	i := s.nextIndex()
	rev := i
	if keys == nil {
		keys = map[string]*managerv1.KvEntry{}
		s.kv[ns] = keys
	}
	for _, w := range m.GetWrites() {
		cur := keys[w.GetKey()]
		switch op := w.GetOp().(type) {
		case *managerv1.KvWrite_Put:
			created := rev
			if cur != nil {
				created = cur.CreateRevision
			}
			keys[w.GetKey()] = &managerv1.KvEntry{Key: w.GetKey(), Value: slices.Clone(op.Put), Revision: rev, CreateRevision: created}
		case *managerv1.KvWrite_Delete:
			delete(keys, w.GetKey())
		}
	}
	if opts.SetSchemaVersion != nil {
		schema = opts.GetSetSchemaVersion()
		s.kvSchema[ns] = schema
	}
	s.auditCall(req.Peer().Addr, "KvCommit", "kv/"+ns, i)
	return connect.NewResponse(&managerv1.KvCommitResponse{Revision: rev, SchemaVersion: schema}), nil
}

// KvGet implements the Manager service.
func (s *Server) KvGet(_ context.Context, req *connect.Request[managerv1.KvGetRequest]) (*connect.Response[managerv1.KvGetResponse], error) {
	if err := jobspec.ValidateKVNamespace(req.Msg.GetNamespace()); err != nil {
		return nil, refuse(err)
	}
	if err := jobspec.ValidateKVKey("key", req.Msg.GetKey()); err != nil {
		return nil, refuse(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := &managerv1.KvGetResponse{}
	if e := s.kv[req.Msg.GetNamespace()][req.Msg.GetKey()]; e != nil {
		out.Entry = proto.Clone(e).(*managerv1.KvEntry)
	}
	return connect.NewResponse(out), nil
}

// KvList implements the Manager service.
func (s *Server) KvList(_ context.Context, req *connect.Request[managerv1.KvListRequest]) (*connect.Response[managerv1.KvListResponse], error) {
	ns := req.Msg.GetNamespace()
	if err := jobspec.ValidateKVNamespace(ns); err != nil {
		return nil, refuse(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := &managerv1.KvListResponse{SchemaVersion: s.kvSchema[ns], Revision: s.index}
	for _, k := range sortedIDs(s.kv[ns]) {
		if strings.HasPrefix(k, req.Msg.GetKeyPrefix()) {
			out.Entries = append(out.Entries, proto.Clone(s.kv[ns][k]).(*managerv1.KvEntry))
		}
	}
	return connect.NewResponse(out), nil
}

// GetStoreInfo implements the Manager service.
func (s *Server) GetStoreInfo(context.Context, *connect.Request[managerv1.GetStoreInfoRequest]) (*connect.Response[managerv1.StoreInfo], error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.storeInfo != nil {
		return connect.NewResponse(proto.Clone(s.storeInfo).(*managerv1.StoreInfo)), nil
	}
	return connect.NewResponse(&managerv1.StoreInfo{
		Stores:       []*managerv1.StoreSchema{{Name: "state", SchemaVersion: SchemaVersion, BinarySchemaVersion: SchemaVersion}},
		Boot:         &managerv1.BootReport{BootedAt: timestamppb.New(s.now())},
		AppliedIndex: s.index,
		DataDir:      "/fake/norsktest",
	}), nil
}

// snapshotChunk is the size of the fake's SnapshotSave messages.
const snapshotChunk = 64 << 10

// SnapshotSave implements the Manager service: the snapshot is taken under
// the lock, then streamed in chunks.
func (s *Server) SnapshotSave(ctx context.Context, _ *connect.Request[managerv1.SnapshotSaveRequest], stream *connect.ServerStream[managerv1.SnapshotChunk]) error {
	s.mu.Lock()
	data := s.snapshotData
	var err error
	if data == nil {
		data, err = s.snapshotFile()
	}
	s.mu.Unlock()
	if err != nil {
		return connect.NewError(connect.CodeInternal, err)
	}
	for len(data) > 0 {
		if err := ctx.Err(); err != nil {
			return err
		}
		n := min(len(data), snapshotChunk)
		if err := stream.Send(&managerv1.SnapshotChunk{Data: data[:n]}); err != nil {
			return err
		}
		data = data[n:]
	}
	return nil
}

// snapshotFile writes the fake's state as a snapshot file. Callers hold mu.
func (s *Server) snapshotFile() ([]byte, error) {
	var buf bytes.Buffer
	w := snapshotfile.NewWriter(&buf)
	put := func(rec *storev1.SnapshotRecord) error { return w.Put(rec) }
	recs := []*storev1.SnapshotRecord{
		{Record: &storev1.SnapshotRecord_Header{Header: &storev1.SnapshotHeader{SchemaVersion: SchemaVersion, Index: s.index}}},
		{Record: &storev1.SnapshotRecord_StoreMeta{StoreMeta: &storev1.StoreMeta{SchemaVersion: SchemaVersion}}},
	}
	for _, id := range sortedIDs(s.jobs) {
		j := s.jobs[id]
		recs = append(recs, &storev1.SnapshotRecord{Record: &storev1.SnapshotRecord_Job{Job: &storev1.JobRecord{Job: j.Job, History: j.History}}})
		for _, in := range j.Instances {
			recs = append(recs, &storev1.SnapshotRecord{Record: &storev1.SnapshotRecord_Instance{Instance: in}})
		}
	}
	for _, id := range sortedIDs(s.nodes) {
		recs = append(recs, &storev1.SnapshotRecord{Record: &storev1.SnapshotRecord_Node{Node: &storev1.NodeRecord{Node: s.nodes[id]}}})
	}
	recs = append(recs, &storev1.SnapshotRecord{Record: &storev1.SnapshotRecord_AuditState{AuditState: &storev1.AuditState{
		NextSeq: s.auditNextSeq, LastHash: s.auditLast, Checkpoint: s.auditCkpt,
	}}})
	for _, e := range s.audit {
		recs = append(recs, &storev1.SnapshotRecord{Record: &storev1.SnapshotRecord_AuditEntry{AuditEntry: e}})
	}
	for _, ns := range sortedIDs(s.kvSchema) {
		recs = append(recs, &storev1.SnapshotRecord{Record: &storev1.SnapshotRecord_KvNamespace{KvNamespace: &storev1.KvNamespace{Name: ns, SchemaVersion: s.kvSchema[ns]}}})
	}
	for _, ns := range sortedIDs(s.kv) {
		for _, k := range sortedIDs(s.kv[ns]) {
			recs = append(recs, &storev1.SnapshotRecord{Record: &storev1.SnapshotRecord_Kv{Kv: &storev1.KvRecord{Namespace: ns, Entry: s.kv[ns][k]}}})
		}
	}
	for _, rec := range recs {
		if err := put(rec); err != nil {
			return nil, err
		}
	}
	if _, err := w.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
