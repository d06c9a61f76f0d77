package providers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/internal/clock"
	"github.com/norsk-go/norsk-manager/internal/store/state"
	"github.com/norsk-go/norsk-manager/pkg/apierr"
)

// fakeBackend is the Manager's side for a fleet under test: the real FSM
// (state.State), applied in process.
type fakeBackend struct {
	mu    sync.Mutex
	st    *state.State
	index uint64
	clk   clock.Clock
	cmds  []string
}

func newBackend(clk clock.Clock) *fakeBackend {
	return &fakeBackend{st: state.New(state.Limits{}), clk: clk}
}

func (b *fakeBackend) ClusterID() string { return b.st.Snapshot().ClusterID() }

func (b *fakeBackend) Nodes() []NodeView {
	r := b.st.Snapshot()
	var out []NodeView
	for _, rec := range r.Nodes(nil) {
		v := NodeView{Node: rec.GetNode(), Token: rec.GetToken()}
		for _, in := range r.InstancesOnNode(nil, rec.GetNode().GetNodeId()) {
			if in.GetPhase() != managerv1.InstancePhase_INSTANCE_PHASE_STOPPED {
				v.Busy = true
			}
		}
		out = append(out, v)
	}
	return out
}

func (b *fakeBackend) Apply(ctx context.Context, cmd *storev1.Command) (uint64, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.index++
	cmd.Time = timestamppb.New(b.clk.Now())
	res := b.st.Apply(b.index, cmd)
	b.cmds = append(b.cmds, fmt.Sprintf("%T", cmd.GetCmd()))
	return res.Index, res.Err
}

func (b *fakeBackend) Registration() ([]string, string) { return []string{"http://127.0.0.1:6790"}, "" }
func (b *fakeBackend) NewRegistrationToken() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return fmt.Sprintf("nrt_%d", b.index+1000)
}

func (b *fakeBackend) node(id string) *managerv1.Node {
	rec := b.st.Snapshot().Node(nil, id)
	if rec == nil {
		return nil
	}
	return rec.GetNode()
}

// fakeCloud is a provider with a catalog whose instances are a map.
type fakeCloud struct {
	mu        sync.Mutex
	seq       int
	insts     map[string]*Instance
	byToken   map[string]string
	launches  []LaunchSpec
	noCap     map[string]bool
	listErr   error
	onLaunch  func(LaunchSpec)
	throttled int
}

func newCloud() *fakeCloud {
	return &fakeCloud{insts: map[string]*Instance{}, byToken: map[string]string{}, noCap: map[string]bool{}}
}

func (c *fakeCloud) Name() string          { return "aws" }
func (c *fakeCloud) TracksInstances() bool { return true }
func (c *fakeCloud) Regions() []string     { return []string{"eu-west-1"} }
func (c *fakeCloud) InstanceTypes(context.Context, string) ([]InstanceType, []string, error) {
	return []InstanceType{
		{Name: "small", VCPUs: 2, MemoryBytes: 4 << 30, Architectures: []string{"x86_64"}, Regions: []string{"eu-west-1"}},
		{Name: "big", VCPUs: 8, MemoryBytes: 16 << 30, Architectures: []string{"x86_64"}, Regions: []string{"eu-west-1"}},
	}, []string{"eu-west-1"}, nil
}

func (c *fakeCloud) Launch(ctx context.Context, spec LaunchSpec) (Instance, error) {
	if c.onLaunch != nil {
		c.onLaunch(spec)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.launches = append(c.launches, spec)
	if c.throttled > 0 {
		c.throttled--
		return Instance{}, &CloudError{Kind: ErrThrottled, Code: "RequestLimitExceeded"}
	}
	if id, ok := c.byToken[spec.ClientToken]; ok {
		return *c.insts[id], nil
	}
	if c.noCap[spec.InstanceType] {
		return Instance{}, &CloudError{Kind: ErrCapacity, Code: "InsufficientInstanceCapacity", Message: "no " + spec.InstanceType}
	}
	c.seq++
	in := &Instance{ID: fmt.Sprintf("i-%d", c.seq), NodeID: spec.NodeID, ClusterID: spec.ClusterID, Region: spec.Region, Zone: "eu-west-1a",
		Type: spec.InstanceType, State: StatePending, Tags: map[string]string{TagCluster: spec.ClusterID, TagNode: spec.NodeID}}
	c.insts[in.ID], c.byToken[spec.ClientToken] = in, in.ID
	return *in, nil
}

func (c *fakeCloud) Terminate(ctx context.Context, ref Ref) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if in, ok := c.insts[ref.ID]; ok {
		in.State = StateTerminated
	}
	return nil
}

