package norsk

import (
	"context"

	"connectrpc.com/connect"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
)

// From norsk/manager/v1/cloud.proto.
type (
	CloudNode                    = managerv1.CreateCloudNodeResponse
	CloudInstance                = managerv1.CloudInstance
	InstanceTypeInfo             = managerv1.InstanceTypeInfo
	WorkerSecurityGroup          = managerv1.WorkerSecurityGroup
	SecurityGroupRule            = managerv1.SecurityGroupRule
	ExternalConfigReload         = managerv1.ExternalConfigReload
	ReloadExternalConfigResponse = managerv1.ReloadExternalConfigResponse
	ElasticChoice                = managerv1.ElasticChoice
	ElasticRejection             = managerv1.ElasticRejection
	ListInstanceTypesResponse    = managerv1.ListInstanceTypesResponse
)

// AwsNode asks CreateAwsNode for an EC2 node.
type AwsNode struct {
	// NodeID names the node ("" = the Manager names it).
	NodeID string
	// Region and InstanceType are required: a region the Manager runs (its
	// overrides file names it) and a type offered there.
	Region       string
	InstanceType string
	Pool         string
	Tags         map[string]string
	// SecurityGroupLabels select worker security groups (see
	// ListWorkerSecurityGroups) besides the region's base groups.
	SecurityGroupLabels []string
	Subnet              string
	AvailabilityZone    string
	// WorkerVersion picks the worker image ("" = the Manager's version).
	WorkerVersion string
	// FallbackInstanceTypes are tried, in order, when EC2 has no capacity.
	FallbackInstanceTypes []string
}

// OciNode asks CreateOciNode for an OCI node.
type OciNode struct {
	NodeID string
	// AvailabilityDomain and Shape are required; Region defaults to the
	// domain's.
	AvailabilityDomain string
	Shape              string
	Region             string
	Pool               string
	Tags               map[string]string
	Subnet             string
	WorkerVersion      string
	FallbackShapes     []string
	// OCPUs and MemoryGBs size a flexible shape (0 = its defaults).
	OCPUs, MemoryGBs float32
}

// CreateAwsNode spawns an EC2 instance running the worker image and makes it
// available for jobs (the seed's createAwsNode). It returns once the
// instance is launched: the node is STARTING until its worker registers,
// then ONLINE (watch the event stream, or ListNodes). Errors:
// ErrFailedPrecondition (no aws provider, a region the Manager does not
// run, no worker image for the version), ErrInvalidArgument (a bad field,
// a type not offered in the region, an unknown security-group label),
// ErrResourceExhausted (EC2 had no capacity for any type tried),
// ErrUnavailable (the instance-type cache is not warm, or EC2 refused: the
// node is then recorded terminated with EC2's message).
func (m *Manager) CreateAwsNode(ctx context.Context, n AwsNode) (*CloudNode, error) {
	const op = "CreateAwsNode"
	if err := m.alive(op); err != nil {
		return nil, err
	}
	res, err := m.client.CreateAwsNode(ctx, connect.NewRequest(&managerv1.CreateAwsNodeRequest{
		NodeId: n.NodeID, Tags: n.Tags, Region: n.Region, InstanceType: n.InstanceType, Pool: n.Pool,
		SecurityGroupLabels: n.SecurityGroupLabels, Subnet: n.Subnet, AvailabilityZone: n.AvailabilityZone,
		WorkerVersion: n.WorkerVersion, FallbackInstanceTypes: n.FallbackInstanceTypes,
	}))
	if err != nil {
		return nil, wrapError(op, err)
	}
	return res.Msg, nil
}

