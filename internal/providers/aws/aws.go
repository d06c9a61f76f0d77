// Package aws is the aws provider: elastic nodes on EC2 instances, through
// the AWS SDK for Go v2 (service/ec2).
//
// Credentials and endpoints come the way the SDK's users expect: the
// default chain (environment, shared config and credentials files, the
// instance's role), a profile per region when config.yaml names one, and
// the SDK's endpoint settings (AWS_ENDPOINT_URL_EC2, or endpoint_url in the
// profile). The provider has no other way to be pointed anywhere, so a
// test or development endpoint (internal/cloudsim/ec2) is reached exactly
// as EC2 is.
//
// The regions it runs are the overrides file's (ApplyOverrides); each gets
// its own EC2 client. Every instance is launched with the cluster and node
// tags, the node's user data and a ClientToken derived from the node, so a
// launch repeated by a new primary returns the first launch's instance.
// Throttling (RequestLimitExceeded) is retried by the SDK's retryer with
// jittered exponential backoff; errors are mapped to the providers kinds
// (InsufficientInstanceCapacity → ErrCapacity, …).
package aws

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/smithy-go"

	"github.com/norsk-go/norsk-manager/internal/providers"
	"github.com/norsk-go/norsk-manager/internal/providers/cloudconf"
)

// Name is the provider's name on its nodes.
const Name = cloudconf.AWSName

// Config is the provider's configuration (config.yaml providers.aws).
type (
	Config       = cloudconf.AWS
	RegionConfig = cloudconf.AWSRegion
	PoolConfig   = cloudconf.AWSPool
)

func init() {
	providers.RegisterCloud(Name, func(cfg any, log *slog.Logger) (providers.Provider, error) {
		c, ok := cfg.(*Config)
		if !ok || c == nil {
			return nil, fmt.Errorf("aws: configuration %T", cfg)
		}
		return New(*c, log)
	})
}

// Provider is the aws provider. It is safe for concurrent use.
type Provider struct {
	cfg Config
	log *slog.Logger

	mu      sync.RWMutex
	regions []string
	clients map[string]*ec2.Client
}

// New makes the provider; it runs no region until ApplyOverrides.
func New(cfg Config, log *slog.Logger) (*Provider, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.RetryMaxAttempts == 0 {
		cfg.RetryMaxAttempts = 8
	}
	if cfg.RetryBaseDelay.Duration <= 0 {
		cfg.RetryBaseDelay.Duration = 500 * time.Millisecond
	}
	if cfg.RetryMaxBackoff.Duration <= 0 {
		cfg.RetryMaxBackoff.Duration = 20 * time.Second
	}
	if log == nil {
		log = slog.Default()
	}
	return &Provider{cfg: cfg, log: log.With("provider", Name), clients: map[string]*ec2.Client{}}, nil
}

var (
	_ providers.Provider       = (*Provider)(nil)
	_ providers.Catalog        = (*Provider)(nil)
	_ providers.SecurityGroups = (*Provider)(nil)
	_ providers.Reloadable     = (*Provider)(nil)
	_ providers.Tracker        = (*Provider)(nil)
)

// Name is "aws".
func (p *Provider) Name() string { return Name }

// Config is the provider's configuration.
func (p *Provider) Config() Config { return p.cfg }

// TracksInstances: EC2's listing is the truth about the instances.
func (p *Provider) TracksInstances() bool { return true }

// ApplyOverrides runs the regions the overrides file names, building a
// client for each new one.
func (p *Provider) ApplyOverrides(o *providers.Overrides) error {
	regions := o.Regions(Name)
	clients := map[string]*ec2.Client{}
	for _, r := range regions {
		c, err := p.client(r)
		if err != nil {
			return err
		}
		clients[r] = c
	}
	p.mu.Lock()
	p.regions = regions
	for r, c := range clients {
		p.clients[r] = c
	}
	p.mu.Unlock()
	return nil
}

