package tests

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"

	"github.com/norsk-go/norsk-manager/internal/buildinfo"
	"github.com/norsk-go/norsk-manager/internal/cloudsim"
	"github.com/norsk-go/norsk-manager/internal/manager"
	"github.com/norsk-go/norsk-manager/internal/providers"
	"github.com/norsk-go/norsk-manager/internal/runtime"
	"github.com/norsk-go/norsk-manager/internal/runtime/runtimetest"
	"github.com/norsk-go/norsk-manager/internal/testcluster"
	"github.com/norsk-go/norsk-manager/internal/testimage"
	"github.com/norsk-go/norsk-manager/sdk/norsk"

	// The cloud providers testcluster's Clouds option points at its
	// endpoints.
	_ "github.com/norsk-go/norsk-manager/internal/providers/aws"
	_ "github.com/norsk-go/norsk-manager/internal/providers/oci"
)

// These scenarios drive the aws and oci providers through their SDKs
// against the local EC2 and OCI endpoints (internal/cloudsim), whose
// instances boot real workers from their user data.

func cloudCluster(t *testing.T, adjust func(*manager.Config)) *testcluster.Cluster {
	t.Helper()
	c := testcluster.New(t, testcluster.Options{Clouds: true, ManagerConfig: adjust})
	c.Eventually("the instance-type cache to warm", func() bool {
		it, err := c.Client().DescribeInstanceType(ctx(t), "c6i.large", norsk.InstanceTypeOptions{})
		if err != nil {
			return false
		}
		_, err = c.Client().DescribeInstanceType(ctx(t), "VM.Standard2.1", norsk.InstanceTypeOptions{Provider: "oci"})
		return it != nil && err == nil
	})
	return c
}

func codeIs(err error, want error) bool { return errors.Is(err, want) }

