package managercmd

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"regexp"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/norsk-go/norsk-manager/internal/automanager"
	"github.com/norsk-go/norsk-manager/internal/manager"
	"github.com/norsk-go/norsk-manager/internal/providers"
	"github.com/norsk-go/norsk-manager/internal/providers/cloudconf"
	"github.com/norsk-go/norsk-manager/internal/providers/mock"
)

// FileConfig is the Manager's config.yaml. Every field is optional; flags
// given on the command line win over the file.
type FileConfig struct {
	NodeName     string   `json:"nodeName,omitempty"`
	DataDir      string   `json:"dataDir,omitempty"`
	Listen       string   `json:"listen,omitempty"`
	AdvertiseURL string   `json:"advertiseUrl,omitempty"`
	LostGrace    Duration `json:"lostGrace,omitempty"`
	// TakeoverGrace is the grace of nodes a new primary has not reached yet.
	TakeoverGrace Duration `json:"takeoverGrace,omitempty"`
	// LeaseTTL is the lease of lease-protected jobs (default 15s; at
	// least 3 × heartbeatInterval).
	LeaseTTL          Duration `json:"leaseTTL,omitempty"`
	HeartbeatInterval Duration `json:"heartbeatInterval,omitempty"`
	DefaultIdleExpiry Duration `json:"defaultIdleExpiry,omitempty"`
	SnapshotThreshold uint64   `json:"snapshotThreshold,omitempty"`
	// EventBuffer is the fewest events held for resuming event
	// subscribers; EventRetention how long every event is held beyond that
	// (default 5m; negative: no time window), within EventMaxMiB of their
	// estimated memory (default 512). Decision 0066.
	EventBuffer    int      `json:"eventBuffer,omitempty"`
	EventRetention Duration `json:"eventRetention,omitempty"`
	EventMaxMiB    int64    `json:"eventMaxMiB,omitempty"`
	// RequestBodyTimeout and ReadHeaderTimeout bound how long a request's
	// body and headers may take to arrive (defaults 30s and 10s);
	// MaxUnauthenticatedPerSource bounds the requests one address may have
	// waiting unauthenticated (default 16).
	RequestBodyTimeout          Duration `json:"requestBodyTimeout,omitempty"`
	ReadHeaderTimeout           Duration `json:"readHeaderTimeout,omitempty"`
	MaxUnauthenticatedPerSource int      `json:"maxUnauthenticatedPerSource,omitempty"`
	BackupDir                   string   `json:"backupDir,omitempty"`
	BackupInterval              Duration `json:"backupInterval,omitempty"`
	BackupRetain                int      `json:"backupRetain,omitempty"`
	// AccessReplicaKeys is the JWKS file of the access replica's trusted
	// keys (--access-replica-keys).
	AccessReplicaKeys string `json:"accessReplicaKeys,omitempty"`
	// TLS is auto, on or off; the rest are manager.Config's TLS fields.
	TLS          string   `json:"tls,omitempty"`
	TLSCertFile  string   `json:"tlsCertFile,omitempty"`
	TLSKeyFile   string   `json:"tlsKeyFile,omitempty"`
	TLSCAFile    string   `json:"tlsCaFile,omitempty"`
	TLSCAKeyFile string   `json:"tlsCaKeyFile,omitempty"`
	TLSDir       string   `json:"tlsDir,omitempty"`
	TLSHosts     []string `json:"tlsHosts,omitempty"`
	// ClusterNodes names the members of a cluster (this one included):
	// name, raft (host:port), api (URL) and witness. Empty: standalone.
	ClusterNodes []manager.ClusterNode `json:"clusterNodes,omitempty"`
	// ClusterState is new (the default: form the cluster) or existing (a
	// new member joining a running cluster that expects it).
	ClusterState string `json:"clusterState,omitempty"`
	// RaftListen and RaftAdvertise are raft's address and the one peers
	// reach it at (defaults: :6792 and this member's clusterNodes entry).
	RaftListen    string `json:"raftListen,omitempty"`
	RaftAdvertise string `json:"raftAdvertise,omitempty"`
	// ClusterSecret (or ClusterSecretFile, a file holding it) is the
	// members' shared secret.
	ClusterSecret     string `json:"clusterSecret,omitempty"`
	ClusterSecretFile string `json:"clusterSecretFile,omitempty"`
	// Witness: this member votes but holds no job state it acts on and
	// serves no API.
	Witness bool `json:"witness,omitempty"`
	// RaftHeartbeatTimeout and RaftElectionTimeout tune failover (default
	// 500ms each).
	RaftHeartbeatTimeout Duration `json:"raftHeartbeatTimeout,omitempty"`
	RaftElectionTimeout  Duration `json:"raftElectionTimeout,omitempty"`
	// Pools are placement's pools as ordered tiers, cheapest first: a
	// pool's jobs go to nodes of its first tier that has room, then the
	// next (pool → node pool tags).
	Pools map[string][]string `json:"pools,omitempty"`
	// PoolSpread spreads a pool's jobs evenly over a node attribute (pool
	// → tag key, e.g. "rack").
	PoolSpread map[string]string `json:"poolSpread,omitempty"`
	// Spares are the warm spares the AutoManager keeps per elastic pool
	// tier (tier → {count, warmFor, exclusive, instanceType}).
	Spares map[string]SpareFile `json:"spares,omitempty"`
	// Providers configures the providers of elastic nodes.
	Providers *ProvidersFile `json:"providers,omitempty"`
	// Migration bounds each phase of a migration.
	Migration *MigrationFile `json:"migration,omitempty"`
	// Repair bounds the AutoManager's repairs of degraded anti-affinity.
	Repair *RepairFile `json:"repair,omitempty"`
	// LogLevel is debug, info, warn or error; LogFormat text or json.
	LogLevel  string `json:"logLevel,omitempty"`
	LogFormat string `json:"logFormat,omitempty"`
}