// Regions are the regions the provider runs.
func (p *Provider) Regions() []string {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return append([]string(nil), p.regions...)
}

// client is region's EC2 client, built on first use (a region no longer
// run keeps its client, for ending its instances).
func (p *Provider) client(region string) (*ec2.Client, error) {
	p.mu.RLock()
	c, ok := p.clients[region]
	p.mu.RUnlock()
	if ok {
		return c, nil
	}
	profile := p.cfg.Profile
	if rc, ok := p.cfg.Regions[region]; ok && rc.Profile != "" {
		profile = rc.Profile
	}
	opts := []func(*config.LoadOptions) error{
		config.WithRegion(region),
		config.WithRetryer(func() awssdk.Retryer {
			return retry.NewStandard(func(o *retry.StandardOptions) {
				o.MaxAttempts = p.cfg.RetryMaxAttempts
				o.MaxBackoff = p.cfg.RetryMaxBackoff.Duration
				o.Backoff = fullJitter{base: p.cfg.RetryBaseDelay.Duration, max: p.cfg.RetryMaxBackoff.Duration}
				// Throttled retries must not run the retry quota dry.
				o.RateLimiter = ratelimit.None
				// A capacity refusal (HTTP 500) is not retried: the next
				// instance type or zone is tried instead.
				o.Retryables = append([]retry.IsErrorRetryable{retry.IsErrorRetryableFunc(func(err error) awssdk.Ternary {
					var ae smithy.APIError
					if errors.As(err, &ae) && slices.Contains(capacityCodes, ae.ErrorCode()) {
						return awssdk.FalseTernary
					}
					return awssdk.UnknownTernary
				})}, o.Retryables...)
			})
		}),
	}
	if profile != "" {
		opts = append(opts, config.WithSharedConfigProfile(profile))
	}
	if len(p.cfg.SharedConfigFiles) > 0 {
		opts = append(opts, config.WithSharedConfigFiles(p.cfg.SharedConfigFiles))
	}
	if len(p.cfg.SharedCredentialsFiles) > 0 {
		opts = append(opts, config.WithSharedCredentialsFiles(p.cfg.SharedCredentialsFiles))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ac, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("aws %s: load the SDK configuration: %w", region, err)
	}
	c = ec2.NewFromConfig(ac)
	p.mu.Lock()
	if existing, ok := p.clients[region]; ok {
		c = existing
	} else {
		p.clients[region] = c
	}
	p.mu.Unlock()
	return c, nil
}

// fullJitter is the retryer's backoff: uniform in [0, min(max, base·2ⁿ)].
type fullJitter struct{ base, max time.Duration }

func (j fullJitter) BackoffDelay(attempt int, _ error) (time.Duration, error) {
	ceil := j.base << min(max(attempt-1, 0), 30)
	if ceil <= 0 || ceil > j.max {
		ceil = j.max
	}
	return time.Duration(rand.Int64N(int64(ceil) + 1)), nil
}

