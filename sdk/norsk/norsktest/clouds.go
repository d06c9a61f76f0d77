package norsktest

import (
	"context"

	"connectrpc.com/connect"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/pkg/jobspec"
)

// The fake is a Manager configured with no cloud provider and no overrides
// file (config.yaml without providers.aws, providers.oci or
// providers.overridesFile), which is how a Manager starts by default. Each
// cloud call checks its request as the Manager does, then answers as such
// a Manager answers: FAILED_PRECONDITION naming what is not configured.

func noProvider(provider string) error {
	return errorf(connect.CodeFailedPrecondition, "this Manager runs no %s provider (configure providers.%s in config.yaml)", provider, provider)
}

func providerOr(p string) string {
	if p == "" {
		return "aws" // the seed's default
	}
	return p
}

// CreateAwsNode implements the Manager service: FAILED_PRECONDITION, no
// aws provider is configured.
func (s *Server) CreateAwsNode(context.Context, *connect.Request[managerv1.CreateAwsNodeRequest]) (*connect.Response[managerv1.CreateCloudNodeResponse], error) {
	return nil, noProvider("aws")
}

// CreateOciNode implements the Manager service: the request's fields are
// checked, then FAILED_PRECONDITION, no oci provider is configured.
func (s *Server) CreateOciNode(_ context.Context, req *connect.Request[managerv1.CreateOciNodeRequest]) (*connect.Response[managerv1.CreateCloudNodeResponse], error) {
	if err := jobspec.ValidateOciNode(req.Msg); err != nil {
		return nil, refuse(err)
	}
	return nil, noProvider("oci")
}

// CreateCloudHypervisorNode implements the Manager service: shape is
// required, then FAILED_PRECONDITION, no provider.
func (s *Server) CreateCloudHypervisorNode(_ context.Context, req *connect.Request[managerv1.CreateCloudHypervisorNodeRequest]) (*connect.Response[managerv1.CreateCloudNodeResponse], error) {
	if req.Msg.GetShape() == "" {
		return nil, errorf(connect.CodeInvalidArgument, "shape: is required")
	}
	return nil, noProvider("cloud-hypervisor")
}

// DescribeInstanceType implements the Manager service: instanceType is
// required, then FAILED_PRECONDITION, the provider is not run.
func (s *Server) DescribeInstanceType(_ context.Context, req *connect.Request[managerv1.DescribeInstanceTypeRequest]) (*connect.Response[managerv1.DescribeInstanceTypeResponse], error) {
	if err := jobspec.ValidateInstanceTypeName(req.Msg.GetInstanceType()); err != nil {
		return nil, refuse(err)
	}
	return nil, errorf(connect.CodeFailedPrecondition, "provider not run: the Manager runs no %q provider (it runs none)", providerOr(req.Msg.GetProvider()))
}

// ListInstanceTypes implements the Manager service: FAILED_PRECONDITION,
// the provider is not run.
func (s *Server) ListInstanceTypes(_ context.Context, req *connect.Request[managerv1.ListInstanceTypesRequest]) (*connect.Response[managerv1.ListInstanceTypesResponse], error) {
	return nil, errorf(connect.CodeFailedPrecondition, "provider not run: the Manager runs no %q provider (it runs none)", providerOr(req.Msg.GetProvider()))
}

// ListWorkerSecurityGroups implements the Manager service: region is
// required, then FAILED_PRECONDITION, no aws provider is configured.
func (s *Server) ListWorkerSecurityGroups(_ context.Context, req *connect.Request[managerv1.ListWorkerSecurityGroupsRequest]) (*connect.Response[managerv1.ListWorkerSecurityGroupsResponse], error) {
	if err := jobspec.ValidateRegion(req.Msg.GetRegion()); err != nil {
		return nil, refuse(err)
	}
	return nil, errorf(connect.CodeFailedPrecondition, "this Manager runs no aws provider (worker security groups are EC2's)")
}

// ReloadExternalConfig implements the Manager service:
// FAILED_PRECONDITION, no overrides file is configured.
func (s *Server) ReloadExternalConfig(context.Context, *connect.Request[managerv1.ReloadExternalConfigRequest]) (*connect.Response[managerv1.ReloadExternalConfigResponse], error) {
	return nil, errorf(connect.CodeFailedPrecondition, "no overrides file is configured (providers.overridesFile in config.yaml)")
}

// AddHostAgent implements the Manager service: the fake runs no
// cloud-hypervisor provider.
func (s *Server) AddHostAgent(_ context.Context, req *connect.Request[managerv1.AddHostAgentRequest]) (*connect.Response[managerv1.AddHostAgentResponse], error) {
	if req.Msg.GetName() == "" {
		return nil, errorf(connect.CodeInvalidArgument, "name: is required")
	}
	return nil, noProvider("cloud-hypervisor")
}

// RegisterHostAgent implements the Manager service: no token is known.
func (s *Server) RegisterHostAgent(context.Context, *connect.Request[managerv1.RegisterHostAgentRequest]) (*connect.Response[managerv1.RegisterHostAgentResponse], error) {
	return nil, errorf(connect.CodeUnauthenticated, "host agent registration token is unknown")
}

// ListHostAgents implements the Manager service: none.
func (s *Server) ListHostAgents(context.Context, *connect.Request[managerv1.ListHostAgentsRequest]) (*connect.Response[managerv1.ListHostAgentsResponse], error) {
	return connect.NewResponse(&managerv1.ListHostAgentsResponse{}), nil
}

// RemoveHostAgent implements the Manager service: none is known.
func (s *Server) RemoveHostAgent(_ context.Context, req *connect.Request[managerv1.RemoveHostAgentRequest]) (*connect.Response[managerv1.RemoveHostAgentResponse], error) {
	return nil, errorf(connect.CodeNotFound, "no host agent %q", req.Msg.GetName())
}