// CreateOciNode spawns an OCI instance running the worker image and makes
// it available for jobs (the seed's createOciNode); as CreateAwsNode.
func (m *Manager) CreateOciNode(ctx context.Context, n OciNode) (*CloudNode, error) {
	const op = "CreateOciNode"
	if err := m.alive(op); err != nil {
		return nil, err
	}
	res, err := m.client.CreateOciNode(ctx, connect.NewRequest(&managerv1.CreateOciNodeRequest{
		NodeId: n.NodeID, Tags: n.Tags, AvailabilityDomain: n.AvailabilityDomain, Shape: n.Shape, Region: n.Region,
		Pool: n.Pool, Subnet: n.Subnet, WorkerVersion: n.WorkerVersion, FallbackShapes: n.FallbackShapes,
		Ocpus: n.OCPUs, MemoryGbs: n.MemoryGBs,
	}))
	if err != nil {
		return nil, wrapError(op, err)
	}
	return res.Msg, nil
}

// CloudHypervisorNode asks CreateCloudHypervisorNode for a microVM node.
type CloudHypervisorNode struct {
	NodeID string
	// Shape is required; Host "" = the host with the most room for it.
	Shape         string
	Host          string
	Pool          string
	Tags          map[string]string
	WorkerVersion string
}

// CreateCloudHypervisorNode runs a worker as a Cloud Hypervisor microVM on
// one of the Manager's host agents (the seed's createCloudHypervisorNode);
// as CreateAwsNode. ErrResourceExhausted: no host has room for the shape.
func (m *Manager) CreateCloudHypervisorNode(ctx context.Context, n CloudHypervisorNode) (*CloudNode, error) {
	const op = "CreateCloudHypervisorNode"
	if err := m.alive(op); err != nil {
		return nil, err
	}
	res, err := m.client.CreateCloudHypervisorNode(ctx, connect.NewRequest(&managerv1.CreateCloudHypervisorNodeRequest{
		NodeId: n.NodeID, Tags: n.Tags, Host: n.Host, Shape: n.Shape, Pool: n.Pool, WorkerVersion: n.WorkerVersion,
	}))
	if err != nil {
		return nil, wrapError(op, err)
	}
	return res.Msg, nil
}

// InstanceTypeOptions are describeInstanceType's and listInstanceTypes'
// options.
type InstanceTypeOptions struct {
	// Provider is "aws" (the default), "oci" or "cloud-hypervisor".
	Provider string
	// Region is an AWS region / OCI availability domain / Cloud Hypervisor
	// host ("" = any).
	Region string
}

// InstanceTypeFacts is describeInstanceType's answer.
type InstanceTypeFacts struct {
	*InstanceTypeInfo
	// Offered says, when a region was given, whether the type is offered
	// there.
	Offered bool
}

// DescribeInstanceType answers from the Manager's instance-type cache:
// vCPUs (authoritative for capacity), memory and architectures, and with a
// region whether the type is offered there; nil (the seed's undefined)
// when the provider does not know the type. Errors: ErrFailedPrecondition
// (a provider or region the Manager does not run), ErrUnavailable (the
// cache is not warm yet).
func (m *Manager) DescribeInstanceType(ctx context.Context, instanceType string, opts InstanceTypeOptions) (*InstanceTypeFacts, error) {
	const op = "DescribeInstanceType"
	if err := m.alive(op); err != nil {
		return nil, err
	}
	res, err := m.client.DescribeInstanceType(ctx, connect.NewRequest(&managerv1.DescribeInstanceTypeRequest{
		InstanceType: instanceType, Provider: opts.Provider, Region: opts.Region,
	}))
	if err != nil {
		return nil, wrapError(op, err)
	}
	if res.Msg.GetInstanceType() == nil {
		return nil, nil
	}
	return &InstanceTypeFacts{InstanceTypeInfo: res.Msg.GetInstanceType(), Offered: res.Msg.GetOffered()}, nil
}

// ListInstanceTypes lists every instance type a provider offers; known is
// false for a provider that cannot enumerate (aws, oci), with an empty
// list. Protocol 1.10. Errors as DescribeInstanceType.
func (m *Manager) ListInstanceTypes(ctx context.Context, opts InstanceTypeOptions) (types []*InstanceTypeInfo, known bool, err error) {
	const op = "ListInstanceTypes"
	if err := m.alive(op); err != nil {
		return nil, false, err
	}
	res, err := m.client.ListInstanceTypes(ctx, connect.NewRequest(&managerv1.ListInstanceTypesRequest{Provider: opts.Provider, Region: opts.Region}))
	if err != nil {
		return nil, false, wrapError(op, err)
	}
	return res.Msg.GetInstanceTypes(), res.Msg.GetKnown(), nil
}