// Launch runs the node's instance (RunInstances with spec.ClientToken).
func (p *Provider) Launch(ctx context.Context, spec providers.LaunchSpec) (providers.Instance, error) {
	c, err := p.client(spec.Region)
	if err != nil {
		return providers.Instance{}, err
	}
	rc := p.cfg.Regions[spec.Region]
	subnet := spec.Subnet
	if subnet == "" {
		subnet = rc.Subnet
	}
	in := &ec2.RunInstancesInput{
		ImageId:      awssdk.String(spec.Image),
		InstanceType: types.InstanceType(spec.InstanceType),
		MinCount:     awssdk.Int32(1),
		MaxCount:     awssdk.Int32(1),
		ClientToken:  awssdk.String(spec.ClientToken),
		UserData:     awssdk.String(base64.StdEncoding.EncodeToString(spec.UserData)),
		TagSpecifications: []types.TagSpecification{{
			ResourceType: types.ResourceTypeInstance,
			Tags:         ec2Tags(instanceTags(spec)),
		}},
		MetadataOptions: &types.InstanceMetadataOptionsRequest{HttpTokens: types.HttpTokensStateRequired},
	}
	if subnet != "" {
		in.SubnetId = awssdk.String(subnet)
	}
	if len(spec.SecurityGroups) > 0 {
		in.SecurityGroupIds = spec.SecurityGroups
	}
	if spec.Zone != "" {
		in.Placement = &types.Placement{AvailabilityZone: awssdk.String(spec.Zone)}
	}
	if rc.KeyName != "" {
		in.KeyName = awssdk.String(rc.KeyName)
	}
	if rc.IAMInstanceProfile != "" {
		in.IamInstanceProfile = &types.IamInstanceProfileSpecification{Name: awssdk.String(rc.IAMInstanceProfile)}
	}
	out, err := c.RunInstances(ctx, in)
	if err != nil {
		return providers.Instance{}, mapError("RunInstances", err)
	}
	if len(out.Instances) != 1 {
		return providers.Instance{}, fmt.Errorf("aws RunInstances: %d instances in the answer, want 1", len(out.Instances))
	}
	return instanceOf(spec.Region, out.Instances[0]), nil
}

// instanceTags are the tags every instance carries.
func instanceTags(spec providers.LaunchSpec) map[string]string {
	tags := map[string]string{}
	for k, v := range spec.Tags {
		tags[k] = v
	}
	tags[providers.TagCluster] = spec.ClusterID
	tags[providers.TagNode] = spec.NodeID
	tags[providers.TagName] = "norsk-" + spec.NodeID
	return tags
}

func ec2Tags(m map[string]string) []types.Tag {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([]types.Tag, 0, len(keys))
	for _, k := range keys {
		out = append(out, types.Tag{Key: awssdk.String(k), Value: awssdk.String(m[k])})
	}
	return out
}

func instanceOf(region string, i types.Instance) providers.Instance {
	out := providers.Instance{
		ID:         awssdk.ToString(i.InstanceId),
		Region:     region,
		Type:       string(i.InstanceType),
		Image:      awssdk.ToString(i.ImageId),
		PrivateIP:  awssdk.ToString(i.PrivateIpAddress),
		PublicIP:   awssdk.ToString(i.PublicIpAddress),
		PrivateDNS: awssdk.ToString(i.PrivateDnsName),
		LaunchedAt: awssdk.ToTime(i.LaunchTime),
		Tags:       map[string]string{},
	}
	if i.Placement != nil {
		out.Zone = awssdk.ToString(i.Placement.AvailabilityZone)
	}
	if i.State != nil {
		out.State = string(i.State.Name)
	}
	if i.StateReason != nil {
		out.StateReason = awssdk.ToString(i.StateReason.Message)
	}
	for _, t := range i.Tags {
		out.Tags[awssdk.ToString(t.Key)] = awssdk.ToString(t.Value)
	}
	out.NodeID, out.ClusterID = out.Tags[providers.TagNode], out.Tags[providers.TagCluster]
	return out
}

// Terminate ends an instance (TerminateInstances); one EC2 does not know
// is gone already.
func (p *Provider) Terminate(ctx context.Context, ref providers.Ref) error {
	c, err := p.client(ref.Region)
	if err != nil {
		return err
	}
	_, err = c.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: []string{ref.ID}})
	if err != nil {
		err = mapError("TerminateInstances", err)
		if errors.Is(err, providers.ErrNotFound) {
			return nil
		}
	}
	return err
}

