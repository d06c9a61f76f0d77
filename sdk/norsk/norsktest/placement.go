package norsktest

import (
	"context"

	"connectrpc.com/connect"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/pkg/placement"
)

// ExplainPlacement implements the Manager service with the Manager's own
// placement function over the fake's nodes and instances.
func (s *Server) ExplainPlacement(_ context.Context, req *connect.Request[managerv1.ExplainPlacementRequest]) (*connect.Response[managerv1.ExplainPlacementResponse], error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	j, ok := s.jobs[req.Msg.GetJobId()]
	if !ok {
		return nil, errorf(connect.CodeNotFound, "job %q not found", req.Msg.GetJobId())
	}
	role := req.Msg.GetRole()
	if role == "" {
		role = "primary"
	}
	var nodes []*managerv1.Node
	for _, id := range sortedIDs(s.nodes) {
		nodes = append(nodes, s.nodes[id])
	}
	var live []placement.JobInstance
	for _, jid := range sortedIDs(s.jobs) {
		for _, in := range s.jobs[jid].GetInstances() {
			if in.GetPhase() != managerv1.InstancePhase_INSTANCE_PHASE_STOPPED {
				live = append(live, placement.JobInstance{Instance: in, Job: s.jobs[jid].GetJob()})
			}
		}
	}
	out, err := placement.ExplainJob(placement.Config{}, nodes, live, j.GetJob(), role, req.Msg.GetPool())
	if err != nil {
		return nil, errorf(connect.CodeInvalidArgument, "%v", err)
	}
	return connect.NewResponse(out), nil
}
