package providers

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/internal/clock"
	"github.com/norsk-go/norsk-manager/pkg/apierr"
	"github.com/norsk-go/norsk-manager/pkg/jobspec"
)

// Defaults of FleetConfig.
const (
	DefaultStartTimeout      = 10 * time.Minute
	DefaultReconcileInterval = time.Minute
	DefaultReaperInterval    = 5 * time.Second
	// DefaultListGrace is how long after its launch a node's instance may
	// be missing from its provider's list (clouds list eventually
	// consistently) before the node is marked terminated for it.
	DefaultListGrace = 2 * time.Minute
	// MaxIdleExpiry is the longest idle expiry a node may have
	// (SetNodeIdleExpiry refuses more; the reaper clamps a longer one
	// stored before that bound existed).
	MaxIdleExpiry = jobspec.MaxIdleExpiry
)

// Backend is what the fleet needs of the Manager. Its methods may be
// called concurrently.
type Backend interface {
	// Nodes returns every node now, as one consistent read.
	Nodes() []NodeView
	// Apply proposes cmd through the Manager's one write path (forwarded to
	// the primary when this member is not it) and returns its raft index.
	// The audit log names the API caller in ctx, or the actor WithActor
	// put there.
	Apply(ctx context.Context, cmd *storev1.Command) (uint64, error)
	// Registration is what a new worker registers with: every member's API
	// URL and the CA pin ("" without TLS).
	Registration() (managerURLs []string, caPin string)
	// NewRegistrationToken makes a one-shot registration token.
	NewRegistrationToken() string
	// ClusterID is the store's cluster id ("" before the store has one):
	// the id instances are tagged with when FleetConfig.ClusterID is not
	// set.
	ClusterID() string
}

// NodeView is one node as the fleet reads it.
type NodeView struct {
	Node *managerv1.Node
	// Token is the node's one-shot registration token (a resumed launch
	// rebuilds the user data from it).
	Token string
	// Busy: the node holds an instance that has not stopped.
	Busy bool
}

type actorKey struct{}

// Actor is who the audit log names for a write the daemon makes on its
// own.
type Actor struct{ Who, Method string }

// WithActor marks writes made with ctx as the daemon's own, by who.
func WithActor(ctx context.Context, who, method string) context.Context {
	return context.WithValue(ctx, actorKey{}, Actor{Who: who, Method: method})
}

// ActorOf is the actor WithActor put in ctx.
func ActorOf(ctx context.Context) (Actor, bool) {
	a, ok := ctx.Value(actorKey{}).(Actor)
	return a, ok
}

// FleetConfig configures a Fleet.
type FleetConfig struct {
	Registry *Registry
	Backend  Backend
	// ClusterID tags every instance (TagCluster); reconciliation only ever
	// touches instances carrying it. Required with a cloud provider.
	ClusterID string
	// WorkerVersion is the worker version a create boots when it names
	// none (the Manager's own).
	WorkerVersion string
	// StartTimeout is how long a cloud node may take to come online before
	// it is terminated (default 10 min; the mock provider has its own).
	StartTimeout time.Duration
	// DefaultIdleExpiry is the daemon-wide idle expiry of empty elastic
	// nodes (a node's own override wins).
	DefaultIdleExpiry time.Duration
	// ReaperInterval is how often the reaper runs and terminated nodes'
	// instances are ended (default 5 s).
	ReaperInterval time.Duration
	// ReconcileInterval is how often each provider's instances are listed
	// and reconciled with the node records (default 1 min; also at the
	// start of every primary term).
	ReconcileInterval time.Duration
	// ListGrace: see DefaultListGrace.
	ListGrace time.Duration
	// Throttle bounds the fleet's own retries of a throttled call, beyond
	// the SDK's (zero: 5 attempts from 1 s, at most 20 s apart, jittered).
	Throttle Backoff
	Metrics  *Metrics
	Clock    clock.Clock
	Logger   *slog.Logger
}

// Fleet is the provider side of the Manager: node creation, and — during a
// primary term (Run) — the empty-node reaper, start timeouts, the ending
// of terminated nodes' instances and reconciliation. It is safe for
// concurrent use.
type Fleet struct {
	cfg FleetConfig
	log *slog.Logger
	reg *Registry

	mu sync.Mutex
	// inflight are the nodes whose launch runs in this process.
	inflight map[string]bool
	// mockMu serialises the choice of a mock host.
	reserveMu sync.Mutex
}