// The seed's queries: describeInstanceType, listInstanceTypes,
// listWorkerSecurityGroups, and every refusal.
func TestCloudQueries(t *testing.T) {
	t.Parallel()
	c := cloudCluster(t, nil)
	cl, x := c.Client(), ctx(t)

	it, err := cl.DescribeInstanceType(x, "c6i.xlarge", norsk.InstanceTypeOptions{Region: testcluster.AWSRegion})
	if err != nil || it == nil || it.GetVcpus() != 4 || it.GetMemoryBytes() != 8<<30 || it.GetArchitectures()[0] != "x86_64" || !it.Offered {
		t.Fatalf("c6i.xlarge in %s = %+v, %v", testcluster.AWSRegion, it, err)
	}
	if it, err := cl.DescribeInstanceType(x, "c6i.4xlarge", norsk.InstanceTypeOptions{Region: testcluster.AWSRegion}); err != nil || it == nil || it.Offered {
		t.Errorf("c6i.4xlarge (known, not offered there) = %+v, %v", it, err)
	}
	if it, err := cl.DescribeInstanceType(x, "x9.huge", norsk.InstanceTypeOptions{}); err != nil || it != nil {
		t.Errorf("an unknown type = %+v, %v; want undefined (nil)", it, err)
	}
	ad := c.Clouds.OCI.AvailabilityDomains(testcluster.OCIRegion)[1]
	if it, err := cl.DescribeInstanceType(x, "VM.Standard2.2", norsk.InstanceTypeOptions{Provider: "oci", Region: ad}); err != nil || it == nil || it.GetVcpus() != 4 || !it.Offered {
		t.Errorf("VM.Standard2.2 in %s = %+v, %v", ad, it, err)
	}
	for _, o := range []norsk.InstanceTypeOptions{{Provider: "gcp"}, {Region: "us-east-1"}, {Provider: "oci", Region: testcluster.AWSRegion}, {Provider: "mock"}} {
		if _, err := cl.DescribeInstanceType(x, "c6i.large", o); !codeIs(err, norsk.ErrFailedPrecondition) {
			t.Errorf("DescribeInstanceType %+v: %v, want FAILED_PRECONDITION", o, err)
		}
	}
	if _, err := cl.DescribeInstanceType(x, "", norsk.InstanceTypeOptions{}); !codeIs(err, norsk.ErrInvalidArgument) {
		t.Errorf("no instance type: %v, want INVALID_ARGUMENT", err)
	}
	for _, p := range []string{"", "aws", "oci"} {
		types, known, err := cl.ListInstanceTypes(x, norsk.InstanceTypeOptions{Provider: p})
		if err != nil || known || len(types) != 0 {
			t.Errorf("ListInstanceTypes(%q) = %v, %v, %v; want known false and an empty list", p, types, known, err)
		}
	}
	if _, _, err := cl.ListInstanceTypes(x, norsk.InstanceTypeOptions{Provider: "gcp"}); !codeIs(err, norsk.ErrFailedPrecondition) {
		t.Errorf("ListInstanceTypes(gcp): %v, want FAILED_PRECONDITION", err)
	}
	if _, _, err := cl.ListInstanceTypes(x, norsk.InstanceTypeOptions{Region: "ap-south-1"}); !codeIs(err, norsk.ErrFailedPrecondition) {
		t.Errorf("ListInstanceTypes in a region not run: %v, want FAILED_PRECONDITION", err)
	}

	groups, err := cl.ListWorkerSecurityGroups(x, testcluster.AWSRegion)
	if err != nil || len(groups) != 2 {
		t.Fatalf("ListWorkerSecurityGroups = %v, %v", groups, err)
	}
	if g := groups[0]; !g.GetBase() || g.GetGroupId() != testcluster.BaseGroup || g.GetIngress()[0].GetFromPort() != 6791 {
		t.Errorf("base group %v", g)
	}
	if g := groups[1]; g.GetBase() || g.GetLabel() != "srt" || g.GetIngress()[0].GetProtocol() != "udp" || g.GetIngress()[0].GetCidrs()[0] != "0.0.0.0/0" {
		t.Errorf("selectable group %v", g)
	}
	if _, err := cl.ListWorkerSecurityGroups(x, "us-east-1"); !codeIs(err, norsk.ErrFailedPrecondition) {
		t.Errorf("a region not run: %v, want FAILED_PRECONDITION", err)
	}
	if _, err := cl.ListWorkerSecurityGroups(x, ""); !codeIs(err, norsk.ErrInvalidArgument) {
		t.Errorf("no region: %v, want INVALID_ARGUMENT", err)
	}

	// Bad creates are refused and change nothing.
	good := norsk.AwsNode{Region: testcluster.AWSRegion, InstanceType: "c6i.large"}
	for _, tc := range []struct {
		name string
		n    func(norsk.AwsNode) norsk.AwsNode
		want error
	}{
		{"no region", func(n norsk.AwsNode) norsk.AwsNode { n.Region = ""; return n }, norsk.ErrInvalidArgument},
		{"region not run", func(n norsk.AwsNode) norsk.AwsNode { n.Region = "us-east-1"; return n }, norsk.ErrFailedPrecondition},
		{"no type", func(n norsk.AwsNode) norsk.AwsNode { n.InstanceType = ""; return n }, norsk.ErrInvalidArgument},
		{"unknown type", func(n norsk.AwsNode) norsk.AwsNode { n.InstanceType = "x9.huge"; return n }, norsk.ErrInvalidArgument},
		{"type not offered", func(n norsk.AwsNode) norsk.AwsNode { n.InstanceType = "c6i.4xlarge"; return n }, norsk.ErrInvalidArgument},
		{"unknown fallback", func(n norsk.AwsNode) norsk.AwsNode { n.FallbackInstanceTypes = []string{"nope"}; return n }, norsk.ErrInvalidArgument},
		{"unknown label", func(n norsk.AwsNode) norsk.AwsNode { n.SecurityGroupLabels = []string{"rtmp"}; return n }, norsk.ErrInvalidArgument},
		{"no image for the version", func(n norsk.AwsNode) norsk.AwsNode { n.WorkerVersion = "9.9.9"; return n }, norsk.ErrFailedPrecondition},
		{"spare tag", func(n norsk.AwsNode) norsk.AwsNode { n.Tags = map[string]string{"spare": "true"}; return n }, norsk.ErrInvalidArgument},
		{"the cluster's own tag", func(n norsk.AwsNode) norsk.AwsNode { n.Tags = map[string]string{providers.TagCluster: "x"}; return n }, norsk.ErrInvalidArgument},
		{"bad node id", func(n norsk.AwsNode) norsk.AwsNode { n.NodeID = "no spaces"; return n }, norsk.ErrInvalidArgument},
	} {
		if _, err := cl.CreateAwsNode(x, tc.n(good)); !codeIs(err, tc.want) {
			t.Errorf("CreateAwsNode, %s: %v, want %v", tc.name, err, tc.want)
		}
	}
	oci := norsk.OciNode{AvailabilityDomain: ad, Shape: "VM.Standard2.1"}
	for _, tc := range []struct {
		name string
		n    norsk.OciNode
		want error
	}{
		{"no domain", norsk.OciNode{Shape: "VM.Standard2.1"}, norsk.ErrInvalidArgument},
		{"unknown domain", norsk.OciNode{AvailabilityDomain: "Uocm:NOWHERE-AD-1", Shape: "VM.Standard2.1"}, norsk.ErrFailedPrecondition},
		{"unknown shape", norsk.OciNode{AvailabilityDomain: ad, Shape: "VM.Nope"}, norsk.ErrInvalidArgument},
		{"negative ocpus", norsk.OciNode{AvailabilityDomain: ad, Shape: "VM.Standard2.1", OCPUs: -1}, norsk.ErrInvalidArgument},
		{"label on oci", func() norsk.OciNode { n := oci; n.Region = "us-ashburn-1"; return n }(), norsk.ErrFailedPrecondition},
	} {
		if _, err := cl.CreateOciNode(x, tc.n); !codeIs(err, tc.want) {
			t.Errorf("CreateOciNode, %s: %v, want %v", tc.name, err, tc.want)
		}
	}
	if nodes, _ := cl.ListNodes(x); len(nodes) != 0 {
		t.Errorf("refused creates left nodes: %v", nodes)
	}
	if n := len(c.Clouds.EC2.Instances()) + len(c.Clouds.OCI.Instances()); n != 0 {
		t.Errorf("refused creates launched %d instances", n)
	}
}