func (c *fakeCloud) List(ctx context.Context, cluster string) ([]Instance, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.listErr != nil {
		return nil, c.listErr
	}
	var out []Instance
	for i := 1; i <= c.seq; i++ {
		if in, ok := c.insts[fmt.Sprintf("i-%d", i)]; ok && in.ClusterID == cluster {
			cp := *in
			out = append(out, cp)
		}
	}
	return out, nil
}

func (c *fakeCloud) SetTags(ctx context.Context, ref Ref, tags map[string]string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, v := range tags {
		c.insts[ref.ID].Tags[k] = v
	}
	return nil
}

func (c *fakeCloud) state(id string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.insts[id].State
}

// plant adds an instance the fleet did not launch.
func (c *fakeCloud) plant(cluster, node string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	in := &Instance{ID: fmt.Sprintf("i-%d", c.seq), NodeID: node, ClusterID: cluster, Region: "eu-west-1", State: StateRunning,
		Tags: map[string]string{TagCluster: cluster, TagNode: node}}
	c.insts[in.ID] = in
	return in.ID
}

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func newFleet(t *testing.T) (*Fleet, *fakeBackend, *fakeCloud, *clock.Fake) {
	t.Helper()
	clk := clock.NewFake(t0)
	cloud := newCloud()
	path := t.TempDir() + "/o.yaml"
	writeFile(t, path, "version: 1\naws:\n  regions:\n    eu-west-1:\n      workerImages:\n        \"1.0.0\": ami-0123456789abcdef0\n")
	reg, err := NewRegistry(RegistryConfig{Providers: []Provider{cloud}, OverridesFile: path, Clock: clk, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.Types().Refresh(context.Background(), "aws", cloud); err != nil {
		t.Fatal(err)
	}
	be := newBackend(clk)
	f := NewFleet(FleetConfig{Registry: reg, Backend: be, ClusterID: "c1", WorkerVersion: "1.0.0", Clock: clk, Logger: slog.New(slog.DiscardHandler),
		StartTimeout: time.Minute, DefaultIdleExpiry: 10 * time.Minute, ListGrace: time.Minute, Throttle: Backoff{Attempts: 3, Base: time.Nanosecond, Max: time.Nanosecond}})
	return f, be, cloud, clk
}

func create(t *testing.T, f *Fleet, req CloudRequest) (Created, error) {
	t.Helper()
	req.Provider = "aws"
	if req.Region == "" {
		req.Region = "eu-west-1"
	}
	req, ci, err := f.CheckCloud(context.Background(), req)
	if err != nil {
		return Created{}, err
	}
	return f.CreateCloud(context.Background(), req, ci)
}

// A create records the node and its launch (client token included) before
// it calls the cloud, then records the instance.
func TestCreateRecordsTheLaunchFirst(t *testing.T) {
	t.Parallel()
	f, be, cloud, _ := newFleet(t)
	cloud.onLaunch = func(spec LaunchSpec) {
		n := be.node(spec.NodeID)
		if n == nil || n.GetState() != managerv1.NodeState_NODE_STATE_STARTING || n.GetCloud().GetClientToken() != spec.ClientToken || n.GetProviderInstance() != "" {
			t.Errorf("at launch the node is %v; want it STARTING with the launch's client token", n)
		}
	}
	got, err := create(t, f, CloudRequest{NodeID: "n1", InstanceType: "small", Pool: "burst"})
	if err != nil {
		t.Fatal(err)
	}
	n := be.node("n1")
	if n.GetProviderInstance() != got.Instance.ID || n.GetHardware().GetVcpus() != 2 || n.GetCloud().GetImage() != "ami-0123456789abcdef0" ||
		n.GetCloud().GetClientToken() != ClientToken("c1", "n1", 0) || n.GetTags()["pool"] != "burst" {
		t.Fatalf("node %v", n)
	}
	spec := cloud.launches[0]
	if ud, err := DecodeUserData(spec.UserData); err != nil || ud.NodeID != "n1" || ud.Token == "" || spec.Tags["pool"] != "burst" {
		t.Errorf("launch %+v: %v", spec, err)
	}
}

// A capacity refusal tries the next type with a new token; with none
// left the node is terminated with the cloud's message.
func TestCreateCapacityFallbackAndFailure(t *testing.T) {
	t.Parallel()
	f, be, cloud, clk := newFleet(t)
	cloud.noCap["small"] = true
	got, err := create(t, f, CloudRequest{NodeID: "n1", InstanceType: "small", Fallbacks: []string{"big"}})
	if err != nil {
		t.Fatal(err)
	}
	n := be.node("n1")
	if got.Instance.Type != "big" || len(got.Attempts) != 1 || n.GetCloud().GetAttempt() != 1 || n.GetCloud().GetInstanceType() != "big" ||
		n.GetCloud().GetClientToken() != ClientToken("c1", "n1", 1) || len(n.GetCloud().GetFallbackInstanceTypes()) != 0 {
		t.Fatalf("created %+v, node %v", got, n)
	}
	_, err = create(t, f, CloudRequest{NodeID: "n2", InstanceType: "small"})
	if !apierr.Is(err, apierr.ResourceExhausted) {
		t.Fatalf("no capacity, no fallback: %v", err)
	}
	if n := be.node("n2"); n.GetState() != managerv1.NodeState_NODE_STATE_TERMINATED || n.GetStateReason() != "create failed: InsufficientInstanceCapacity: no small" {
		t.Errorf("failed node %v", n)
	}
	cloud.throttled = 2 // within the fleet's 3 attempts; each backoff waits on the clock
	done := make(chan error, 1)
	go func() {
		_, err := create(t, f, CloudRequest{NodeID: "n3", InstanceType: "big"})
		done <- err
	}()
	for {
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("throttled twice: %v", err)
			}
			if len(cloud.launches) != 6 { // n1: small refused, big; n2: small refused; n3: twice throttled, then launched
				t.Errorf("%d launches, want 6", len(cloud.launches))
			}
			return
		case <-clk.TimerCreated():
			clk.Advance(time.Second)
		}
	}
}