// List is every instance tagged with the cluster, in every region run.
func (p *Provider) List(ctx context.Context, clusterID string) ([]providers.Instance, error) {
	var out []providers.Instance
	for _, region := range p.Regions() {
		c, err := p.client(region)
		if err != nil {
			return nil, err
		}
		pg := ec2.NewDescribeInstancesPaginator(c, &ec2.DescribeInstancesInput{
			Filters: []types.Filter{{Name: awssdk.String("tag:" + providers.TagCluster), Values: []string{clusterID}}},
		})
		for pg.HasMorePages() {
			page, err := pg.NextPage(ctx)
			if err != nil {
				return nil, mapError("DescribeInstances", err)
			}
			for _, r := range page.Reservations {
				for _, i := range r.Instances {
					out = append(out, instanceOf(region, i))
				}
			}
		}
	}
	return out, nil
}

// SetTags merges tags onto the instance (CreateTags).
func (p *Provider) SetTags(ctx context.Context, ref providers.Ref, tags map[string]string) error {
	if len(tags) == 0 {
		return nil
	}
	c, err := p.client(ref.Region)
	if err != nil {
		return err
	}
	if _, err := c.CreateTags(ctx, &ec2.CreateTagsInput{Resources: []string{ref.ID}, Tags: ec2Tags(tags)}); err != nil {
		return mapError("CreateTags", err)
	}
	return nil
}

// InstanceTypes lists the region's instance types with whether each is
// offered there (DescribeInstanceTypeOfferings, DescribeInstanceTypes).
func (p *Provider) InstanceTypes(ctx context.Context, region string) ([]providers.InstanceType, []string, error) {
	c, err := p.client(region)
	if err != nil {
		return nil, nil, err
	}
	offered := map[string]bool{}
	op := ec2.NewDescribeInstanceTypeOfferingsPaginator(c, &ec2.DescribeInstanceTypeOfferingsInput{LocationType: types.LocationTypeRegion,
		Filters: []types.Filter{{Name: awssdk.String("location"), Values: []string{region}}}})
	for op.HasMorePages() {
		page, err := op.NextPage(ctx)
		if err != nil {
			return nil, nil, mapError("DescribeInstanceTypeOfferings", err)
		}
		for _, o := range page.InstanceTypeOfferings {
			offered[string(o.InstanceType)] = true
		}
	}
	var out []providers.InstanceType
	tp := ec2.NewDescribeInstanceTypesPaginator(c, &ec2.DescribeInstanceTypesInput{})
	for tp.HasMorePages() {
		page, err := tp.NextPage(ctx)
		if err != nil {
			return nil, nil, mapError("DescribeInstanceTypes", err)
		}
		for _, t := range page.InstanceTypes {
			it := providers.InstanceType{Name: string(t.InstanceType)}
			if t.VCpuInfo != nil {
				it.VCPUs = uint32(awssdk.ToInt32(t.VCpuInfo.DefaultVCpus))
			}
			if t.MemoryInfo != nil {
				it.MemoryBytes = uint64(awssdk.ToInt64(t.MemoryInfo.SizeInMiB)) << 20
			}
			if t.ProcessorInfo != nil {
				for _, a := range t.ProcessorInfo.SupportedArchitectures {
					it.Architectures = append(it.Architectures, string(a))
				}
			}
			if t.GpuInfo != nil {
				for _, g := range t.GpuInfo.Gpus {
					it.GPUs += uint32(awssdk.ToInt32(g.Count))
				}
			}
			if offered[it.Name] {
				it.Regions = []string{region}
			}
			out = append(out, it)
		}
	}
	return out, []string{region}, nil
}