// CreateAwsNode launches an instance booting the worker from its user
// data; the node goes STARTING → ONLINE; its tags reach the instance;
// TerminateNode terminates the instance. CreateOciNode does the same.
func TestCloudNodeLifecycle(t *testing.T) {
	t.Parallel()
	c := cloudCluster(t, nil)
	cl, x := c.Client(), ctx(t)

	n, err := cl.CreateAwsNode(x, norsk.AwsNode{Region: testcluster.AWSRegion, InstanceType: "c6i.xlarge", Pool: testcluster.AWSPool,
		SecurityGroupLabels: []string{"srt"}, Tags: map[string]string{"team": "live"}})
	if err != nil {
		t.Fatal(err)
	}
	if n.GetInstanceId() == "" || n.GetImage() != testcluster.AWSImage || n.GetInstanceType() != "c6i.xlarge" || n.GetZone() == "" || !strings.HasPrefix(n.GetNodeId(), "aws-") {
		t.Fatalf("created %v", n)
	}
	node := c.WaitNodeState(n.GetNodeId(), norsk.NodeStateOnline)
	if node.GetProvider() != "aws" || !node.GetElastic() || node.GetProviderInstance() != n.GetInstanceId() || node.GetCloud().GetRegion() != testcluster.AWSRegion ||
		node.GetHardware().GetVcpus() != 4 || node.GetTags()["pool"] != testcluster.AWSPool {
		t.Fatalf("node %v", node)
	}
	inst := c.Clouds.EC2.Instances()[0]
	if inst.Tags[providers.TagCluster] != c.Clouds.ClusterID || inst.Tags[providers.TagNode] != n.GetNodeId() || inst.Tags["team"] != "live" ||
		strings.Join(inst.SecurityGroups, ",") != testcluster.BaseGroup+","+testcluster.SRTGroup || inst.ClientToken != node.GetCloud().GetClientToken() {
		t.Fatalf("instance %+v", inst)
	}
	if _, err := cl.SetNodeTags(x, n.GetNodeId(), map[string]string{"rack": "r7"}); err != nil {
		t.Fatal(err)
	}
	c.Eventually("the node's new tag on its instance", func() bool { return c.Clouds.EC2.Instances()[0].Tags["rack"] == "r7" })
	if err := cl.TerminateNode(x, n.GetNodeId()); err != nil {
		t.Fatal(err)
	}
	c.WaitNodeState(n.GetNodeId(), norsk.NodeStateTerminated)
	c.Eventually("the instance terminated", func() bool { return len(c.Clouds.EC2.Running()) == 0 })

	ad := c.Clouds.OCI.AvailabilityDomains(testcluster.OCIRegion)[0]
	o, err := cl.CreateOciNode(x, norsk.OciNode{AvailabilityDomain: ad, Shape: "VM.Standard2.2", Pool: testcluster.OCIPool})
	if err != nil {
		t.Fatal(err)
	}
	if o.GetRegion() != testcluster.OCIRegion || o.GetZone() != ad || o.GetImage() != testcluster.OCIImage {
		t.Fatalf("created %v", o)
	}
	on := c.WaitNodeState(o.GetNodeId(), norsk.NodeStateOnline)
	if on.GetProvider() != "oci" || on.GetHardware().GetVcpus() != 4 {
		t.Fatalf("node %v", on)
	}
	if err := cl.TerminateNode(x, o.GetNodeId()); err != nil {
		t.Fatal(err)
	}
	c.Eventually("the OCI instance terminated", func() bool { return len(c.Clouds.OCI.Running()) == 0 })
}

