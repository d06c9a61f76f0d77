// Package api is the Manager service's handlers, one file per resource
// (jobs.go, bundles.go, slots.go, nodes.go, events.go, …). A Handler reaches
// the member serving it only through Backend: each write is one stamped raft
// command through Backend.Apply, each read a state snapshot; the cluster
// membership RPCs are the cluster side's (ClusterRPCs).
package api

import (
	"context"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1/managerv1connect"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/internal/manager/intercept"
	"github.com/norsk-go/norsk-manager/internal/store/state"
)

// Handler implements the Manager service. Every write follows one path:
// validate → stamp time and ids → one raft command → the FSM. Reads come
// from a state snapshot. The cluster RPCs are the cluster side's
// (Config.Cluster); the others are here, one file per resource.
type Handler struct {
	ClusterRPCs
	b   Backend
	cfg Config
}

// New builds the Manager service's handler.
func New(cfg Config) *Handler {
	return &Handler{ClusterRPCs: cfg.Cluster, b: cfg.Backend, cfg: cfg}
}

var _ managerv1connect.ManagerHandler = (*Handler)(nil)

// apply stamps the command's time and its caller (for the audit log) and
// commits it: on the primary directly, from a follower by forwarding it to
// the primary (Backend.Apply). It returns once this member has applied it, so
// the handler reads its own write.
func (h *Handler) apply(ctx context.Context, cmd *storev1.Command) (state.Result, error) {
	cmd.Time = timestamppb.New(h.cfg.Clock.Now())
	cmd.Audit = intercept.AuditStamp(ctx, cmd)
	return h.b.Apply(ctx, cmd)
}

func (h *Handler) read() *state.Read { return h.b.Store().State().Snapshot() }