// MaxSparesPerTier bounds an elastic tier's spares.
const MaxSparesPerTier = 64

// SpareFile is one elastic tier's spares in config.yaml: count empty nodes
// kept warm (their images prefetched) for the warmFor templates (bundle
// job names, template tags or job ids), exclusive to them when exclusive,
// of instanceType on a cloud tier ("" = the tier's cheapest).
type SpareFile struct {
	Count        int      `json:"count"`
	WarmFor      []string `json:"warmFor,omitempty"`
	Exclusive    bool     `json:"exclusive,omitempty"`
	InstanceType string   `json:"instanceType,omitempty"`
}

// ProvidersFile is config.yaml's providers section.
type ProvidersFile struct {
	// Mock is the mock provider: hosts (mock-host URLs), token, pools,
	// vcpus and startTimeout.
	Mock *MockProviderFile `json:"mock,omitempty"`
	// AWS and OCI are the cloud providers (see docs/operations.md).
	AWS *cloudconf.AWS `json:"aws,omitempty"`
	OCI *cloudconf.OCI `json:"oci,omitempty"`
	// CloudHypervisor is the cloud-hypervisor provider: the host agents and
	// the pools of microVM nodes on them.
	CloudHypervisor *cloudconf.CloudHypervisor `json:"cloudHypervisor,omitempty"`
	// ClusterID tags every cloud instance (default: the store's own
	// cluster id, made when the store was bootstrapped); when set, the same
	// on every member.
	ClusterID string `json:"clusterId,omitempty"`
	// OverridesFile is the overrides file (regions, worker images).
	OverridesFile string `json:"overridesFile,omitempty"`
	// StartTimeout is how long a cloud node may take to come online
	// (default 10m); ReconcileInterval how often instances are reconciled
	// (default 1m); ListGrace how long a new instance may be missing from
	// its cloud's listing (default 2m); InstanceTypeRefresh how often the
	// instance-type cache reloads (default 1h).
	StartTimeout        Duration `json:"startTimeout,omitempty"`
	ReconcileInterval   Duration `json:"reconcileInterval,omitempty"`
	ListGrace           Duration `json:"listGrace,omitempty"`
	InstanceTypeRefresh Duration `json:"instanceTypeRefresh,omitempty"`
}