// ListWorkerSecurityGroups lists the security groups dev-ops marked
// selectable for workers in region (tagged id3as.Norsk.WorkerSecurityGroup
// = <label>), each with its ingress rules, and the region's base worker
// groups (Base: always attached, never selectable). ErrFailedPrecondition
// for a region the Manager does not run.
func (m *Manager) ListWorkerSecurityGroups(ctx context.Context, region string) ([]*WorkerSecurityGroup, error) {
	const op = "ListWorkerSecurityGroups"
	if err := m.alive(op); err != nil {
		return nil, err
	}
	res, err := m.client.ListWorkerSecurityGroups(ctx, connect.NewRequest(&managerv1.ListWorkerSecurityGroupsRequest{Region: region}))
	if err != nil {
		return nil, wrapError(op, err)
	}
	return res.Msg.GetGroups(), nil
}

// ReloadExternalConfig makes the Manager re-read its overrides file (cloud
// regions and worker image version tables) and apply it to the running
// providers, with no restart: the member called, then every other member,
// each reporting what changed. ErrInvalidArgument when the called member's
// file does not parse or validate (the old one stays in force).
func (m *Manager) ReloadExternalConfig(ctx context.Context) (*ReloadExternalConfigResponse, error) {
	const op = "ReloadExternalConfig"
	if err := m.alive(op); err != nil {
		return nil, err
	}
	res, err := m.client.ReloadExternalConfig(ctx, connect.NewRequest(&managerv1.ReloadExternalConfigRequest{}))
	if err != nil {
		return nil, wrapError(op, err)
	}
	return res.Msg, nil
}

// HostAgentToken is AddHostAgent's answer: the host and its one-shot
// registration token.
type HostAgentToken = managerv1.AddHostAgentResponse

// RegisteredHostAgent is a host agent the Manager knows (ListHostAgents).
type RegisteredHostAgent = managerv1.RegisteredHostAgent

// AddHostAgent makes a one-shot registration token for a Cloud Hypervisor
// host agent to come: `norsk-ctl host-agent --registration-token` registers
// with it and is given its host secret. Errors: ErrAlreadyExists,
// ErrInvalidArgument (a name that is not a DNS label).
func (m *Manager) AddHostAgent(ctx context.Context, name string) (*HostAgentToken, error) {
	const op = "AddHostAgent"
	if err := m.alive(op); err != nil {
		return nil, err
	}
	res, err := m.client.AddHostAgent(ctx, connect.NewRequest(&managerv1.AddHostAgentRequest{Name: name}))
	if err != nil {
		return nil, wrapError(op, err)
	}
	return res.Msg, nil
}

// ListHostAgents lists the host agents added at run time, registered or
// not (secrets left out).
func (m *Manager) ListHostAgents(ctx context.Context) ([]*RegisteredHostAgent, error) {
	const op = "ListHostAgents"
	if err := m.alive(op); err != nil {
		return nil, err
	}
	res, err := m.client.ListHostAgents(ctx, connect.NewRequest(&managerv1.ListHostAgentsRequest{}))
	if err != nil {
		return nil, wrapError(op, err)
	}
	return res.Msg.GetHostAgents(), nil
}

// RemoveHostAgent forgets a host agent added at run time. ErrNotFound.
func (m *Manager) RemoveHostAgent(ctx context.Context, name string) error {
	const op = "RemoveHostAgent"
	if err := m.alive(op); err != nil {
		return err
	}
	_, err := m.client.RemoveHostAgent(ctx, connect.NewRequest(&managerv1.RemoveHostAgentRequest{Name: name}))
	return wrapError(op, err)
}
