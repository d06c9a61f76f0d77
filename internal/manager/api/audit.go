package api

import (
	"context"

	"connectrpc.com/connect"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/internal/manager/intercept"
	"github.com/norsk-go/norsk-manager/internal/rpcerr"
	"github.com/norsk-go/norsk-manager/pkg/apierr"
	"github.com/norsk-go/norsk-manager/pkg/jobspec"
)

// AppendAuditEntry stores a caller's entry under the external source with
// the caller recorded beside it, so it can never pass for one the Manager
// wrote.
func (h *Handler) AppendAuditEntry(ctx context.Context, req *connect.Request[managerv1.AppendAuditEntryRequest]) (*connect.Response[managerv1.AppendAuditEntryResponse], error) {
	m := req.Msg
	source, err := jobspec.ExternalAuditSource(m.GetSource())
	if err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	if err := jobspec.ValidateAuditAppend(source, m.GetKind(), m.GetPayload()); err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	if intercept.Caller(ctx) == "" {
		// Every API call is authenticated; an entry without its caller
		// would be indistinguishable from an old one.
		return nil, rpcerr.ToConnect(apierr.New(apierr.Internal, "AppendAuditEntry outside an authenticated call"))
	}
	res, err := h.apply(ctx, &storev1.Command{Cmd: &storev1.Command_AppendAudit{AppendAudit: &storev1.AppendAudit{
		Source: source, Kind: m.GetKind(), Payload: m.GetPayload(),
	}}})
	if err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	return connect.NewResponse(&managerv1.AppendAuditEntryResponse{Entry: res.Value.(*managerv1.AuditLogEntry)}), nil
}

func (h *Handler) GetAuditLog(ctx context.Context, req *connect.Request[managerv1.GetAuditLogRequest]) (*connect.Response[managerv1.GetAuditLogResponse], error) {
	q := req.Msg
	if err := jobspec.ValidateAuditQuery(q); err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	limit := int(q.GetLimit())
	if limit == 0 {
		limit = DefaultAuditPage
	}
	r := h.read()
	out := &managerv1.GetAuditLogResponse{Checkpoint: r.AuditCheckpoint()}
	out.ChainVerifiedAtBoot, out.VerificationDetail = h.b.AuditVerdict()
	out.FirstSeq, out.LastSeq = r.AuditBounds()
	r.AuditEntries(nil, q.GetBeforeSeq(), func(e *managerv1.AuditLogEntry) bool {
		if q.GetFromMs() != 0 && e.GetTimestampMs() < q.GetFromMs() {
			return false // newest first: everything further is older still
		}
		if (q.GetSource() != "" && e.GetSource() != q.GetSource()) ||
			(q.GetKind() != "" && e.GetKind() != q.GetKind()) ||
			(q.GetToMs() != 0 && e.GetTimestampMs() > q.GetToMs()) {
			return true
		}
		if len(out.Entries) == limit {
			// Another match exists: the caller may page on.
			out.NextBeforeSeq = out.Entries[len(out.Entries)-1].GetSeq()
			return false
		}
		out.Entries = append(out.Entries, e)
		return true
	})
	return connect.NewResponse(out), nil
}

func (h *Handler) PruneAuditLog(ctx context.Context, req *connect.Request[managerv1.PruneAuditLogRequest]) (*connect.Response[managerv1.PruneAuditLogResponse], error) {
	before := req.Msg.GetBeforeTimestampMs()
	now := float64(h.cfg.Clock.Now().UnixNano()) / 1e6
	if err := jobspec.ValidatePruneBefore(before, now); err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	res, err := h.apply(ctx, &storev1.Command{Cmd: &storev1.Command_PruneAudit{PruneAudit: &storev1.PruneAudit{BeforeTimestampMs: before}}})
	if err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	pr := res.Value.(*storev1.PruneAuditResult)
	return connect.NewResponse(&managerv1.PruneAuditLogResponse{Removed: pr.GetRemoved(), CheckpointSeq: pr.GetCheckpointSeq()}), nil
}

// MaxAuditSubSourceLen bounds the sub-source a caller gives
// AppendAuditEntry (jobspec.ExternalAuditSource).
const MaxAuditSubSourceLen = jobspec.MaxAuditSubSourceLen

// Paging limits of GetAuditLog.
const (
	DefaultAuditPage = jobspec.DefaultAuditPage
	MaxAuditPage     = jobspec.MaxAuditPage
)