// validate checks the cloud providers' sections and the overrides file
// (so that a bad one stops the Manager at start, as a bad config does).
func (p *ProvidersFile) validate() error {
	if p.AWS != nil {
		if err := p.AWS.Validate(); err != nil {
			return err
		}
	}
	if p.OCI != nil {
		if err := p.OCI.Validate(); err != nil {
			return err
		}
	}
	if p.CloudHypervisor != nil {
		if err := p.CloudHypervisor.Validate(); err != nil {
			return err
		}
	}
	if p.ClusterID != "" && !clusterIDRE.MatchString(p.ClusterID) {
		return fmt.Errorf("providers.clusterId: %q: use 1 to 63 letters, digits, '-' and '_'", p.ClusterID)
	}
	return nil
}

var clusterIDRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,62}$`)

// MockProviderFile is the mock provider's section (mock.Config, with its
// start timeout written as a duration).
type MockProviderFile struct {
	mock.Config
	StartTimeout Duration `json:"startTimeout,omitempty"`
}

// MigrationFile is config.yaml's migration section: each phase's deadline.
type MigrationFile struct {
	ProposeDeadline        Duration `json:"proposeDeadline,omitempty"`
	LaunchingDeadline      Duration `json:"launchingDeadline,omitempty"`
	TargetReadyDeadline    Duration `json:"awaitingTargetReadyDeadline,omitempty"`
	SourceStopDeadline     Duration `json:"awaitingSourceStopDeadline,omitempty"`
	ApplyingDeadline       Duration `json:"applyingDeadline,omitempty"`
	StoppingSourceDeadline Duration `json:"stoppingSourceDeadline,omitempty"`
	StartingTargetDeadline Duration `json:"startingTargetDeadline,omitempty"`
}

// RepairFile is config.yaml's repair section: how the AutoManager moves a
// backup that shares a failure domain with another replica once a node
// that complies has room (automanager.RepairPolicy).
type RepairFile struct {
	// Disabled turns repairs off.
	Disabled bool `json:"disabled,omitempty"`
	// MaxInFlight is the most repairs under way at once (default 2).
	MaxInFlight int `json:"maxInFlight,omitempty"`
	// Interval is the least time between two repairs of one bundle
	// (default 1m).
	Interval Duration `json:"interval,omitempty"`
}

// Duration is a time.Duration written as "30s", "5m" in the file (the
// providers' configuration files write theirs the same way).
type Duration = providers.Duration

// LoadConfigFile reads a config.yaml; unknown keys are an error naming them.
func LoadConfigFile(path string) (FileConfig, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return FileConfig{}, fmt.Errorf("config file: %w", err)
	}
	fc, err := ParseConfigFile(b)
	if err != nil {
		return fc, fmt.Errorf("config file %s: %w", path, err)
	}
	return fc, nil
}

// ParseConfigFile decodes a config.yaml's contents strictly.
func ParseConfigFile(b []byte) (FileConfig, error) {
	var fc FileConfig
	if err := yaml.UnmarshalStrict(b, &fc); err != nil {
		return FileConfig{}, err
	}
	if err := fc.validateCluster(); err != nil {
		return FileConfig{}, err
	}
	switch {
	case fc.EventBuffer < 0:
		return FileConfig{}, fmt.Errorf("eventBuffer: %d: give a count of events (0 = the default, 65536)", fc.EventBuffer)
	case fc.EventMaxMiB < 0 || fc.EventMaxMiB > 1<<20:
		return FileConfig{}, fmt.Errorf("eventMaxMiB: %d: give 1 to %d MiB (0 = the default, 512)", fc.EventMaxMiB, 1<<20)
	}
	for tier, sp := range fc.Spares {
		if tier == "" || sp.Count < 0 || sp.Count > MaxSparesPerTier {
			return FileConfig{}, fmt.Errorf("spares.%s.count: %d (want 0 to %d, for a named elastic tier)", tier, sp.Count, MaxSparesPerTier)
		}
	}
	if err := validatePools(fc.Pools); err != nil {
		return FileConfig{}, err
	}
	for pool, attr := range fc.PoolSpread {
		if pool == "" || attr == "" {
			return FileConfig{}, fmt.Errorf("poolSpread: %q: %q: name a pool and a node tag to spread over", pool, attr)
		}
	}
	if p := fc.Providers; p != nil && p.Mock != nil {
		if _, err := p.Mock.config().WithDefaults(); err != nil {
			return FileConfig{}, err
		}
	}
	if r := fc.Repair; r != nil {
		switch {
		case r.MaxInFlight < 0 || r.MaxInFlight > 1000:
			return FileConfig{}, fmt.Errorf("repair.maxInFlight: %d: give 1 to 1000 (0 = the default, 2)", r.MaxInFlight)
		case r.Interval.Duration < 0 || r.Interval.Duration > 24*time.Hour:
			return FileConfig{}, fmt.Errorf("repair.interval: %s: give 0 (the default, 1m) to 24h", r.Interval.Duration)
		}
	}
	if p := fc.Providers; p != nil {
		if err := p.validate(); err != nil {
			return FileConfig{}, err
		}
	}
	return fc, nil
}

// validatePools checks pools: named pools, each with at least one tier, no
// tier empty or named twice in a pool.
func validatePools(pools map[string][]string) error {
	for name, tiers := range pools {
		if strings.TrimSpace(name) == "" {
			return errors.New("pools: a pool has an empty name")
		}
		if len(tiers) == 0 {
			return fmt.Errorf("pools.%s: give at least one tier (node pool), cheapest first", name)
		}
		seen := map[string]bool{}
		for i, t := range tiers {
			switch {
			case strings.TrimSpace(t) == "":
				return fmt.Errorf("pools.%s[%d]: empty tier", name, i)
			case seen[t]:
				return fmt.Errorf("pools.%s[%d]: tier %q is listed twice", name, i, t)
			}
			seen[t] = true
		}
	}
	return nil
}

// validateCluster checks clusterNodes: every member named once, with a
// raft address and an API URL.
func (fc FileConfig) validateCluster() error {
	seen := map[string]bool{}
	for i, n := range fc.ClusterNodes {
		where := fmt.Sprintf("clusterNodes[%d]", i)
		switch {
		case n.Name == "":
			return fmt.Errorf("%s: name is required", where)
		case seen[n.Name]:
			return fmt.Errorf("%s: member %q is named twice", where, n.Name)
		case n.Raft == "":
			return fmt.Errorf("%s (%s): raft (host:port) is required", where, n.Name)
		case n.API == "":
			return fmt.Errorf("%s (%s): api (the member's API URL) is required", where, n.Name)
		}
		if _, _, err := net.SplitHostPort(n.Raft); err != nil {
			return fmt.Errorf("%s (%s): raft %q: %v", where, n.Name, n.Raft, err)
		}
		if u, err := url.Parse(n.API); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("%s (%s): api %q is not an http(s) URL", where, n.Name, n.API)
		}
		seen[n.Name] = true
	}
	if fc.ClusterSecret != "" && fc.ClusterSecretFile != "" {
		return fmt.Errorf("give clusterSecret or clusterSecretFile, not both")
	}
	return nil
}

// Apply copies the file's settings into cfg where cfg has none.
func (fc FileConfig) Apply(cfg *manager.Config) {
	set := func(dst *string, v string) {
		if *dst == "" {
			*dst = v
		}
	}
	setD := func(dst *time.Duration, v Duration) {
		if *dst == 0 {
			*dst = v.Duration
		}
	}
	set(&cfg.NodeName, fc.NodeName)
	set(&cfg.DataDir, fc.DataDir)
	set(&cfg.Listen, fc.Listen)
	set(&cfg.AdvertiseURL, fc.AdvertiseURL)
	setD(&cfg.LostGrace, fc.LostGrace)
	setD(&cfg.TakeoverGrace, fc.TakeoverGrace)
	setD(&cfg.LeaseTTL, fc.LeaseTTL)
	setD(&cfg.HeartbeatInterval, fc.HeartbeatInterval)
	setD(&cfg.DefaultIdleExpiry, fc.DefaultIdleExpiry)
	if cfg.SnapshotThreshold == 0 {
		cfg.SnapshotThreshold = fc.SnapshotThreshold
	}
	if cfg.EventBuffer == 0 {
		cfg.EventBuffer = fc.EventBuffer
	}
	setD(&cfg.EventRetention, fc.EventRetention)
	if cfg.EventMaxBytes == 0 {
		cfg.EventMaxBytes = fc.EventMaxMiB << 20
	}
	setD(&cfg.RequestBodyTimeout, fc.RequestBodyTimeout)
	setD(&cfg.ReadHeaderTimeout, fc.ReadHeaderTimeout)
	if cfg.MaxUnauthenticatedPerSource == 0 {
		cfg.MaxUnauthenticatedPerSource = fc.MaxUnauthenticatedPerSource
	}
	set(&cfg.BackupDir, fc.BackupDir)
	set(&cfg.TLS, fc.TLS)
	set(&cfg.TLSCertFile, fc.TLSCertFile)
	set(&cfg.TLSKeyFile, fc.TLSKeyFile)
	set(&cfg.TLSCAFile, fc.TLSCAFile)
	set(&cfg.TLSCAKeyFile, fc.TLSCAKeyFile)
	set(&cfg.TLSDir, fc.TLSDir)
	if len(cfg.TLSHosts) == 0 {
		cfg.TLSHosts = fc.TLSHosts
	}
	set(&cfg.AccessReplicaKeysFile, fc.AccessReplicaKeys)
	setD(&cfg.BackupInterval, fc.BackupInterval)
	if cfg.BackupRetain == 0 {
		cfg.BackupRetain = fc.BackupRetain
	}
	if len(cfg.ClusterNodes) == 0 {
		cfg.ClusterNodes = fc.ClusterNodes
	}
	set(&cfg.ClusterState, fc.ClusterState)
	set(&cfg.RaftListen, fc.RaftListen)
	set(&cfg.RaftAdvertise, fc.RaftAdvertise)
	set(&cfg.ClusterSecret, fc.ClusterSecret)
	set(&cfg.ClusterSecretFile, fc.ClusterSecretFile)
	cfg.Witness = cfg.Witness || fc.Witness
	setD(&cfg.RaftHeartbeatTimeout, fc.RaftHeartbeatTimeout)
	setD(&cfg.RaftElectionTimeout, fc.RaftElectionTimeout)
	if len(cfg.Pools) == 0 {
		cfg.Pools = fc.Pools
	}
	if len(cfg.PoolSpread) == 0 {
		cfg.PoolSpread = fc.PoolSpread
	}
	if len(cfg.Spares) == 0 && len(fc.Spares) > 0 {
		cfg.Spares = map[string]automanager.SpareSpec{}
		for tier, sp := range fc.Spares {
			cfg.Spares[tier] = automanager.SpareSpec{Count: sp.Count, WarmFor: sp.WarmFor, Exclusive: sp.Exclusive, InstanceType: sp.InstanceType}
		}
	}
	if m := fc.Migration; m != nil {
		d := &cfg.MigrationDeadlines
		setD(&d.Propose, m.ProposeDeadline)
		setD(&d.Launching, m.LaunchingDeadline)
		setD(&d.TargetReady, m.TargetReadyDeadline)
		setD(&d.SourceStop, m.SourceStopDeadline)
		setD(&d.Applying, m.ApplyingDeadline)
		setD(&d.StoppingSource, m.StoppingSourceDeadline)
		setD(&d.StartingTarget, m.StartingTargetDeadline)
	}
	if r := fc.Repair; r != nil {
		cfg.Repair.Disabled = cfg.Repair.Disabled || r.Disabled
		if cfg.Repair.MaxInFlight == 0 {
			cfg.Repair.MaxInFlight = r.MaxInFlight
		}
		setD(&cfg.Repair.Interval, r.Interval)
	}
	if cfg.MockProvider == nil && fc.Providers != nil && fc.Providers.Mock != nil {
		mc := fc.Providers.Mock.config()
		cfg.MockProvider = &mc
	}
	if p := fc.Providers; p != nil {
		if cfg.AWS == nil {
			cfg.AWS = p.AWS
		}
		if cfg.OCI == nil {
			cfg.OCI = p.OCI
		}
		if cfg.CloudHypervisor == nil {
			cfg.CloudHypervisor = p.CloudHypervisor
		}
		set(&cfg.ClusterID, p.ClusterID)
		set(&cfg.OverridesFile, p.OverridesFile)
		setD(&cfg.CloudStartTimeout, p.StartTimeout)
		setD(&cfg.ReconcileInterval, p.ReconcileInterval)
		setD(&cfg.ListGrace, p.ListGrace)
		setD(&cfg.InstanceTypeRefresh, p.InstanceTypeRefresh)
	}
}

func (m *MockProviderFile) config() mock.Config {
	c := m.Config
	c.Hosts = append([]string(nil), c.Hosts...)
	c.StartTimeout = m.StartTimeout.Duration
	return c
}