// A primary that dies mid-create never makes two instances: the launch is
// recorded before the cloud is called, and the next primary finds the
// instance (the answer was lost) or repeats the launch with the same
// client token (the call never reached the cloud).
func TestCloudCreateInterruptedByManagerKill(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		before bool
	}{{"the answer is lost", false}, {"the call never reaches the cloud", true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// Reconciliation runs only at a term's start here, so that only
			// the next primary can finish the create.
			c := cloudCluster(t, func(cfg *manager.Config) { cfg.ReconcileInterval = time.Hour })
			x := ctx(t)
			release := c.Clouds.EC2.Hold("RunInstances", tc.before)
			done := make(chan error, 1)
			go func() {
				_, err := c.Client().CreateAwsNode(x, norsk.AwsNode{NodeID: "edge-1", Region: testcluster.AWSRegion, InstanceType: "c6i.large"})
				done <- err
			}()
			c.Eventually("the launch to reach the endpoint", func() bool { return c.Clouds.EC2.Calls("RunInstances") > 0 })
			c.StopManager() // the primary dies with the launch in flight
			<-done
			release()
			c.StartManager()
			var n *norsk.Node
			c.Eventually("edge-1 online on its recorded instance", func() bool {
				n = c.Node("edge-1")
				return n != nil && n.GetState() == norsk.NodeStateOnline && n.GetProviderInstance() != ""
			})
			var mine []string
			for _, in := range c.Clouds.EC2.Instances() {
				if in.Tags[providers.TagNode] == "edge-1" {
					mine = append(mine, in.ID)
				}
			}
			if len(mine) != 1 || n.GetProviderInstance() != mine[0] {
				t.Fatalf("instances of edge-1: %v, node on %q; want exactly one, the node's", mine, n.GetProviderInstance())
			}
		})
	}
}

