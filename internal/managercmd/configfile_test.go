package managercmd

import (
	"strings"
	"testing"
	"time"

	"github.com/norsk-go/norsk-manager/internal/manager"
)

func TestParseConfigFileCluster(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, yaml, err string
	}{
		{"three members and a witness", `
nodeName: m2
clusterNodes:
- {name: m1, raft: "m1:6792", api: "http://m1:6790"}
- {name: m2, raft: "m2:6792", api: "http://m2:6790"}
- {name: m3, raft: "m3:6792", api: "https://m3:6790"}
- {name: w1, raft: "w1:6792", api: "http://w1:6790", witness: true}
clusterState: existing
clusterSecretFile: /run/secrets/cluster
raftHeartbeatTimeout: 300ms
`, ""},
		{"a member without a name", "clusterNodes:\n- {raft: 'a:1', api: 'http://a:1'}\n", "name is required"},
		{"a member named twice", "clusterNodes:\n- {name: m1, raft: 'a:1', api: 'http://a:1'}\n- {name: m1, raft: 'b:1', api: 'http://b:1'}\n", "named twice"},
		{"no raft address", "clusterNodes:\n- {name: m1, api: 'http://a:1'}\n", "raft (host:port) is required"},
		{"a raft address without a port", "clusterNodes:\n- {name: m1, raft: 'a', api: 'http://a:1'}\n", `raft "a"`},
		{"an API that is not a URL", "clusterNodes:\n- {name: m1, raft: 'a:1', api: 'a:1'}\n", "not an http(s) URL"},
		{"both secrets", "clusterSecret: x\nclusterSecretFile: /y\n", "not both"},
		{"a misspelt key", "clusterNode: []\n", "clusterNode"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fc, err := ParseConfigFile([]byte(tc.yaml))
			if tc.err == "" {
				if err != nil {
					t.Fatal(err)
				}
				var cfg manager.Config
				fc.Apply(&cfg)
				if len(cfg.ClusterNodes) != 4 || !cfg.ClusterNodes[3].Witness || cfg.ClusterState != manager.ClusterStateExisting ||
					cfg.ClusterSecretFile != "/run/secrets/cluster" || cfg.RaftHeartbeatTimeout.String() != "300ms" {
					t.Errorf("applied config: %+v", cfg)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("error %v, want one containing %q", err, tc.err)
			}
		})
	}
}

