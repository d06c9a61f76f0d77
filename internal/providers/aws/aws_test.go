package aws_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/norsk-go/norsk-manager/internal/cloudsim/ec2sim"
	"github.com/norsk-go/norsk-manager/internal/providers"
	"github.com/norsk-go/norsk-manager/internal/providers/aws"
)

const region = "eu-west-1"

// endpoint starts an EC2 endpoint and an aws provider pointed at it the way
// an operator points the SDK anywhere: a profile with endpoint_url.
func endpoint(t *testing.T, cfg aws.Config, secret string) (*ec2sim.Server, *aws.Provider) {
	t.Helper()
	sim, err := ec2sim.Start(ec2sim.Options{
		Regions: map[string]ec2sim.Region{region: {
			InstanceTypes: []string{"c6i.large", "c6i.xlarge", "c7g.xlarge"},
			SecurityGroups: []ec2sim.SecurityGroup{
				{ID: "sg-0base0000000000a", Name: "workers-base", VPC: "vpc-1", Ingress: []ec2sim.Rule{{Protocol: "tcp", FromPort: 6791, ToPort: 6791, CIDRs: []string{"10.0.0.0/16"}}}},
				{ID: "sg-0media000000000b", Name: "srt-in", VPC: "vpc-1", Tags: map[string]string{providers.TagWorkerSecurityGroup: "srt"},
					Ingress: []ec2sim.Rule{{Protocol: "udp", FromPort: 5000, ToPort: 5100, CIDRs: []string{"0.0.0.0/0"}, Description: "SRT"}}},
				{ID: "sg-0other00000000c", Name: "unrelated", VPC: "vpc-1"},
			},
		}},
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sim.Close() })
	conf, creds, err := sim.WriteProfile(t.TempDir(), "sim", region)
	if err != nil {
		t.Fatal(err)
	}
	if secret != "" {
		creds = writeCreds(t, secret)
	}
	cfg.Profile, cfg.SharedConfigFiles, cfg.SharedCredentialsFiles = "sim", []string{conf}, []string{creds}
	cfg.RetryBaseDelay.Duration, cfg.RetryMaxBackoff.Duration = time.Millisecond, 5*time.Millisecond
	cfg.Regions = map[string]aws.RegionConfig{region: {Subnet: "subnet-0a1b2c3d4e5f60718", BaseSecurityGroups: []string{"sg-0base0000000000a"}}}
	p, err := aws.New(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	o, err := providers.ParseOverrides([]byte("version: 1\naws:\n  regions:\n    eu-west-1:\n      workerImages:\n        \"1.0.0\": ami-0123456789abcdef0\n"))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.ApplyOverrides(o); err != nil {
		t.Fatal(err)
	}
	return sim, p
}

func writeCreds(t *testing.T, secret string) string {
	t.Helper()
	path := t.TempDir() + "/creds"
	if err := os.WriteFile(path, []byte("[sim]\naws_access_key_id = "+ec2sim.DefaultAccessKeyID+"\naws_secret_access_key = "+secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func spec(node string) providers.LaunchSpec {
	return providers.LaunchSpec{
		NodeID: node, ClusterID: "test-cluster", ClientToken: providers.ClientToken("test-cluster", node, 0),
		Region: region, InstanceType: "c6i.large", Image: "ami-0123456789abcdef0",
		SecurityGroups: []string{"sg-0base0000000000a"}, Tags: map[string]string{"pool": "burst"},
		UserData: providers.UserData{NodeID: node, ManagerURLs: []string{"http://127.0.0.1:6790"}, Token: "nrt_x"}.Encode(),
	}
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

// The provider drives EC2's calls through the SDK: launch (idempotent in
// its client token), list by cluster tag, tags, terminate.
func TestLaunchListTagTerminate(t *testing.T) {
	t.Parallel()
	sim, p := endpoint(t, aws.Config{}, "")
	x := ctx(t)
	inst, err := p.Launch(x, spec("n1"))
	if err != nil {
		t.Fatal(err)
	}
	if inst.ID == "" || inst.NodeID != "n1" || inst.ClusterID != "test-cluster" || inst.Type != "c6i.large" || inst.Zone == "" {
		t.Fatalf("launched %+v", inst)
	}
	again, err := p.Launch(x, spec("n1"))
	if err != nil || again.ID != inst.ID {
		t.Fatalf("a repeated launch (same client token): %v, %v; want instance %s again", again.ID, err, inst.ID)
	}
	if n := len(sim.Instances()); n != 1 {
		t.Fatalf("%d instances on the endpoint, want 1", n)
	}
	got := sim.Instances()[0]
	if got.Tags[providers.TagCluster] != "test-cluster" || got.Tags[providers.TagNode] != "n1" || got.Tags["pool"] != "burst" || got.Tags["Name"] != "norsk-n1" {
		t.Errorf("instance tags %v", got.Tags)
	}
	if ud, err := providers.DecodeUserData(got.UserData); err != nil || ud.NodeID != "n1" {
		t.Errorf("user data %q: %v", got.UserData, err)
	}
	if _, err := sim.Launch(region, "c6i.large", map[string]string{"other": "x"}, nil); err != nil {
		t.Fatal(err)
	}
	list, err := p.List(x, "test-cluster")
	if err != nil || len(list) != 1 || list[0].ID != inst.ID {
		t.Fatalf("List = %+v, %v; want only the cluster's instance", list, err)
	}
	if err := p.SetTags(x, providers.Ref{ID: inst.ID, Region: region}, map[string]string{"team": "live"}); err != nil {
		t.Fatal(err)
	}
	if err := p.Terminate(x, providers.Ref{ID: inst.ID, Region: region}); err != nil {
		t.Fatal(err)
	}
	list, _ = p.List(x, "test-cluster")
	if len(list) != 1 || list[0].Tags["team"] != "live" || !list[0].Gone() {
		t.Fatalf("after terminate: %+v", list)
	}
	if err := p.Terminate(x, providers.Ref{ID: "i-0000000000000dead", Region: region}); err != nil {
		t.Errorf("terminating an instance EC2 does not know: %v, want nil (gone already)", err)
	}
}

// Instance types and offerings come from DescribeInstanceTypes and
// DescribeInstanceTypeOfferings; worker security groups from
// DescribeSecurityGroups.
func TestCatalogAndSecurityGroups(t *testing.T) {
	t.Parallel()
	_, p := endpoint(t, aws.Config{}, "")
	x := ctx(t)
	types, locs, err := p.InstanceTypes(x, region)
	if err != nil {
		t.Fatal(err)
	}
	if len(locs) != 1 || locs[0] != region {
		t.Errorf("locations %v", locs)
	}
	by := map[string]providers.InstanceType{}
	for _, it := range types {
		by[it.Name] = it
	}
	if it := by["c6i.xlarge"]; it.VCPUs != 4 || it.MemoryBytes != 8192<<20 || len(it.Regions) != 1 || it.Architectures[0] != "x86_64" {
		t.Errorf("c6i.xlarge = %+v", it)
	}
	if it := by["c7g.xlarge"]; it.Architectures[0] != "arm64" {
		t.Errorf("c7g.xlarge = %+v", it)
	}
	if it, ok := by["c6i.4xlarge"]; !ok || len(it.Regions) != 0 {
		t.Errorf("c6i.4xlarge = %+v (known: %v); want known, offered nowhere here", it, ok)
	}
	groups, err := p.WorkerSecurityGroups(x, region)
	if err != nil {
		t.Fatal(err)
	}
	if len(groups) != 2 || !groups[0].Base || groups[0].ID != "sg-0base0000000000a" || groups[1].Label != "srt" ||
		groups[1].Ingress[0].Protocol != "udp" || groups[1].Ingress[0].FromPort != 5000 || groups[1].Ingress[0].CIDRs[0] != "0.0.0.0/0" {
		t.Fatalf("groups %+v", groups)
	}
}

// Throttling is retried with backoff by the SDK; past its attempts it is
// ErrThrottled. A capacity refusal is ErrCapacity at once; a bad signature
// ErrInvalid.
func TestErrors(t *testing.T) {
	t.Parallel()
	sim, p := endpoint(t, aws.Config{RetryMaxAttempts: 4}, "")
	x := ctx(t)
	sim.Throttle(3)
	if _, err := p.Launch(x, spec("t1")); err != nil {
		t.Fatalf("throttled 3 times, 4 attempts: %v", err)
	}
	sim.Throttle(10)
	_, err := p.Launch(x, spec("t2"))
	if !errors.Is(err, providers.ErrThrottled) {
		t.Fatalf("throttled past the attempts: %v, want ErrThrottled", err)
	}
	sim.Throttle(0)
	before := sim.Calls("RunInstances")
	sim.NoCapacity("c6i.large", "", 1)
	_, err = p.Launch(x, spec("t3"))
	var ce *providers.CloudError
	if !errors.Is(err, providers.ErrCapacity) || !errors.As(err, &ce) || ce.Code != "InsufficientInstanceCapacity" {
		t.Fatalf("no capacity: %v, want ErrCapacity with EC2's code", err)
	}
	if n := sim.Calls("RunInstances") - before; n != 1 {
		t.Errorf("a capacity refusal was tried %d times, want once (the next type is tried instead)", n)
	}
	_, bad := endpoint(t, aws.Config{}, "not-the-secret")
	if _, err := bad.Launch(x, spec("t4")); !errors.Is(err, providers.ErrInvalid) {
		t.Fatalf("a bad signature: %v, want ErrInvalid (AuthFailure)", err)
	}
}