// NewFleet makes a fleet. It does nothing until Create is called or Run
// starts a primary term.
func NewFleet(cfg FleetConfig) *Fleet {
	if cfg.StartTimeout <= 0 {
		cfg.StartTimeout = DefaultStartTimeout
	}
	if cfg.ReaperInterval <= 0 {
		cfg.ReaperInterval = DefaultReaperInterval
	}
	if cfg.ReconcileInterval <= 0 {
		cfg.ReconcileInterval = DefaultReconcileInterval
	}
	if cfg.ListGrace <= 0 {
		cfg.ListGrace = DefaultListGrace
	}
	if cfg.DefaultIdleExpiry <= 0 {
		cfg.DefaultIdleExpiry = 10 * time.Minute
	}
	cfg.Throttle = cfg.Throttle.withDefaults()
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Metrics == nil {
		cfg.Metrics = NewMetrics(nil)
	}
	return &Fleet{cfg: cfg, log: cfg.Logger.With("component", "fleet"), reg: cfg.Registry, inflight: map[string]bool{}}
}

// clusterID is the id every instance is tagged with: the configured one
// (providers.clusterId), else the store's own cluster id.
func (f *Fleet) clusterID() string {
	if f.cfg.ClusterID != "" {
		return f.cfg.ClusterID
	}
	return f.cfg.Backend.ClusterID()
}

// Registry is the fleet's providers.
func (f *Fleet) Registry() *Registry { return f.reg }

// ClientToken is the launch idempotency token of a node's attempt-th
// launch: the same for every primary that repeats it, different for a
// fallback (a cloud refuses one token with other parameters).
func ClientToken(clusterID, nodeID string, attempt uint32) string {
	sum := sha256.Sum256([]byte(fmt.Sprintf("%s\x00%s\x00%d", clusterID, nodeID, attempt)))
	return "norsk-" + hex.EncodeToString(sum[:20])
}

// CloudRequest asks for a cloud node (CreateAwsNode, CreateOciNode).
type CloudRequest struct {
	Provider string
	NodeID   string
	Pool     string
	Tags     map[string]string
	// Region is the AWS region (OCI: "" = the availability domain's).
	Region string
	// Zone is the availability zone / OCI availability domain.
	Zone         string
	InstanceType string
	Fallbacks    []string
	Subnet       string
	// SecurityGroupLabels select worker security groups (aws).
	SecurityGroupLabels []string
	WorkerVersion       string
	OCPUs, MemoryGBs    float32
}

// Created is a created node.
type Created struct {
	NodeID   string
	Instance Instance
	Cloud    *managerv1.CloudInstance
	// Attempts are the instance types refused for capacity before.
	Attempts []string
}

// field names of CloudRequest in errors (the API's).
func (r CloudRequest) typeField() string {
	if r.Provider == "oci" {
		return "shape"
	}
	return "instanceType"
}

func (r CloudRequest) zoneField() string {
	if r.Provider == "oci" {
		return "availabilityDomain"
	}
	return "availabilityZone"
}