// pools: ordered tiers per pool, applied to manager.Config; malformed ones are
// refused naming the key.
func TestParseConfigFilePools(t *testing.T) {
	t.Parallel()
	fc, err := ParseConfigFile([]byte("pools:\n  live: [cheap-a, cheap-b, premium]\n  gpu: [l4]\n"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg manager.Config
	fc.Apply(&cfg)
	if got := strings.Join(cfg.Pools["live"], ","); got != "cheap-a,cheap-b,premium" || len(cfg.Pools["gpu"]) != 1 {
		t.Errorf("pools applied: %v", cfg.Pools)
	}
	for _, tc := range []struct{ yaml, err string }{
		{"pools:\n  live: []\n", "pools.live: give at least one tier"},
		{"pools:\n  live: [a, '']\n", "pools.live[1]: empty tier"},
		{"pools:\n  live: [a, b, a]\n", `pools.live[2]: tier "a" is listed twice`},
	} {
		if _, err := ParseConfigFile([]byte(tc.yaml)); err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%q: %v, want an error containing %q", tc.yaml, err, tc.err)
		}
	}
}

// The provider, migration, spread and liveness sections of config.yaml.
func TestParseConfigFileAutoManager(t *testing.T) {
	t.Parallel()
	fc, err := ParseConfigFile([]byte(`
lostGrace: 5s
takeoverGrace: 1m
poolSpread: {live: rack}
providers:
  mock:
    hosts: [http://10.0.0.21:7101, http://10.0.0.22:7101]
    token: s3cret
    pools: [burst]
    vcpus: 8
    startTimeout: 90s
migration:
  proposeDeadline: 10s
  applyingDeadline: 3s
repair:
  maxInFlight: 4
  interval: 5m
`))
	if err != nil {
		t.Fatal(err)
	}
	var cfg manager.Config
	fc.Apply(&cfg)
	m := cfg.MockProvider
	if m == nil || len(m.Hosts) != 2 || m.Token != "s3cret" || m.Pools[0] != "burst" || m.VCPUs != 8 || m.StartTimeout.String() != "1m30s" {
		t.Fatalf("mock provider = %+v", m)
	}
	if cfg.PoolSpread["live"] != "rack" || cfg.LostGrace.String() != "5s" || cfg.TakeoverGrace.String() != "1m0s" {
		t.Errorf("spread %v, grace %s, takeover %s", cfg.PoolSpread, cfg.LostGrace, cfg.TakeoverGrace)
	}
	if d := cfg.MigrationDeadlines; d.Propose.String() != "10s" || d.Applying.String() != "3s" || d.Launching != 0 {
		t.Errorf("migration deadlines = %+v", d)
	}
	if r := cfg.Repair; r.Disabled || r.MaxInFlight != 4 || r.Interval.String() != "5m0s" {
		t.Errorf("repair = %+v", r)
	}
	for _, bad := range []struct{ yaml, err string }{
		{"providers: {mock: {hosts: []}}", "give at least one mock host"},
		{"providers: {mock: {hosts: [nope]}}", "is not http(s)://host:port"},
		{"poolSpread: {live: ''}", "poolSpread"},
		{"migration: {proposeDeadlin: 1s}", "proposeDeadlin"},
		{"repair: {maxInFlight: -1}", "repair.maxInFlight"},
		{"repair: {interval: 48h}", "repair.interval"},
		{"repair: {intervl: 1m}", "intervl"},
	} {
		if _, err := ParseConfigFile([]byte(bad.yaml)); err == nil || !strings.Contains(err.Error(), bad.err) {
			t.Errorf("%s: err = %v, want %q", bad.yaml, err, bad.err)
		}
	}
}

// The request bounds of config.yaml (issue 12, item 8).
func TestParseConfigFileRequestBounds(t *testing.T) {
	t.Parallel()
	fc, err := ParseConfigFile([]byte("requestBodyTimeout: 5s\nreadHeaderTimeout: 2s\nmaxUnauthenticatedPerSource: 4\n"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg manager.Config
	fc.Apply(&cfg)
	if cfg.RequestBodyTimeout != 5*time.Second || cfg.ReadHeaderTimeout != 2*time.Second || cfg.MaxUnauthenticatedPerSource != 4 {
		t.Errorf("applied: %v %v %d", cfg.RequestBodyTimeout, cfg.ReadHeaderTimeout, cfg.MaxUnauthenticatedPerSource)
	}
}

func TestParseConfigFileClouds(t *testing.T) {
	t.Parallel()
	const good = `
providers:
  clusterId: prod-eu-1
  overridesFile: /etc/norsk/overrides.yaml
  startTimeout: 8m
  reconcileInterval: 30s
  aws:
    profile: norsk
    regions:
      eu-west-1: {subnet: subnet-0a1b2c3d, baseSecurityGroups: [sg-0base]}
    pools:
      burst: {regions: [eu-west-1], instanceTypes: [c6i.large, c6i.xlarge], securityGroups: [srt]}
  oci:
    configFile: /etc/norsk/oci/config
    compartmentId: ocid1.compartment.oc1..aaaa
    regions:
      eu-frankfurt-1: {subnet: ocid1.subnet.oc1.eu-frankfurt-1.aaaa}
    pools:
      oci-burst: {regions: [eu-frankfurt-1], shapes: [VM.Standard.E4.Flex], ocpus: 2}
`
	fc, err := ParseConfigFile([]byte(good))
	if err != nil {
		t.Fatal(err)
	}
	var cfg manager.Config
	fc.Apply(&cfg)
	if cfg.ClusterID != "prod-eu-1" || cfg.OverridesFile != "/etc/norsk/overrides.yaml" || cfg.CloudStartTimeout.String() != "8m0s" ||
		cfg.ReconcileInterval.String() != "30s" || cfg.AWS.Pools["burst"].InstanceTypes[1] != "c6i.xlarge" ||
		cfg.AWS.Regions["eu-west-1"].BaseSecurityGroups[0] != "sg-0base" || cfg.OCI.Pools["oci-burst"].OCPUs != 2 {
		t.Errorf("applied config: %+v (aws %+v, oci %+v)", cfg, cfg.AWS, cfg.OCI)
	}
	for _, tc := range []struct{ name, yaml, err string }{
		{"bad cluster id", "providers:\n  clusterId: 'a b'\n  aws: {}\n", "providers.clusterId"},
		{"pool without types", "providers:\n  clusterId: c\n  aws:\n    pools:\n      p: {regions: [eu-west-1]}\n", "instanceTypes"},
		{"pool without regions", "providers:\n  clusterId: c\n  oci:\n    pools:\n      p: {shapes: [x]}\n", "regions"},
		{"bad base group", "providers:\n  clusterId: c\n  aws:\n    regions:\n      eu-west-1: {baseSecurityGroups: [default]}\n", "not a security group id"},
		{"bad endpoint", "providers:\n  clusterId: c\n  oci:\n    regions:\n      r: {endpoint: 'localhost:1'}\n", "not an http(s) URL"},
		{"misspelt key", "providers:\n  clusterId: c\n  aws: {region: x}\n", "region"},
	} {
		if _, err := ParseConfigFile([]byte(tc.yaml)); err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.err)
		}
	}
}

// config.yaml's event window settings are applied, and nonsense refused.
func TestParseConfigFileEvents(t *testing.T) {
	t.Parallel()
	tests := []struct {
		yaml      string
		buffer    int
		retention time.Duration
		maxBytes  int64
		err       string
	}{
		{"", 0, 0, 0, ""},
		{"eventBuffer: 1000\neventRetention: 10m\neventMaxMiB: 256\n", 1000, 10 * time.Minute, 256 << 20, ""},
		{"eventRetention: -1s\n", 0, -time.Second, 0, ""},
		{"eventBuffer: -1\n", 0, 0, 0, "eventBuffer"},
		{"eventMaxMiB: -5\n", 0, 0, 0, "eventMaxMiB"},
		{"eventRetention: soon\n", 0, 0, 0, "soon"},
	}
	for _, tt := range tests {
		fc, err := ParseConfigFile([]byte(tt.yaml))
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%q: %v, want an error naming %q", tt.yaml, err, tt.err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%q: %v", tt.yaml, err)
		}
		var applied manager.Config
		fc.Apply(&applied)
		if applied.EventBuffer != tt.buffer || applied.EventRetention != tt.retention || applied.EventMaxBytes != tt.maxBytes {
			t.Errorf("%q: applied %d, %s, %d; want %d, %s, %d", tt.yaml, applied.EventBuffer, applied.EventRetention, applied.EventMaxBytes, tt.buffer, tt.retention, tt.maxBytes)
		}
	}
}

// config.yaml's leaseTTL and heartbeatInterval are applied.
func TestParseConfigFileLease(t *testing.T) {
	t.Parallel()
	fc, err := ParseConfigFile([]byte("leaseTTL: 45s\nheartbeatInterval: 15s\n"))
	if err != nil {
		t.Fatal(err)
	}
	var applied manager.Config
	fc.Apply(&applied)
	if applied.LeaseTTL != 45*time.Second || applied.HeartbeatInterval != 15*time.Second {
		t.Fatalf("applied %s / %s, want 45s / 15s", applied.LeaseTTL, applied.HeartbeatInterval)
	}
}