// CheckCloud's refusals change nothing.
func TestCheckCloudRefusals(t *testing.T) {
	t.Parallel()
	f, be, cloud, _ := newFleet(t)
	for _, tc := range []struct {
		name string
		req  CloudRequest
		code apierr.Code
	}{
		{"unknown provider", CloudRequest{Provider: "gcp", Region: "eu-west-1", InstanceType: "small"}, apierr.FailedPrecondition},
		{"region not run", CloudRequest{Provider: "aws", Region: "us-east-1", InstanceType: "small"}, apierr.FailedPrecondition},
		{"unknown type", CloudRequest{Provider: "aws", Region: "eu-west-1", InstanceType: "huge"}, apierr.InvalidArgument},
		{"no type", CloudRequest{Provider: "aws", Region: "eu-west-1"}, apierr.InvalidArgument},
		{"no image", CloudRequest{Provider: "aws", Region: "eu-west-1", InstanceType: "small", WorkerVersion: "2.0"}, apierr.FailedPrecondition},
		{"own tag", CloudRequest{Provider: "aws", Region: "eu-west-1", InstanceType: "small", Tags: map[string]string{TagNode: "x"}}, apierr.InvalidArgument},
	} {
		if _, _, err := f.CheckCloud(context.Background(), tc.req); !apierr.Is(err, tc.code) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.code)
		}
	}
	if len(be.Nodes()) != 0 || len(cloud.launches) != 0 {
		t.Errorf("refusals changed something: %d nodes, %d launches", len(be.Nodes()), len(cloud.launches))
	}
}

