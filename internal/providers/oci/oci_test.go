package oci_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/norsk-go/norsk-manager/internal/cloudsim/ocisim"
	"github.com/norsk-go/norsk-manager/internal/providers"
	"github.com/norsk-go/norsk-manager/internal/providers/oci"
)

const region = "eu-frankfurt-1"

// testKey is one RSA key for every test of the package (making one takes
// a while).
var testKey = func() *rsa.PrivateKey {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		panic(err)
	}
	return k
}()

// endpoint starts an OCI endpoint and an oci provider pointed at it the
// way an operator would: an OCI config file and the region's endpoint
// override. With wrongKey the provider signs with another key.
func endpoint(t *testing.T, wrongKey bool) (*ocisim.Server, *oci.Provider) {
	t.Helper()
	sim, err := ocisim.Start(ocisim.Options{Key: testKey, Regions: map[string]ocisim.Region{region: {
		Shapes: []string{"VM.Standard2.1", "VM.Standard2.2", "VM.Standard.E4.Flex", "VM.Standard.A1.Flex"},
	}}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sim.Close() })
	dir := t.TempDir()
	conf, err := sim.WriteConfig(dir, "DEFAULT")
	if err != nil {
		t.Fatal(err)
	}
	if wrongKey {
		other, _ := rsa.GenerateKey(rand.Reader, 2048)
		imp, err := ocisim.Start(ocisim.Options{Key: other, Regions: map[string]ocisim.Region{region: {}}, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		_ = imp.Close()
		if conf, err = imp.WriteConfig(t.TempDir(), "DEFAULT"); err != nil {
			t.Fatal(err)
		}
	}
	cfg := oci.Config{ConfigFile: conf, Regions: map[string]oci.RegionConfig{region: {Endpoint: sim.URL(region), Subnet: "ocid1.subnet.oc1.eu-frankfurt-1.aaaa"}},
		RetryMaxAttempts: 4}
	cfg.RetryBaseDelay.Duration, cfg.RetryMaxBackoff.Duration = time.Millisecond, 5*time.Millisecond
	p, err := oci.New(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	o, err := providers.ParseOverrides([]byte("version: 1\noci:\n  regions:\n    eu-frankfurt-1:\n      workerImages:\n        \"1.0.0\": ocid1.image.oc1.eu-frankfurt-1.aaaaworker\n"))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.ApplyOverrides(o); err != nil {
		t.Fatal(err)
	}
	return sim, p
}

func spec(sim *ocisim.Server, node string) providers.LaunchSpec {
	return providers.LaunchSpec{
		NodeID: node, ClusterID: "test-cluster", ClientToken: providers.ClientToken("test-cluster", node, 0),
		Region: region, Zone: sim.AvailabilityDomains(region)[0], InstanceType: "VM.Standard2.2",
		Image: "ocid1.image.oc1.eu-frankfurt-1.aaaaworker", Tags: map[string]string{"pool": "burst"},
		UserData: providers.UserData{NodeID: node, ManagerURLs: []string{"http://127.0.0.1:6790"}, Token: "nrt_x"}.Encode(),
	}
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

// The provider drives OCI's calls through the SDK, every request signed:
// launch (idempotent in its opc-retry-token), list by cluster tag, tags,
// terminate, shapes per availability domain.
func TestLaunchListTagTerminate(t *testing.T) {
	t.Parallel()
	sim, p := endpoint(t, false)
	x := ctx(t)
	if list, err := p.List(x, "test-cluster"); err != nil || len(list) != 0 {
		t.Fatalf("List of none = %v, %v", list, err)
	}
	inst, err := p.Launch(x, spec(sim, "n1"))
	if err != nil {
		t.Fatal(err)
	}
	if inst.NodeID != "n1" || inst.ClusterID != "test-cluster" || inst.Type != "VM.Standard2.2" || inst.Zone != sim.AvailabilityDomains(region)[0] {
		t.Fatalf("launched %+v", inst)
	}
	again, err := p.Launch(x, spec(sim, "n1"))
	if err != nil || again.ID != inst.ID || len(sim.Instances()) != 1 {
		t.Fatalf("a repeated launch (same retry token): %v, %v, %d instances; want %s again", again.ID, err, len(sim.Instances()), inst.ID)
	}
	if ud, err := providers.DecodeUserData(sim.Instances()[0].UserData); err != nil || ud.NodeID != "n1" {
		t.Errorf("user data: %v", err)
	}
	if err := p.SetTags(x, providers.Ref{ID: inst.ID, Region: region}, map[string]string{"team": "live"}); err != nil {
		t.Fatal(err)
	}
	list, err := p.List(x, "test-cluster")
	if err != nil || len(list) != 1 || list[0].Tags["team"] != "live" || list[0].Tags["pool"] != "burst" || list[0].NodeID != "n1" {
		t.Fatalf("List = %+v, %v", list, err)
	}
	if err := p.Terminate(x, providers.Ref{ID: inst.ID, Region: region}); err != nil {
		t.Fatal(err)
	}
	if list, _ = p.List(x, "test-cluster"); len(list) != 1 || !list[0].Gone() {
		t.Fatalf("after terminate: %+v", list)
	}
	if err := p.Terminate(x, providers.Ref{ID: "ocid1.instance.oc1.eu-frankfurt-1.nosuch", Region: region}); err != nil {
		t.Errorf("terminating an unknown instance: %v, want nil", err)
	}
	types, locs, err := p.InstanceTypes(x, region)
	if err != nil {
		t.Fatal(err)
	}
	if len(locs) != 3 {
		t.Errorf("locations %v, want the region's three domains", locs)
	}
	for _, it := range types {
		switch it.Name {
		case "VM.Standard2.2":
			if it.VCPUs != 4 || len(it.Regions) != 3 || it.Architectures[0] != "x86_64" {
				t.Errorf("VM.Standard2.2 = %+v", it)
			}
		case "VM.Standard.A1.Flex":
			if it.VCPUs != 1 || it.Architectures[0] != "arm64" {
				t.Errorf("VM.Standard.A1.Flex = %+v", it)
			}
		}
	}
}

// 429 is retried with backoff, then ErrThrottled; "Out of host capacity"
// is ErrCapacity at once; a request signed with another key is refused.
func TestErrors(t *testing.T) {
	t.Parallel()
	sim, p := endpoint(t, false)
	x := ctx(t)
	sim.Throttle(2)
	if _, err := p.Launch(x, spec(sim, "t1")); err != nil {
		t.Fatalf("throttled twice, 4 attempts: %v", err)
	}
	sim.Throttle(10)
	if _, err := p.Launch(x, spec(sim, "t2")); !errors.Is(err, providers.ErrThrottled) {
		t.Fatalf("throttled past the attempts: %v", err)
	}
	sim.Throttle(0)
	before := sim.Calls("LaunchInstance")
	sim.NoCapacity("VM.Standard2.2", "", 1)
	if _, err := p.Launch(x, spec(sim, "t3")); !errors.Is(err, providers.ErrCapacity) {
		t.Fatalf("no capacity: %v, want ErrCapacity", err)
	}
	if n := sim.Calls("LaunchInstance") - before; n != 1 {
		t.Errorf("out of host capacity was tried %d times, want once", n)
	}
	sim2, bad := endpoint(t, true)
	if _, err := bad.Launch(x, spec(sim2, "t4")); !errors.Is(err, providers.ErrInvalid) {
		t.Fatalf("signed with another key: %v, want ErrInvalid (NotAuthenticated)", err)
	}
}
