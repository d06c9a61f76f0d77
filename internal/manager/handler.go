package manager

import (
	"context"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1/managerv1connect"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/internal/auth"
	"github.com/norsk-go/norsk-manager/internal/store/state"
)

// handler implements the Manager service. Every write follows one path:
// validate → stamp time and ids → one raft command → the FSM. Reads come
// from a state snapshot.
type handler struct {
	s *Server
}

var _ managerv1connect.ManagerHandler = (*handler)(nil)

// apply stamps the command's time and its caller (for the audit log) and
// commits it: on the primary directly, from a follower by forwarding it to
// the primary (forward.go). It returns once this member has applied it, so
// the handler reads its own write.
func (h *handler) apply(ctx context.Context, cmd *storev1.Command) (state.Result, error) {
	cmd.Time = timestamppb.New(h.s.cfg.Clock.Now())
	cmd.Audit = auditStamp(ctx, cmd)
	return h.s.apply(ctx, cmd)
}

func (h *handler) read() *state.Read { return h.s.st().State().Snapshot() }

// NewClusterID makes a cluster id: 32 random hex digits. The boot code
// stamps it into the InitCluster command that bootstraps a store.
func NewClusterID() string { return auth.RandomToken("", 16) }