// CheckCloud validates a cloud request against the providers, the
// overrides file and the instance-type cache, and resolves it (region,
// image, security groups, node id): what a create would launch. It
// changes nothing. Errors are apierr errors: FAILED_PRECONDITION (no such
// provider, a region not run, no image for the version), INVALID_ARGUMENT
// (a bad field, a type not offered, an unknown label), UNAVAILABLE (the
// cache is cold).
func (f *Fleet) CheckCloud(ctx context.Context, req CloudRequest) (CloudRequest, *managerv1.CloudInstance, error) {
	p, ok := f.reg.Provider(req.Provider)
	if !ok {
		return req, nil, apierr.FailedPreconditionf("this Manager runs no %s provider (configure providers.%s in config.yaml)", req.Provider, req.Provider)
	}
	if _, ok := p.(Catalog); !ok {
		return req, nil, apierr.FailedPreconditionf("provider %s does not create cloud nodes", req.Provider)
	}
	if f.clusterID() == "" {
		return req, nil, apierr.Unavailablef("the store has no cluster id yet: cloud instances could not be told apart from another cluster's")
	}
	if req.NodeID == "" {
		req.NodeID = req.Provider + "-" + randomSuffix(6)
	} else if err := jobspec.ValidateID("nodeId", req.NodeID); err != nil {
		return req, nil, err
	}
	if err := jobspec.ValidateTags("tags", req.Tags); err != nil {
		return req, nil, err
	}
	if _, spare := req.Tags["spare"]; spare && !IsSpareReconciler(ctx) {
		return req, nil, apierr.Invalid("tags", "the %q tag of an elastic node belongs to the AutoManager's reconciler", "spare")
	}
	for k := range req.Tags {
		if k == TagCluster || k == TagNode || strings.HasPrefix(strings.ToLower(k), "aws:") {
			return req, nil, apierr.Invalid("tags", "%q is the Manager's own tag (or the cloud's)", k)
		}
	}
	if req.InstanceType == "" {
		return req, nil, apierr.Invalid(req.typeField(), "is required")
	}
	types := f.reg.Types()
	switch {
	case req.Region == "" && req.Zone == "":
		return req, nil, apierr.Invalid("region", "is required")
	case req.Region == "":
		region, err := types.RegionOf(req.Provider, req.Zone)
		if err != nil {
			return req, nil, cacheErr(err, req.zoneField())
		}
		req.Region = region
	}
	o := f.reg.Overrides()
	if !o.RunsRegion(req.Provider, req.Region) {
		return req, nil, apierr.FailedPreconditionf("this Manager runs no %s region %q (the overrides file names %s)", req.Provider, req.Region, orNone(o.Regions(req.Provider)))
	}
	if req.Zone != "" {
		locs, err := types.Locations(req.Provider, req.Region)
		if err != nil {
			return req, nil, cacheErr(err, "region")
		}
		if req.Provider == "oci" && !slices.Contains(locs, req.Zone) {
			return req, nil, apierr.Invalid(req.zoneField(), "%q is not an availability domain of %s (it has %s)", req.Zone, req.Region, orNone(locs))
		}
	}
	// The type and the fallbacks must be offered where the node goes.
	where := req.Region
	if req.Provider == "oci" && req.Zone != "" {
		where = req.Zone
	}
	var hw InstanceType
	for i, t := range append([]string{req.InstanceType}, req.Fallbacks...) {
		field := req.typeField()
		if i > 0 {
			field = fmt.Sprintf("fallback%ss[%d]", strings.ToUpper(field[:1])+field[1:], i-1)
		}
		at := where
		if typ, zone, ok := strings.Cut(t, "@"); ok && i > 0 {
			// A fallback in another zone ("type@zone").
			t = typ
			if req.Provider == "oci" {
				at = zone
			}
		}
		it, found, offered, err := types.Describe(req.Provider, t, at)
		if err != nil {
			return req, nil, cacheErr(err, "region")
		}
		switch {
		case !found:
			return req, nil, apierr.Invalid(field, "%s does not know %q", req.Provider, t)
		case !offered:
			return req, nil, apierr.Invalid(field, "%s is not offered in %s (offered in %s)", t, at, orNone(it.Regions))
		}
		if i == 0 {
			hw = it
		}
	}
	version := req.WorkerVersion
	if version == "" {
		version = f.cfg.WorkerVersion
	}
	image, err := o.Image(req.Provider, req.Region, version)
	if err != nil {
		return req, nil, apierr.FailedPreconditionf("%v", err)
	}
	var groups []string
	if len(req.SecurityGroupLabels) > 0 || req.Provider == "aws" {
		sgp, ok := p.(SecurityGroups)
		if !ok {
			if len(req.SecurityGroupLabels) > 0 {
				return req, nil, apierr.Invalid("securityGroupLabels", "provider %s has no worker security groups", req.Provider)
			}
		} else {
			cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			var all []SecurityGroup
			err := f.cfg.Throttle.retry(cctx, f.cfg.Clock, func() error {
				var err error
				all, err = sgp.WorkerSecurityGroups(cctx, req.Region)
				return err
			})
			cancel()
			if err != nil {
				return req, nil, apierr.Unavailablef("list the worker security groups of %s: %v", req.Region, err)
			}
			if groups, err = chooseGroups(all, req.SecurityGroupLabels); err != nil {
				return req, nil, err
			}
		}
	}
	arch := ""
	if len(hw.Architectures) > 0 {
		arch = hw.Architectures[0]
	}
	ci := &managerv1.CloudInstance{
		Region: req.Region, Zone: req.Zone, InstanceType: req.InstanceType, Image: image, Subnet: req.Subnet,
		SecurityGroups: groups, ClientToken: ClientToken(f.clusterID(), req.NodeID, 0),
		FallbackInstanceTypes: append([]string(nil), req.Fallbacks...), Architecture: arch,
		Ocpus: req.OCPUs, MemoryGbs: req.MemoryGBs,
	}
	return req, ci, nil
}