// Reconciliation, every rule.
func TestReconcile(t *testing.T) {
	t.Parallel()
	f, be, cloud, clk := newFleet(t)
	pt := &providerTerm{p: cloud, ended: map[string]bool{}, retryAt: map[string]time.Time{}, tags: map[string]map[string]string{}, resumed: map[string]bool{}}
	x := context.Background()

	// A live node, whose instance will vanish.
	live, err := create(t, f, CloudRequest{NodeID: "live", InstanceType: "small"})
	if err != nil {
		t.Fatal(err)
	}
	// A node whose create died after the cloud made the instance: the
	// node has no instance recorded.
	req, ci, _ := f.CheckCloud(x, CloudRequest{Provider: "aws", Region: "eu-west-1", NodeID: "lost-answer", InstanceType: "small"})
	if _, err := be.Apply(x, &storev1.Command{Cmd: &storev1.Command_RegisterSlot{RegisterSlot: &storev1.RegisterSlot{
		NodeId: req.NodeID, NodeName: req.NodeID, Token: "nrt_a", Provider: "aws", Cloud: ci}}}); err != nil {
		t.Fatal(err)
	}
	made, _ := cloud.Launch(x, LaunchSpec{NodeID: "lost-answer", ClusterID: "c1", ClientToken: ci.GetClientToken(), InstanceType: "small"})
	// A node whose create died before the cloud was called.
	req2, ci2, _ := f.CheckCloud(x, CloudRequest{Provider: "aws", Region: "eu-west-1", NodeID: "never-called", InstanceType: "small"})
	if _, err := be.Apply(x, &storev1.Command{Cmd: &storev1.Command_RegisterSlot{RegisterSlot: &storev1.RegisterSlot{
		NodeId: req2.NodeID, NodeName: req2.NodeID, Token: "nrt_b", Provider: "aws", Cloud: ci2}}}); err != nil {
		t.Fatal(err)
	}
	leak := cloud.plant("c1", "ghost")
	dup := cloud.plant("c1", "live")
	foreign := cloud.plant("other-cluster", "ghost")

	cloud.listErr = errors.New("boom")
	f.reconcile(x, pt)
	if cloud.state(leak) != StateRunning {
		t.Fatal("a failed listing concluded something")
	}
	cloud.listErr = nil
	f.reconcile(x, pt)
	pt.wg.Wait()
	if cloud.state(leak) != StateTerminated || cloud.state(dup) != StateTerminated || cloud.state(foreign) != StateRunning {
		t.Errorf("leak %s, duplicate %s, another cluster's %s; want terminated, terminated, running",
			cloud.state(leak), cloud.state(dup), cloud.state(foreign))
	}
	if n := be.node("lost-answer"); n.GetProviderInstance() != made.ID {
		t.Errorf("lost-answer runs on %q, want the instance the cloud made (%s)", n.GetProviderInstance(), made.ID)
	}
	n := be.node("never-called")
	if n.GetProviderInstance() == "" {
		t.Fatalf("never-called has no instance: its launch was not repeated")
	}
	if last := cloud.launches[len(cloud.launches)-1]; last.ClientToken != ci2.GetClientToken() || last.UserData == nil {
		t.Errorf("the repeated launch carried token %q, want the recorded %q", last.ClientToken, ci2.GetClientToken())
	}
	instances := 0
	for _, in := range cloud.insts {
		if in.NodeID == "never-called" || in.NodeID == "lost-answer" {
			instances++
		}
	}
	if instances != 2 {
		t.Errorf("%d instances for the two interrupted creates, want one each", instances)
	}

	// The live node's instance vanishes: the node is terminated, with why.
	if err := cloud.Terminate(x, Ref{ID: live.Instance.ID}); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Second)
	f.reconcile(x, pt)
	if n := be.node("live"); n.GetState() != managerv1.NodeState_NODE_STATE_TERMINATED || n.GetStateReason() != "its instance "+live.Instance.ID+" is terminated" {
		t.Errorf("live = %v %q", n.GetState(), n.GetStateReason())
	}
	// An instance missing from the list only counts after the list grace.
	delete(cloud.insts, made.ID)
	f.reconcile(x, pt)
	if n := be.node("lost-answer"); n.GetState() == managerv1.NodeState_NODE_STATE_TERMINATED {
		t.Error("a node whose instance is not listed yet was terminated within the grace")
	}
	clk.Advance(2 * time.Minute)
	f.reconcile(x, pt)
	if n := be.node("lost-answer"); n.GetState() != managerv1.NodeState_NODE_STATE_TERMINATED {
		t.Errorf("lost-answer after the grace: %v", n.GetState())
	}
}

