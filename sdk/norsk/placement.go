package norsk

import (
	"context"

	"connectrpc.com/connect"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
)

// ExplainPlacement says where instance role ("" = primary) of job jobID
// would be placed now — its autoPlacement requirements against every node
// and the instances already bound — and, for every node that would not take
// it, which rule refuses it and why. pool names the pool whose tiers are
// tried ("" = every node). It binds nothing. ErrNotFound for an unknown
// job.
func (m *Manager) ExplainPlacement(ctx context.Context, jobID, role, pool string) (*ExplainPlacementResponse, error) {
	const op = "ExplainPlacement"
	if err := m.alive(op); err != nil {
		return nil, err
	}
	res, err := m.client.ExplainPlacement(ctx, connect.NewRequest(&managerv1.ExplainPlacementRequest{JobId: jobID, Role: role, Pool: pool}))
	if err != nil {
		return nil, wrapError(op, err)
	}
	return res.Msg, nil
}