// chooseGroups is the base groups and the labelled groups asked for.
func chooseGroups(all []SecurityGroup, labels []string) ([]string, error) {
	var out []string
	byLabel := map[string][]string{}
	var have []string
	for _, g := range all {
		if g.Base {
			out = append(out, g.ID)
			continue
		}
		if _, seen := byLabel[g.Label]; !seen {
			have = append(have, g.Label)
		}
		byLabel[g.Label] = append(byLabel[g.Label], g.ID)
	}
	for i, l := range labels {
		ids, ok := byLabel[l]
		if !ok {
			slices.Sort(have)
			return nil, apierr.Invalid(fmt.Sprintf("securityGroupLabels[%d]", i), "no worker security group is labelled %q (labels: %s)", l, orNone(have))
		}
		out = append(out, ids...)
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// cacheErr maps an instance-type cache error to the API's codes.
func cacheErr(err error, field string) error {
	switch {
	case errors.Is(err, ErrNotWarm):
		return apierr.Unavailablef("%v", err)
	case errors.Is(err, ErrNotRun), errors.Is(err, ErrNoRegion):
		return apierr.FailedPreconditionf("%s: %v", field, err)
	}
	return err
}

// CreateCloud creates a cloud node: it records the node (STARTING) with
// the launch it is created with, then launches its instance and records
// it. A launch refused for capacity tries the next fallback type (each
// attempt recorded first); any other refusal records the node terminated
// (create failed: the cloud's message) and is returned. req must have
// passed CheckCloud. Call it on the primary.
func (f *Fleet) CreateCloud(ctx context.Context, req CloudRequest, ci *managerv1.CloudInstance) (Created, error) {
	p, ok := f.reg.Provider(req.Provider)
	if !ok {
		return Created{}, apierr.FailedPreconditionf("this Manager runs no %s provider", req.Provider)
	}
	hw := &managerv1.Hardware{}
	if it, found, err := f.reg.Types().Type(req.Provider, req.Region, req.InstanceType); err == nil && found {
		hw.Vcpus, hw.MemoryBytes = it.VCPUs, it.MemoryBytes
		hw.Architecture = archOf(it.Architectures)
	}
	token := f.cfg.Backend.NewRegistrationToken()
	if !f.claim(req.NodeID) {
		return Created{}, apierr.AlreadyExistsf("node %q is being created", req.NodeID)
	}
	defer f.release(req.NodeID)
	if _, err := f.cfg.Backend.Apply(ctx, &storev1.Command{Cmd: &storev1.Command_RegisterSlot{RegisterSlot: &storev1.RegisterSlot{
		NodeId: req.NodeID, NodeName: req.NodeID, Pool: req.Pool, Token: token, Tags: req.Tags,
		Provider: req.Provider, Hardware: hw, Cloud: ci, SpareByReconciler: IsSpareReconciler(ctx),
	}}}); err != nil {
		return Created{}, err
	}
	n := &managerv1.Node{NodeId: req.NodeID, Provider: req.Provider, Tags: withPool(req.Tags, req.Pool), Cloud: ci}
	return f.launch(ctx, p, n, token)
}

func withPool(tags map[string]string, pool string) map[string]string {
	out := make(map[string]string, len(tags)+1)
	for k, v := range tags {
		out[k] = v
	}
	if pool != "" {
		out["pool"] = pool
	}
	return out
}

func archOf(archs []string) managerv1.Architecture {
	for _, a := range archs {
		switch a {
		case "x86_64", "amd64":
			return managerv1.Architecture_ARCHITECTURE_X86_64
		case "arm64", "aarch64":
			return managerv1.Architecture_ARCHITECTURE_AARCH_64
		}
	}
	return managerv1.Architecture_ARCHITECTURE_UNSPECIFIED
}

// claim marks nodeID's launch as running in this process.
func (f *Fleet) claim(nodeID string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.inflight[nodeID] {
		return false
	}
	f.inflight[nodeID] = true
	return true
}

func (f *Fleet) release(nodeID string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.inflight, nodeID)
}

func (f *Fleet) inFlight(nodeID string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.inflight[nodeID]
}

// launch launches (or, repeated, finds) node n's instance from the launch
// its record holds, and records it. It is what a create does after
// recording the node, and what a new primary does for a node whose create
// a failed primary left without an instance: the same client token, so
// the cloud answers with the instance the first launch made, if it made
// one.
func (f *Fleet) launch(ctx context.Context, p Provider, n *managerv1.Node, token string) (Created, error) {
	ci := cloneCloud(n.GetCloud())
	urls, caPin := f.cfg.Backend.Registration()
	ud := UserData{NodeID: n.GetNodeId(), ManagerURLs: urls, Token: token, CAHash: caPin}.Encode()
	out := Created{NodeID: n.GetNodeId(), Cloud: ci}
	for {
		spec := LaunchSpec{
			NodeID: n.GetNodeId(), ClusterID: f.clusterID(), ClientToken: ci.GetClientToken(),
			Region: ci.GetRegion(), Zone: ci.GetZone(), InstanceType: ci.GetInstanceType(), Image: ci.GetImage(),
			Subnet: ci.GetSubnet(), SecurityGroups: ci.GetSecurityGroups(), Tags: userTags(n.GetTags()), UserData: ud,
			OCPUs: ci.GetOcpus(), MemoryGBs: ci.GetMemoryGbs(),
		}
		var inst Instance
		err := f.cfg.Throttle.retry(ctx, f.cfg.Clock, func() error {
			var err error
			inst, err = p.Launch(ctx, spec)
			if errors.Is(err, ErrThrottled) {
				f.cfg.Metrics.Throttled.WithLabelValues(p.Name()).Inc()
			}
			return err
		})
		if err == nil {
			ci.Zone = firstNonEmpty(inst.Zone, ci.GetZone())
			ci.PrivateIp, ci.PublicIp, ci.PrivateDnsName = inst.PrivateIP, inst.PublicIP, inst.PrivateDNS
			if inst.Type != "" {
				ci.InstanceType = inst.Type
			}
			if _, aerr := f.cfg.Backend.Apply(context.WithoutCancel(ctx), &storev1.Command{Cmd: &storev1.Command_SetNodeInstance{SetNodeInstance: &storev1.SetNodeInstance{
				NodeId: n.GetNodeId(), ProviderInstance: inst.ID, Cloud: ci,
			}}}); aerr != nil {
				// The instance exists; a later reconciliation records it
				// (it carries the node's tag).
				f.log.Warn("could not record a launched instance; reconciliation will", "node", n.GetNodeId(), "instance", inst.ID, "err", aerr)
			}
			f.cfg.Metrics.Created.WithLabelValues(p.Name()).Inc()
			f.log.Info("node instance launched", "node", n.GetNodeId(), "provider", p.Name(), "instance", inst.ID,
				"type", ci.GetInstanceType(), "region", ci.GetRegion(), "zone", ci.GetZone())
			out.Instance, out.Cloud = inst, ci
			return out, nil
		}
		if ctx.Err() != nil {
			// The caller went away (or this primary's term ended): the
			// node stays STARTING with its launch recorded, and the next
			// primary term repeats it with the same token.
			return out, apierr.Unavailablef("node %s: the launch was interrupted (%v); the primary will repeat it", n.GetNodeId(), ctx.Err())
		}
		if errors.Is(err, ErrCapacity) && len(ci.GetFallbackInstanceTypes()) > 0 {
			out.Attempts = append(out.Attempts, fmt.Sprintf("%s: %v", ci.GetInstanceType(), err))
			f.log.Warn("no capacity; trying the next instance type", "node", n.GetNodeId(), "type", ci.GetInstanceType(), "next", ci.GetFallbackInstanceTypes()[0], "err", err)
			ci.Attempt++
			next := ci.FallbackInstanceTypes[0]
			ci.FallbackInstanceTypes = ci.FallbackInstanceTypes[1:]
			if typ, zone, ok := strings.Cut(next, "@"); ok {
				ci.InstanceType, ci.Zone = typ, zone
			} else {
				ci.InstanceType = next
			}
			ci.ClientToken = ClientToken(f.clusterID(), n.GetNodeId(), ci.Attempt)
			if _, aerr := f.cfg.Backend.Apply(ctx, &storev1.Command{Cmd: &storev1.Command_SetNodeInstance{SetNodeInstance: &storev1.SetNodeInstance{
				NodeId: n.GetNodeId(), Cloud: ci,
			}}}); aerr != nil {
				return out, aerr
			}
			continue
		}
		f.cfg.Metrics.Failed.WithLabelValues(p.Name()).Inc()
		why := "create failed: " + err.Error()
		if len(out.Attempts) > 0 {
			why += " (after " + strings.Join(out.Attempts, "; ") + ")"
		}
		if _, terr := f.cfg.Backend.Apply(WithActor(context.WithoutCancel(ctx), "provider/"+p.Name(), "createFailed"), &storev1.Command{Cmd: &storev1.Command_TerminateNode{TerminateNode: &storev1.TerminateNode{
			NodeId: n.GetNodeId(), Reason: why,
		}}}); terr != nil {
			f.log.Warn("could not record a failed create", "node", n.GetNodeId(), "err", terr)
		}
		f.log.Warn("node create failed", "node", n.GetNodeId(), "provider", p.Name(), "err", err)
		switch {
		case errors.Is(err, ErrCapacity):
			return out, apierr.New(apierr.ResourceExhausted, "node %s: %s", n.GetNodeId(), why)
		case errors.Is(err, ErrInvalid), errors.Is(err, ErrNotFound):
			return out, apierr.FailedPreconditionf("node %s: %s", n.GetNodeId(), why)
		}
		return out, apierr.Unavailablef("node %s: %s", n.GetNodeId(), why)
	}
}

func cloneCloud(c *managerv1.CloudInstance) *managerv1.CloudInstance {
	return proto.Clone(c).(*managerv1.CloudInstance)
}

// userTags are the node tags pushed to its instance.
func userTags(tags map[string]string) map[string]string {
	out := make(map[string]string, len(tags))
	for k, v := range tags {
		if k == TagCluster || k == TagNode {
			continue
		}
		out[k] = v
	}
	return out
}

func firstNonEmpty(a ...string) string {
	for _, s := range a {
		if s != "" {
			return s
		}
	}
	return ""
}

// randomSuffix is n random lowercase letters and digits.
func randomSuffix(n int) string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, n)
	for i := range b {
		v, err := rand.Int(rand.Reader, big.NewInt(int64(len(alphabet))))
		if err != nil {
			panic(err)
		}
		b[i] = alphabet[v.Int64()]
	}
	return string(b)
}

