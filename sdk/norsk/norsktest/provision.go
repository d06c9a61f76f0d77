package norsktest

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"connectrpc.com/connect"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/pkg/jobspec"
)

// StartJobs implements the Manager service: each start as StartJob would
// answer it, in order.
func (s *Server) StartJobs(ctx context.Context, req *connect.Request[managerv1.StartJobsRequest]) (*connect.Response[managerv1.StartJobsResponse], error) {
	starts := req.Msg.GetStarts()
	// Malformed input refuses the whole call, as the Manager's does; a
	// start the store refuses is answered in its own result.
	if err := jobspec.ValidateStarts(starts); err != nil {
		return nil, refuse(err)
	}
	out := &managerv1.StartJobsResponse{}
	for _, st := range starts {
		res, err := s.StartJob(ctx, connect.NewRequest(st))
		r := &managerv1.StartResult{}
		var ce *connect.Error
		switch {
		case errors.As(err, &ce):
			r.ErrorCode, r.ErrorMessage = connectCodeName(ce.Code()), ce.Message()
		case err != nil:
			r.ErrorCode, r.ErrorMessage = connectCodeName(connect.CodeInternal), err.Error()
		default:
			r.FencingToken = res.Msg.GetFencingToken()
		}
		out.Results = append(out.Results, r)
	}
	return connect.NewResponse(out), nil
}

// connectCodeName is the gRPC name of a code ("FAILED_PRECONDITION").
func connectCodeName(c connect.Code) string {
	return strings.ToUpper(c.String())
}

// SetMockHosts gives the fake a mock provider of n hosts creating nodes of
// vcpus each in pools (the first is the default); 0 hosts: none, as a
// Manager with no providers.mock answers.
func (s *Server) SetMockHosts(n int, vcpus uint32, pools ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(pools) == 0 {
		pools = []string{"mock"}
	}
	s.mockHosts, s.mockVCPUs, s.mockPools = n, vcpus, pools
}

// CreateMockNode implements the Manager service: with mock hosts (see
// SetMockHosts) the node comes online at once on a free host.
func (s *Server) CreateMockNode(_ context.Context, req *connect.Request[managerv1.CreateMockNodeRequest]) (*connect.Response[managerv1.CreateMockNodeResponse], error) {
	s.mu.Lock()
	hosts, vcpus, pools := s.mockHosts, s.mockVCPUs, s.mockPools
	if hosts == 0 {
		s.mu.Unlock()
		return nil, errorf(connect.CodeFailedPrecondition, "this Manager has no mock provider (configure providers.mock in config.yaml)")
	}
	pool := req.Msg.GetPool()
	if pool == "" {
		pool = pools[0]
	}
	served := false
	for _, p := range pools {
		served = served || p == pool
	}
	if !served {
		s.mu.Unlock()
		return nil, errorf(connect.CodeInvalidArgument, "pool: the mock provider does not create nodes in pool %q", pool)
	}
	taken := map[string]bool{}
	for _, n := range s.nodes {
		if n.GetProvider() == "mock" && n.GetState() != managerv1.NodeState_NODE_STATE_TERMINATED {
			taken[n.GetProviderInstance()] = true
		}
	}
	host := ""
	for i := range hosts {
		if h := fmt.Sprintf("http://mock-host-%d", i+1); !taken[h] {
			host = h
			break
		}
	}
	id := req.Msg.GetNodeId()
	if id == "" {
		id = fmt.Sprintf("mock-%d", s.nextID+1)
		s.nextID++
	}
	_, exists := s.nodes[id]
	s.mu.Unlock()
	switch {
	case host == "":
		return nil, errorf(connect.CodeResourceExhausted, "mock provider: every mock host is in use (%d hosts)", hosts)
	case exists:
		return nil, errorf(connect.CodeAlreadyExists, "node %q already exists", id)
	}
	tags := map[string]string{"pool": pool}
	for k, v := range req.Msg.GetTags() {
		tags[k] = v
	}
	s.AddNode(&managerv1.Node{NodeId: id, NodeName: id, Provider: "mock", ProviderInstance: host, Elastic: true, Tags: tags,
		Hardware: &managerv1.Hardware{Vcpus: vcpus}})
	return connect.NewResponse(&managerv1.CreateMockNodeResponse{NodeId: id, Host: host}), nil
}
