package api_test

import (
	"testing"

	"connectrpc.com/connect"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/internal/manager/api"
)

// TestAuditHandlers: the audit log over a fake backend; pruning is
// checked against the handler's clock.
func TestAuditHandlers(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	h := e.h
	nowMs := float64(t0.UnixMilli())
	e.run(t, []hcase{
		{name: "AppendAuditEntry/NoSource", do: call(h.AppendAuditEntry, &managerv1.AppendAuditEntryRequest{Kind: "k"}),
			code: connect.CodeInvalidArgument, names: []string{"source:"}},
		{name: "AppendAuditEntry/OutsideACall", do: call(h.AppendAuditEntry, &managerv1.AppendAuditEntryRequest{Source: "mgr", Kind: "k"}),
			code: connect.CodeInternal, names: []string{"outside an authenticated call"}},
		{name: "GetAuditLog/TooMany", do: call(h.GetAuditLog, &managerv1.GetAuditLogRequest{Limit: api.MaxAuditPage + 1}),
			code: connect.CodeInvalidArgument, names: []string{"limit:"}},
		{name: "PruneAuditLog/Future", do: call(h.PruneAuditLog, &managerv1.PruneAuditLogRequest{BeforeTimestampMs: nowMs + 1000}),
			code: connect.CodeInvalidArgument, names: []string{"beforeTimestampMs:", "in the future"}},
		{name: "PruneAuditLog/Past", do: call(h.PruneAuditLog, &managerv1.PruneAuditLogRequest{BeforeTimestampMs: nowMs - 1000}),
			want: []*storev1.Command{{Cmd: &storev1.Command_PruneAudit{PruneAudit: &storev1.PruneAudit{BeforeTimestampMs: nowMs - 1000}}}}},
	})
}