// Reconciliation, both ways: an instance of the cluster that no live node
// owns is terminated; a node whose instance is gone is marked terminated
// with the reason. Another cluster's instances are never touched.
func TestCloudLeakReconciliation(t *testing.T) {
	t.Parallel()
	c := cloudCluster(t, nil)
	cl, x := c.Client(), ctx(t)
	sim := c.Clouds.EC2
	leak, err := sim.Launch(testcluster.AWSRegion, "c6i.large", map[string]string{providers.TagCluster: c.Clouds.ClusterID, providers.TagNode: "ghost"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	other, err := sim.Launch(testcluster.AWSRegion, "c6i.large", map[string]string{providers.TagCluster: "someone-else", providers.TagNode: "ghost"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	c.Eventually("the leaked instance terminated", func() bool {
		for _, in := range sim.Running() {
			if in.ID == leak {
				return false
			}
		}
		return true
	})
	n, err := cl.CreateAwsNode(x, norsk.AwsNode{Region: testcluster.AWSRegion, InstanceType: "c6i.large"})
	if err != nil {
		t.Fatal(err)
	}
	c.WaitNodeState(n.GetNodeId(), norsk.NodeStateOnline)
	if err := sim.TerminateOutOfBand(n.GetInstanceId(), "Server.SpotInstanceTermination"); err != nil {
		t.Fatal(err)
	}
	gone := c.WaitNodeState(n.GetNodeId(), norsk.NodeStateTerminated)
	if !strings.Contains(gone.GetStateReason(), n.GetInstanceId()) || !strings.Contains(gone.GetStateReason(), "terminated") {
		t.Errorf("reason %q: want the instance and that it is terminated", gone.GetStateReason())
	}
	for _, in := range sim.Running() {
		if in.ID == other {
			return
		}
	}
	t.Errorf("another cluster's instance %s was terminated", other)
}

// A node whose worker never registers is terminated at its start timeout
// with the reason in its state, and its instance is terminated.
func TestCloudNodeThatNeverRegisters(t *testing.T) {
	t.Parallel()
	c := cloudCluster(t, func(cfg *manager.Config) { cfg.CloudStartTimeout = time.Second })
	cl, x := c.Client(), ctx(t)
	c.Clouds.EC2.DontBoot(true)
	n, err := cl.CreateAwsNode(x, norsk.AwsNode{Region: testcluster.AWSRegion, InstanceType: "c6i.large"})
	if err != nil {
		t.Fatal(err)
	}
	dead := c.WaitNodeState(n.GetNodeId(), norsk.NodeStateTerminated)
	if !strings.Contains(dead.GetStateReason(), "startup time exceeded") {
		t.Errorf("reason %q", dead.GetStateReason())
	}
	c.Eventually("its instance terminated", func() bool { return len(c.Clouds.EC2.Running()) == 0 })
}

// Throttling (RequestLimitExceeded) is retried with backoff; a capacity
// refusal tries the next instance type, and fails the create with the
// cloud's message when none is left.
func TestCloudThrottlingAndCapacity(t *testing.T) {
	t.Parallel()
	c := cloudCluster(t, nil)
	cl, x := c.Client(), ctx(t)
	sim := c.Clouds.EC2

	sim.Throttle(6) // more than the SDK's 4 attempts: the Manager's own backoff carries on
	n, err := cl.CreateAwsNode(x, norsk.AwsNode{Region: testcluster.AWSRegion, InstanceType: "c6i.large"})
	if err != nil {
		t.Fatalf("create under throttling: %v", err)
	}
	c.WaitNodeState(n.GetNodeId(), norsk.NodeStateOnline)

	sim.NoCapacity("c6i.xlarge", "", -1)
	f, err := cl.CreateAwsNode(x, norsk.AwsNode{Region: testcluster.AWSRegion, InstanceType: "c6i.xlarge", FallbackInstanceTypes: []string{"c6i.2xlarge"}})
	if err != nil {
		t.Fatalf("create with a fallback: %v", err)
	}
	if f.GetInstanceType() != "c6i.2xlarge" || len(f.GetAttempts()) != 1 || !strings.Contains(f.GetAttempts()[0], "InsufficientInstanceCapacity") {
		t.Fatalf("created %v: want c6i.2xlarge after c6i.xlarge's capacity refusal", f)
	}
	fn := c.WaitNodeState(f.GetNodeId(), norsk.NodeStateOnline)
	if fn.GetCloud().GetInstanceType() != "c6i.2xlarge" || fn.GetCloud().GetAttempt() != 1 {
		t.Errorf("node launch %v", fn.GetCloud())
	}
	_, err = cl.CreateAwsNode(x, norsk.AwsNode{NodeID: "no-room", Region: testcluster.AWSRegion, InstanceType: "c6i.xlarge"})
	if !codeIs(err, norsk.ErrResourceExhausted) || !strings.Contains(err.Error(), "sufficient c6i.xlarge capacity") {
		t.Fatalf("no capacity, no fallback: %v; want RESOURCE_EXHAUSTED with EC2's message", err)
	}
	failed := c.WaitNodeState("no-room", norsk.NodeStateTerminated)
	if !strings.Contains(failed.GetStateReason(), "create failed") || !strings.Contains(failed.GetStateReason(), "InsufficientInstanceCapacity") {
		t.Errorf("reason %q", failed.GetStateReason())
	}
}

// ReloadExternalConfig applies a new overrides file without a restart and
// says what changed; a file that does not validate is refused and the old
// one stays in force. Both are audited.
func TestReloadExternalConfig(t *testing.T) {
	t.Parallel()
	c := cloudCluster(t, nil)
	cl, x := c.Client(), ctx(t)
	if _, err := cl.CreateAwsNode(x, norsk.AwsNode{Region: testcluster.AWSRegion, InstanceType: "c6i.large", WorkerVersion: "2.0.0"}); !codeIs(err, norsk.ErrFailedPrecondition) {
		t.Fatalf("no image for 2.0.0 yet: %v", err)
	}
	good := strings.Replace(testcluster.DefaultOverrides(), "      workerImages:\n", "      workerImages:\n        \"2.0.0\": ami-0fedcba9876543210\n", 1)
	c.WriteOverrides(good)
	res, err := cl.ReloadExternalConfig(x)
	if err != nil {
		t.Fatal(err)
	}
	if !res.GetConsistent() || len(res.GetMembers()) != 1 || len(res.GetMembers()[0].GetChanges()) != 1 ||
		!strings.Contains(res.GetMembers()[0].GetChanges()[0], "worker image 2.0.0 = ami-0fedcba9876543210 added") {
		t.Fatalf("reload = %v", res)
	}
	n, err := cl.CreateAwsNode(x, norsk.AwsNode{Region: testcluster.AWSRegion, InstanceType: "c6i.large", WorkerVersion: "2.0.0"})
	if err != nil || n.GetImage() != "ami-0fedcba9876543210" {
		t.Fatalf("create on the new image: %v, %v", n, err)
	}

	c.WriteOverrides("version: 1\naws:\n  regions:\n    eu-west-1:\n      workerImages:\n        \"1.0\": not-an-ami\n")
	if _, err := cl.ReloadExternalConfig(x); !codeIs(err, norsk.ErrInvalidArgument) || !strings.Contains(err.Error(), "not-an-ami") {
		t.Fatalf("a bad file: %v, want INVALID_ARGUMENT naming the fault", err)
	}
	if it, err := cl.DescribeInstanceType(x, "VM.Standard2.1", norsk.InstanceTypeOptions{Provider: "oci"}); err != nil || it == nil {
		t.Errorf("after a refused reload the old file (with oci) is in force: %v, %v", it, err)
	}
	c.WriteOverrides("version: 1\naws:\n  regions:\n    eu-west-1:\n      workerImages:\n        \"" + buildinfo.Version + "\": " + testcluster.AWSImage + "\n")
	res, err = cl.ReloadExternalConfig(x)
	if err != nil || !strings.Contains(strings.Join(res.GetMembers()[0].GetChanges(), "\n"), "oci eu-frankfurt-1: region removed") {
		t.Fatalf("reload without oci = %v, %v", res, err)
	}
	c.Eventually("oci's region to be gone", func() bool {
		_, err := cl.CreateOciNode(x, norsk.OciNode{AvailabilityDomain: c.Clouds.OCI.AvailabilityDomains(testcluster.OCIRegion)[0], Shape: "VM.Standard2.1"})
		return codeIs(err, norsk.ErrFailedPrecondition)
	})
	page, err := cl.GetAuditLog(x, norsk.AuditLogQuery{Limit: 50})
	if err != nil {
		t.Fatal(err)
	}
	reloads := 0
	for _, e := range page.GetEntries() {
		if e.GetKind() == "ReloadExternalConfig" && e.GetSource() == "manager" && e.GetCaller() != "" {
			reloads++
		}
	}
	if reloads != 2 {
		t.Errorf("%d reloads audited, want 2 (the refused one changed nothing)", reloads)
	}
}

// A pool on aws scales out under a bundle that fits no node — the cheapest
// instance type that takes it, and job why says why the cheaper one would
// not — and back in through the reaper once the bundle is gone, leaving no
// instance running.
func TestCloudPoolScalesOutAndIn(t *testing.T) {
	t.Parallel()
	c := cloudCluster(t, func(cfg *manager.Config) { cfg.DefaultIdleExpiry = 500 * time.Millisecond })
	cl, x := c.Client(), ctx(t)
	tmpl := progJob(t, "", runtimetest.Behaviour{}, nil)
	// 1.5 units: a c6i.large (2 vCPUs, 1 unit) would not take it; a
	// c6i.xlarge (4 vCPUs) would.
	if _, err := cl.CreateBundle(x, &norsk.Bundle{BundleId: "big", Pool: testcluster.AWSPool, Jobs: []*norsk.BundleJobSpec{{
		JobName: "channel", Requirements: &norsk.JobRequirements{RequiredCapacity: 1.5}, Job: tmpl,
	}}}); err != nil {
		t.Fatal(err)
	}
	in := running(c, "big.channel.0", "primary")
	node := c.WaitNodeState(in.GetNodeId(), norsk.NodeStateOnline)
	if node.GetProvider() != "aws" || node.GetCloud().GetInstanceType() != "c6i.xlarge" {
		t.Fatalf("the job runs on %v; want a new aws c6i.xlarge node", node)
	}
	// A bundle too big for any type of the pool: job why says so, type by
	// type.
	if _, err := cl.CreateBundle(x, &norsk.Bundle{BundleId: "huge", Pool: testcluster.AWSPool, Jobs: []*norsk.BundleJobSpec{{
		JobName: "channel", Requirements: &norsk.JobRequirements{RequiredCapacity: 6}, Job: tmpl,
	}}}); err != nil {
		t.Fatal(err)
	}
	why, err := cl.ExplainPlacement(x, "huge.channel.0", "", "")
	if err != nil {
		t.Fatal(err)
	}
	e := why.GetElastic()
	if why.GetNodeId() != "" || e == nil || e.GetInstanceType() != "" || len(e.GetCheaper()) != 3 || e.GetCheaper()[0].GetInstanceType() != "c6i.large" ||
		!strings.Contains(e.GetSummary(), "no instance type of elastic tier "+testcluster.AWSPool) {
		t.Fatalf("job why = %v", why)
	}
	if err := cl.DeleteBundle(x, "huge"); err != nil {
		t.Fatal(err)
	}
	if err := cl.DeleteBundle(x, "big"); err != nil {
		t.Fatal(err)
	}
	gone := c.WaitNodeState(node.GetNodeId(), norsk.NodeStateTerminated)
	if !strings.Contains(gone.GetStateReason(), "idle") {
		t.Errorf("reason %q: want the reaper's", gone.GetStateReason())
	}
	c.Eventually("no instance left running on the endpoint", func() bool { return len(c.Clouds.EC2.Running()) == 0 })
}

// norsk-ctl's cloud commands against a Manager with the local clouds:
// node create-aws / create-oci follow the node until it is online;
// instance-types, security-groups and reload-config answer.
func TestCloudCLI(t *testing.T) {
	t.Parallel()
	c := cloudCluster(t, nil)
	n := ctl{t: t, url: c.URL(), token: c.Token()}
	out := n.ok("node", "create-aws", "cli-aws", "--region", testcluster.AWSRegion, "--type", "c6i.large", "--pool", testcluster.AWSPool, "--security-group", "srt")
	for _, want := range []string{"Node cli-aws: aws instance i-", "c6i.large", "starting", "Node cli-aws is online (2 vCPUs)."} {
		if !strings.Contains(out, want) {
			t.Errorf("create-aws output lacks %q:\n%s", want, out)
		}
	}
	ad := c.Clouds.OCI.AvailabilityDomains(testcluster.OCIRegion)[2]
	out = n.ok("node", "create-oci", "cli-oci", "--availability-domain", ad, "--shape", "VM.Standard2.1", "-o", "json")
	if !strings.Contains(out, `"nodeId": "cli-oci"`) || !strings.Contains(out, `"NODE_STATE_ONLINE"`) {
		t.Errorf("create-oci -o json:\n%s", out)
	}
	if code, _, errOut := n.run("", "node", "create-aws", "--region", "us-east-1", "--type", "c6i.large"); code == 0 || !strings.Contains(errOut, "FAILED_PRECONDITION") {
		t.Errorf("create-aws in a region not run: exit %d, %s", code, errOut)
	}
	out = n.ok("instance-types", "c6i.xlarge", "--region", testcluster.AWSRegion)
	if !strings.Contains(out, "c6i.xlarge") || !strings.Contains(out, "Offered in eu-west-1: true") {
		t.Errorf("instance-types c6i.xlarge:\n%s", out)
	}
	if out := n.ok("instance-types", "--provider", "oci"); !strings.Contains(out, "cannot enumerate") {
		t.Errorf("instance-types --provider oci:\n%s", out)
	}
	if out := n.ok("instance-types", "nope.type"); !strings.Contains(out, "unknown") {
		t.Errorf("instance-types nope.type:\n%s", out)
	}
	out = n.ok("security-groups", "--region", testcluster.AWSRegion)
	if !strings.Contains(out, testcluster.BaseGroup) || !strings.Contains(out, "(base)") || !strings.Contains(out, "udp/5000-5100 from 0.0.0.0/0") {
		t.Errorf("security-groups:\n%s", out)
	}
	if out := n.ok("reload-config"); !strings.Contains(out, "no change") {
		t.Errorf("reload-config:\n%s", out)
	}
}

// An EC2 instance of the local endpoint boots its worker in a Docker
// container of its own (cloudsim.Docker, what `dev --clouds local` uses
// with a Docker engine): the worker reads its user data where cloud-init
// keeps it, registers, runs a job as a sibling container, and
// TerminateNode removes the instance's container and the job's.
func TestCloudInstanceBootsItsWorkerInAContainer(t *testing.T) {
	t.Parallel()
	cli := testimage.EnsureImage(t, testProgImage, runtimetest.TestProgPackage)
	testimage.EnsureImage(t, cloudsim.WorkerImage, cloudsim.WorkerPackage)
	c := testcluster.New(t, testcluster.Options{Clouds: true,
		CloudRunner: &cloudsim.Docker{Client: cli, Dir: filepath.Join(t.TempDir(), "machines")}})
	cl, x := c.Client(), ctx(t)
	c.Eventually("the instance-type cache to warm", func() bool {
		it, err := cl.DescribeInstanceType(x, "c6i.large", norsk.InstanceTypeOptions{})
		return err == nil && it != nil
	})
	n, err := cl.CreateAwsNode(x, norsk.AwsNode{Region: testcluster.AWSRegion, InstanceType: "c6i.large"})
	if err != nil {
		t.Fatal(err)
	}
	instance := "norsk-cloudsim-" + n.GetInstanceId()
	t.Cleanup(func() { _ = cli.ContainerRemove(context.Background(), instance, container.RemoveOptions{Force: true}) })
	node := c.WaitNodeState(n.GetNodeId(), norsk.NodeStateOnline)
	if node.GetProviderInstance() != n.GetInstanceId() {
		t.Fatalf("node %v", node)
	}
	if info, err := cli.ContainerInspect(x, instance); err != nil || !info.State.Running {
		t.Fatalf("the instance's container: %v, %v", info.State, err)
	}

	job := imageJob("on-ec2", runtimetest.Behaviour{})
	if _, err := cl.CreateJob(x, job); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.StartJob(x, "on-ec2", "primary", n.GetNodeId(), norsk.StartJobOptions{}); err != nil {
		t.Fatal(err)
	}
	c.WaitPhase("on-ec2", "primary", norsk.InstancePhaseRunning)
	jobContainers := func() int {
		cs, err := cli.ContainerList(x, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", runtime.LabelNode+"="+n.GetNodeId()))})
		if err != nil {
			t.Fatal(err)
		}
		return len(cs)
	}
	if jobContainers() != 1 {
		t.Fatalf("%d job containers of node %s, want 1", jobContainers(), n.GetNodeId())
	}

	if err := cl.TerminateNode(x, n.GetNodeId()); err != nil {
		t.Fatal(err)
	}
	c.WaitNodeState(n.GetNodeId(), norsk.NodeStateTerminated)
	c.Eventually("the instance's container gone", func() bool {
		_, err := cli.ContainerInspect(x, instance)
		return err != nil
	})
	c.Eventually("the job's container gone with its instance", func() bool { return jobContainers() == 0 })
}
