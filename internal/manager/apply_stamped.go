package manager

import (
	"context"

	"google.golang.org/protobuf/types/known/timestamppb"

	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/internal/manager/intercept"
	"github.com/norsk-go/norsk-manager/internal/store/state"
)

// applyAs applies a command the daemon makes on its own (the empty-node
// reaper, a provider), stamped with the time and audited as who.
func (s *Server) applyAs(ctx context.Context, who, method string, cmd *storev1.Command) (state.Result, error) {
	cmd.Time = timestamppb.New(s.cfg.Clock.Now())
	cmd.Audit = &storev1.AuditStamp{Who: who, Method: method, Target: intercept.AuditTarget(cmd)}
	return s.member.Apply(ctx, cmd)
}