// WorkerSecurityGroups lists the region's selectable worker groups (tagged
// providers.TagWorkerSecurityGroup) and its base groups.
func (p *Provider) WorkerSecurityGroups(ctx context.Context, region string) ([]providers.SecurityGroup, error) {
	c, err := p.client(region)
	if err != nil {
		return nil, err
	}
	var out []providers.SecurityGroup
	base := p.cfg.Regions[region].BaseSecurityGroups
	seen := map[string]bool{}
	if len(base) > 0 {
		res, err := c.DescribeSecurityGroups(ctx, &ec2.DescribeSecurityGroupsInput{GroupIds: base})
		if err != nil {
			return nil, mapError("DescribeSecurityGroups", err)
		}
		for _, g := range res.SecurityGroups {
			sg := groupOf(g)
			sg.Base, sg.Label = true, ""
			seen[sg.ID] = true
			out = append(out, sg)
		}
	}
	pg := ec2.NewDescribeSecurityGroupsPaginator(c, &ec2.DescribeSecurityGroupsInput{
		Filters: []types.Filter{{Name: awssdk.String("tag-key"), Values: []string{providers.TagWorkerSecurityGroup}}},
	})
	for pg.HasMorePages() {
		page, err := pg.NextPage(ctx)
		if err != nil {
			return nil, mapError("DescribeSecurityGroups", err)
		}
		for _, g := range page.SecurityGroups {
			sg := groupOf(g)
			if seen[sg.ID] || sg.Label == "" {
				continue
			}
			out = append(out, sg)
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Base != out[j].Base {
			return out[i].Base
		}
		if out[i].Label != out[j].Label {
			return out[i].Label < out[j].Label
		}
		return out[i].ID < out[j].ID
	})
	return out, nil
}

func groupOf(g types.SecurityGroup) providers.SecurityGroup {
	sg := providers.SecurityGroup{ID: awssdk.ToString(g.GroupId), Name: awssdk.ToString(g.GroupName),
		Description: awssdk.ToString(g.Description), VPC: awssdk.ToString(g.VpcId)}
	for _, t := range g.Tags {
		if awssdk.ToString(t.Key) == providers.TagWorkerSecurityGroup {
			sg.Label = awssdk.ToString(t.Value)
		}
	}
	for _, perm := range g.IpPermissions {
		r := providers.IngressRule{Protocol: awssdk.ToString(perm.IpProtocol), FromPort: awssdk.ToInt32(perm.FromPort), ToPort: awssdk.ToInt32(perm.ToPort)}
		for _, ip := range perm.IpRanges {
			r.CIDRs = append(r.CIDRs, awssdk.ToString(ip.CidrIp))
			if d := awssdk.ToString(ip.Description); d != "" && r.Description == "" {
				r.Description = d
			}
		}
		for _, ug := range perm.UserIdGroupPairs {
			r.SourceGroups = append(r.SourceGroups, awssdk.ToString(ug.GroupId))
		}
		sg.Ingress = append(sg.Ingress, r)
	}
	return sg
}

// Error codes by the providers kind they map to.
var (
	capacityCodes = []string{"InsufficientInstanceCapacity", "InsufficientHostCapacity", "InsufficientCapacity", "InsufficientReservedInstanceCapacity"}
	throttleCodes = []string{"RequestLimitExceeded", "Throttling", "ThrottlingException"}
	notFoundCodes = []string{"InvalidInstanceID.NotFound", "InvalidInstanceID.Malformed"}
)

// mapError turns an SDK error into a providers.CloudError of the right
// kind (other errors are returned wrapped).
func mapError(op string, err error) error {
	var ae smithy.APIError
	if !errors.As(err, &ae) {
		return fmt.Errorf("aws %s: %w", op, err)
	}
	ce := &providers.CloudError{Code: ae.ErrorCode(), Message: ae.ErrorMessage(), Err: err}
	switch code := ae.ErrorCode(); {
	case slices.Contains(capacityCodes, code):
		ce.Kind = providers.ErrCapacity
	case slices.Contains(throttleCodes, code):
		ce.Kind = providers.ErrThrottled
	case slices.Contains(notFoundCodes, code):
		ce.Kind = providers.ErrNotFound
	case strings.HasPrefix(code, "Invalid"), strings.HasPrefix(code, "Unsupported"), code == "IdempotentParameterMismatch",
		code == "UnauthorizedOperation", code == "AuthFailure", code == "MissingParameter":
		ce.Kind = providers.ErrInvalid
	}
	return ce
}