// Metrics count what the providers and the reaper do.
type Metrics struct {
	Created    *prometheus.CounterVec
	Failed     *prometheus.CounterVec
	Reaped     *prometheus.CounterVec
	Throttled  *prometheus.CounterVec
	Reconciled *prometheus.CounterVec
	ListErrors *prometheus.CounterVec
}

// NewMetrics makes the metrics, registered with reg when not nil.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Created: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "norsk", Subsystem: "provider", Name: "nodes_created_total",
			Help: "Elastic nodes created, by provider."}, []string{"provider"}),
		Failed: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "norsk", Subsystem: "provider", Name: "node_create_failures_total",
			Help: "Elastic node creations that failed, by provider."}, []string{"provider"}),
		Reaped: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "norsk", Subsystem: "provider", Name: "nodes_terminated_total",
			Help: "Elastic nodes terminated by the Manager, by why (idle, start_timeout, lost, instance_gone)."}, []string{"why"}),
		Throttled: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "norsk", Subsystem: "provider", Name: "throttled_calls_total",
			Help: "Provider calls the cloud throttled after the SDK's own retries, by provider."}, []string{"provider"}),
		Reconciled: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "norsk", Subsystem: "provider", Name: "reconciled_total",
			Help: "Reconciliation actions, by provider and action (leak_terminated, node_gone, instance_recorded, tags_pushed, launch_resumed)."}, []string{"provider", "action"}),
		ListErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "norsk", Subsystem: "provider", Name: "list_errors_total",
			Help: "Failed listings of a provider's instances (reconciliation skipped), by provider."}, []string{"provider"}),
	}
	for _, why := range []string{"idle", "start_timeout", "lost", "instance_gone"} {
		m.Reaped.WithLabelValues(why)
	}
	if reg != nil {
		reg.MustRegister(m.Created, m.Failed, m.Reaped, m.Throttled, m.Reconciled, m.ListErrors)
	}
	return m
}
