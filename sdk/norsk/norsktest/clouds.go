package norsktest

import (
	"context"
	"errors"

	"connectrpc.com/connect"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
)

// The cloud providers' calls are not modelled by the fake yet: each answers
// UNIMPLEMENTED, as a Manager without them would (the fake is to be rebuilt
// against a contract suite).
var errNoClouds = errors.New("norsktest: the fake models no cloud provider")

// CreateAwsNode implements the Manager service: UNIMPLEMENTED.
func (s *Server) CreateAwsNode(context.Context, *connect.Request[managerv1.CreateAwsNodeRequest]) (*connect.Response[managerv1.CreateCloudNodeResponse], error) {
	return nil, connect.NewError(connect.CodeUnimplemented, errNoClouds)
}

// CreateOciNode implements the Manager service: UNIMPLEMENTED.
func (s *Server) CreateOciNode(context.Context, *connect.Request[managerv1.CreateOciNodeRequest]) (*connect.Response[managerv1.CreateCloudNodeResponse], error) {
	return nil, connect.NewError(connect.CodeUnimplemented, errNoClouds)
}

// DescribeInstanceType implements the Manager service: UNIMPLEMENTED.
func (s *Server) DescribeInstanceType(context.Context, *connect.Request[managerv1.DescribeInstanceTypeRequest]) (*connect.Response[managerv1.DescribeInstanceTypeResponse], error) {
	return nil, connect.NewError(connect.CodeUnimplemented, errNoClouds)
}

// ListInstanceTypes implements the Manager service: UNIMPLEMENTED.
func (s *Server) ListInstanceTypes(context.Context, *connect.Request[managerv1.ListInstanceTypesRequest]) (*connect.Response[managerv1.ListInstanceTypesResponse], error) {
	return nil, connect.NewError(connect.CodeUnimplemented, errNoClouds)
}

// ListWorkerSecurityGroups implements the Manager service: UNIMPLEMENTED.
func (s *Server) ListWorkerSecurityGroups(context.Context, *connect.Request[managerv1.ListWorkerSecurityGroupsRequest]) (*connect.Response[managerv1.ListWorkerSecurityGroupsResponse], error) {
	return nil, connect.NewError(connect.CodeUnimplemented, errNoClouds)
}

// ReloadExternalConfig implements the Manager service: UNIMPLEMENTED.
func (s *Server) ReloadExternalConfig(context.Context, *connect.Request[managerv1.ReloadExternalConfigRequest]) (*connect.Response[managerv1.ReloadExternalConfigResponse], error) {
	return nil, connect.NewError(connect.CodeUnimplemented, errNoClouds)
}
