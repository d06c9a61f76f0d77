package providers

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Tags every provider puts on the instances it launches: the cluster id
// (reconciliation lists by it) and the node id (an instance with no live
// node record is a leak).
const (
	TagCluster = "norsk:cluster"
	TagNode    = "norsk:node"
	// TagName is the instance's display name (EC2's Name tag).
	TagName = "Name"
)

// Instance states, as every provider reports them.
const (
	StatePending     = "pending"
	StateRunning     = "running"
	StateStopping    = "stopping"
	StateStopped     = "stopped"
	StateTerminating = "shutting-down"
	StateTerminated  = "terminated"
)

// Instance is a provider's machine.
type Instance struct {
	// ID is the provider's id of the machine (EC2 i-…, OCI ocid1.instance…,
	// a mock host's URL).
	ID string
	// NodeID and ClusterID are the instance's norsk:node and norsk:cluster
	// tags ("" when it has none).
	NodeID    string
	ClusterID string
	Region    string
	Zone      string
	Type      string
	Image     string
	// State is one of the State* constants; StateReason the cloud's words.
	State       string
	StateReason string
	PrivateIP   string
	PublicIP    string
	PrivateDNS  string
	LaunchedAt  time.Time
	Tags        map[string]string
}

// Gone reports whether the instance has ended or is ending.
func (i Instance) Gone() bool {
	return i.State == StateTerminated || i.State == StateTerminating
}

// Ref names one instance of a provider.
type Ref struct {
	ID     string
	Region string
	// NodeID is the node the instance was launched for.
	NodeID string
}

// LaunchSpec is one launch of a node's instance.
type LaunchSpec struct {
	NodeID    string
	ClusterID string
	// ClientToken makes the launch idempotent: a second Launch with the same
	// token returns the instance of the first (or launches it, if the first
	// never reached the provider) and never makes a second.
	ClientToken  string
	Region       string
	Zone         string
	InstanceType string
	Image        string
	Subnet       string
	// SecurityGroups are group ids (aws).
	SecurityGroups []string
	// Tags go on the instance (with TagCluster, TagNode and TagName, which
	// the provider sets).
	Tags map[string]string
	// UserData is what the instance's worker boots from (see UserData).
	UserData []byte
	// OCPUs and MemoryGBs size a flexible shape (oci; 0 = the shape's
	// defaults).
	OCPUs     float32
	MemoryGBs float32
	// Reserved is the machine a Reserver chose for the node ("" for a
	// cloud).
	Reserved string
}

// Provider creates and ends the machines of elastic nodes. Every method may
// be called concurrently; each call is bounded by its context. Errors that
// callers act on wrap ErrCapacity, ErrThrottled, ErrNotFound or ErrInvalid.
type Provider interface {
	// Name is the provider's name on its nodes (Node.provider).
	Name() string
	// Launch starts the instance for spec, idempotently in
	// spec.ClientToken, and returns it (usually pending).
	Launch(ctx context.Context, spec LaunchSpec) (Instance, error)
	// Terminate ends an instance; one already gone is not an error.
	Terminate(ctx context.Context, ref Ref) error
	// List returns the instances tagged with clusterID in every region the
	// provider runs (terminated ones may be included, as the cloud still
	// reports them). An error means the answer is incomplete: the caller
	// must not conclude that an instance is gone from it.
	List(ctx context.Context, clusterID string) ([]Instance, error)
	// SetTags merges tags onto an instance.
	SetTags(ctx context.Context, ref Ref, tags map[string]string) error
}

// Catalog is implemented by providers that know their instance types and
// regions (aws, oci): the instance-type cache reads it.
type Catalog interface {
	// Regions are the regions the provider runs now (the overrides file's).
	Regions() []string
	// InstanceTypes lists the types offered in region, each with the
	// locations that offer it (InstanceType.Regions), and every location of
	// the region: for aws the region itself; for oci the region's
	// availability domains, each with its shapes.
	InstanceTypes(ctx context.Context, region string) (types []InstanceType, locations []string, err error)
}

// InstanceType is a machine type's facts.
type InstanceType struct {
	Name          string
	VCPUs         uint32
	MemoryBytes   uint64
	Architectures []string
	GPUs          uint32
	// Regions are where it is offered (AWS regions; OCI availability
	// domains).
	Regions []string
}

// SecurityGroup is a worker security group (aws).
type SecurityGroup struct {
	ID          string
	Name        string
	Label       string
	Description string
	VPC         string
	Base        bool
	Ingress     []IngressRule
}

// IngressRule is one ingress rule of a security group.
type IngressRule struct {
	Protocol     string
	FromPort     int32
	ToPort       int32
	CIDRs        []string
	SourceGroups []string
	Description  string
}

// SecurityGroups is implemented by providers with worker security groups
// (aws).
type SecurityGroups interface {
	// WorkerSecurityGroups lists the region's groups tagged
	// TagWorkerSecurityGroup and its base worker groups (Base).
	WorkerSecurityGroups(ctx context.Context, region string) ([]SecurityGroup, error)
}

// TagWorkerSecurityGroup marks a security group selectable for workers; its
// value is the group's label.
const TagWorkerSecurityGroup = "id3as.Norsk.WorkerSecurityGroup"

// Reloadable is implemented by providers that take the overrides file: the
// Registry hands each a new one (already validated) on reload.
type Reloadable interface {
	ApplyOverrides(o *Overrides) error
}

// Errors providers wrap.
var (
	// ErrCapacity: the cloud has no capacity for the type in the zone
	// (EC2 InsufficientInstanceCapacity, OCI "Out of host capacity"); the
	// next instance type or zone may have some.
	ErrCapacity = errors.New("insufficient capacity")
	// ErrThrottled: the cloud's request limit (EC2 RequestLimitExceeded,
	// OCI 429) was hit after the SDK's own retries.
	ErrThrottled = errors.New("request limit exceeded")
	// ErrNotFound: the instance (or region, or image) does not exist.
	ErrNotFound = errors.New("not found")
	// ErrInvalid: the cloud refused the request's parameters.
	ErrInvalid = errors.New("invalid request")
	// ErrNoRegion: the provider does not run the region.
	ErrNoRegion = errors.New("region not run")
)

// CloudError is an error a cloud answered: its code and message, wrapping
// the kind (ErrCapacity, …) callers act on.
type CloudError struct {
	Kind    error
	Code    string
	Message string
	// Err is the SDK's error.
	Err error
}

func (e *CloudError) Error() string {
	if e.Code == "" {
		return e.Message
	}
	return fmt.Sprintf("%s: %s", e.Code, e.Message)
}

// Unwrap lets errors.Is see both the kind and the SDK's error.
func (e *CloudError) Unwrap() []error {
	out := []error{}
	if e.Kind != nil {
		out = append(out, e.Kind)
	}
	if e.Err != nil {
		out = append(out, e.Err)
	}
	return out
}