// The reaper: idle, start timeout, lost — each after its time, never a
// busy node.
func TestReaper(t *testing.T) {
	t.Parallel()
	f, be, _, clk := newFleet(t)
	x := context.Background()
	for _, id := range []string{"starting", "idle"} {
		if _, err := create(t, f, CloudRequest{NodeID: id, InstanceType: "small"}); err != nil {
			t.Fatal(err)
		}
	}
	// "idle" comes online.
	if _, err := be.Apply(x, &storev1.Command{Cmd: &storev1.Command_MemberRegister{MemberRegister: &storev1.MemberRegister{
		Token: be.st.Snapshot().Node(nil, "idle").GetToken(), NodeSecret: "nns_x", Address: "127.0.0.1:1"}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := be.Apply(x, &storev1.Command{Cmd: &storev1.Command_NodeOnline{NodeOnline: &storev1.NodeOnline{NodeId: "idle", Hello: &managerv1.WorkerHello{}}}}); err != nil {
		t.Fatal(err)
	}
	idleSince := map[string]time.Time{}
	f.reap(x, clk.Now(), idleSince)
	if be.node("idle").GetState() != managerv1.NodeState_NODE_STATE_ONLINE || be.node("starting").GetState() != managerv1.NodeState_NODE_STATE_STARTING {
		t.Fatal("reaped too soon")
	}
	clk.Advance(time.Minute)
	f.reap(x, clk.Now(), idleSince)
	if n := be.node("starting"); n.GetState() != managerv1.NodeState_NODE_STATE_TERMINATED || n.GetStateReason() != "startup time exceeded: its worker did not call in within 1m0s" {
		t.Errorf("starting = %v %q", n.GetState(), n.GetStateReason())
	}
	clk.Advance(10 * time.Minute)
	f.reap(x, clk.Now(), idleSince)
	if n := be.node("idle"); n.GetState() != managerv1.NodeState_NODE_STATE_STOPPING || n.GetStateReason() != "idle for 11m0s (idle expiry 10m0s)" {
		t.Errorf("idle = %v %q", n.GetState(), n.GetStateReason())
	}
}

func writeFile(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
}

// Without providers.clusterId the fleet tags instances with the store's own
// cluster id (the one its workers label their containers with).
func TestFleetClusterIDDefaultsToTheStores(t *testing.T) {
	be := newBackend(clock.NewFake(time.Unix(1_700_000_000, 0)))
	f := NewFleet(FleetConfig{Registry: &Registry{}, Backend: be})
	if got := f.clusterID(); got != "" {
		t.Fatalf("before the store has one: %q", got)
	}
	if _, err := be.Apply(context.Background(), &storev1.Command{Cmd: &storev1.Command_InitCluster{InitCluster: &storev1.InitCluster{
		ClusterId: "0123456789abcdef0123456789abcdef"}}}); err != nil {
		t.Fatal(err)
	}
	if got := f.clusterID(); got != "0123456789abcdef0123456789abcdef" {
		t.Fatalf("the store's: %q", got)
	}
	f = NewFleet(FleetConfig{Registry: &Registry{}, Backend: be, ClusterID: "prod-eu-1"})
	if got := f.clusterID(); got != "prod-eu-1" {
		t.Fatalf("configured: %q", got)
	}
}
