// Package manager is the Manager daemon as a library: New opens the
// replicated store in a data directory, serves the Manager API (gRPC and
// Connect JSON on one port, with gRPC health and reflection), /healthz and
// /metrics, and runs the node controller that drives every worker. The
// norsk-manager binary, dev mode and every test cluster start it the same
// way, from a Config.
//
// The Manager service's handlers are internal/manager/api, one file per
// resource, reaching the member through api.Backend (backend.go); each
// write is one raft command through the store. What this package keeps is
// what composes the parts — New, boot, metrics, the HTTP server. A member's
// life in its cluster (terms, generations, recoveries, the write path, the
// Members service) is internal/cluster's cluster.Member; member.go hands it
// the primary's work (cluster.TermWork; decision 0052).
package manager

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"
	"connectrpc.com/grpcreflect"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/protobuf/types/known/timestamppb"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"

	"github.com/hashicorp/raft"
	"github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1/managerv1connect"
	"github.com/norsk-go/norsk-manager/internal/auth"
	"github.com/norsk-go/norsk-manager/internal/automanager"
	"github.com/norsk-go/norsk-manager/internal/clock"
	"github.com/norsk-go/norsk-manager/internal/cluster"
	"github.com/norsk-go/norsk-manager/internal/manager/api"
	"github.com/norsk-go/norsk-manager/internal/manager/eventwrite"
	"github.com/norsk-go/norsk-manager/internal/manager/intercept"
	"github.com/norsk-go/norsk-manager/internal/nodes"
	"github.com/norsk-go/norsk-manager/internal/providers"
	"github.com/norsk-go/norsk-manager/internal/providers/cloudconf"
	"github.com/norsk-go/norsk-manager/internal/providers/mock"
	"github.com/norsk-go/norsk-manager/internal/store"
	"github.com/norsk-go/norsk-manager/internal/store/state"
)

// DefaultPort is the Manager API's default port.
const DefaultPort = 6790

// Defaults of node liveness (decisions 0024, 0048): a node is lost once
// nothing has been heard from its worker for DefaultLostGrace — three
// heartbeats — whether its stream was reset or fell silent.
const (
	DefaultLostGrace         = 1500 * time.Millisecond
	DefaultTakeoverGrace     = 30 * time.Second
	DefaultHeartbeatInterval = 500 * time.Millisecond
)

// DefaultLeaseTTL is Config.LeaseTTL's default.
const DefaultLeaseTTL = 15 * time.Second

// MinLeaseHeartbeats is the least Config.LeaseTTL as a multiple of
// HeartbeatInterval: a worker stops its lease-protected instances two
// thirds of the TTL after its last acknowledged heartbeat, so with three
// intervals one lost heartbeat does not stop them.
const MinLeaseHeartbeats = 3

// Config configures a Manager member.
type Config struct {
	// NodeName names this member (its raft id). Default: the hostname.
	NodeName string
	// DataDir holds the store (required).
	DataDir string
	// Listen is the API address (default 127.0.0.1:6790; port 0 picks one).
	Listen string
	// Listener, when set, is the API listener to serve on instead of
	// opening Listen (a caller that must hold its port from before the
	// start, as a test cluster whose members know each other's addresses
	// does). New takes it over: it is closed with the Server, or when New
	// fails.
	Listener net.Listener
	// AdvertiseURL is the URL workers and clients reach this member at
	// (default: http:// + the listen address, https:// with TLS).
	AdvertiseURL string
	// DisableAutoManager keeps the AutoManager from running on this member
	// (tests that place by hand; an AutoManager run out of process).
	DisableAutoManager bool
	// RestartCeiling and RestartWindow: an instance that fails this many
	// times within the window ends its job with MarkJobFailed (defaults 5
	// and 10 min).
	RestartCeiling int
	RestartWindow  time.Duration
	// LeaseTTL is the lease of lease-protected jobs (default 15 s, or
	// MinLeaseHeartbeats × HeartbeatInterval if that is longer): a worker
	// cut off from every member for this long has stopped them, and only
	// then are they started elsewhere. It must be at least
	// MinLeaseHeartbeats × HeartbeatInterval.
	LeaseTTL time.Duration
	// LostGrace: how long a worker's stream may be gone before its node is
	// lost and the AutoManager moves its jobs (default 2 s: a killed
	// worker's node is recovered in about 2 s; decision 0024).
	LostGrace time.Duration
	// TakeoverGrace is the grace of a node a new primary has not yet had a
	// stream with (default 30 s): a failover does not declare the fleet lost
	// while it reconnects.
	TakeoverGrace time.Duration
	// HeartbeatInterval workers are told to use (default 1 s); a stream
	// silent for three intervals is dropped.
	HeartbeatInterval time.Duration
	// DefaultIdleExpiry is the daemon-wide idle expiry of empty elastic
	// nodes (default 10 min).
	DefaultIdleExpiry time.Duration
	// SnapshotThreshold: raft log entries between snapshots (default 8192).
	SnapshotThreshold uint64
	// Pools are placement's pools as ordered tiers, cheapest first (pool →
	// node pool tags); a pool not listed is a single tier of its own name.
	Pools map[string][]string
	// PoolSpread asks for the jobs of a pool to be spread evenly over a
	// node attribute (pool → tag key, e.g. "rack"), as Nomad's spread
	// stanza; a bundle's intraReplicaPlacement.spreadAttribute wins.
	PoolSpread map[string]string
	// Spares are the warm spares the AutoManager keeps per elastic tier
	// (config.yaml spares).
	Spares map[string]automanager.SpareSpec
	// MockProvider, when set, is the mock provider of elastic nodes
	// (providers.mock in config.yaml): placement creates nodes on its hosts
	// when nothing fits, and the empty-node reaper terminates them once
	// idle.
	MockProvider *mock.Config
	// ReaperInterval is how often the empty-node reaper and the providers'
	// start timeouts are checked (default 5 s).
	ReaperInterval time.Duration
	// AWS and OCI, when set, are the cloud providers (providers.aws and
	// providers.oci in config.yaml): CreateAwsNode / CreateOciNode launch
	// instances booting the worker, and pools may create nodes there.
	AWS *cloudconf.AWS
	OCI *cloudconf.OCI
	// CloudHypervisor, when set, is the cloud-hypervisor provider
	// (providers.cloudHypervisor): microVM nodes on host agents
	// (CreateCloudHypervisorNode), and pools that create them.
	CloudHypervisor *cloudconf.CloudHypervisor
	// Providers are more providers, already built (tests).
	Providers []providers.Provider
	// ClusterID tags every cloud instance (norsk:cluster): reconciliation
	// only ever touches instances carrying it. Default: the store's own
	// cluster id (made when the store was bootstrapped, the same on every
	// member); when set, the same on every member, unique among clusters
	// sharing an account.
	ClusterID string
	// OverridesFile is the overrides file: the regions the cloud providers
	// run and each region's worker images (ReloadExternalConfig re-reads
	// it).
	OverridesFile string
	// CloudStartTimeout is how long a cloud node may take to come online
	// before it is terminated (default 10 min).
	CloudStartTimeout time.Duration
	// ReconcileInterval is how often each provider's instances are listed
	// and reconciled with the node records (default 1 min).
	ReconcileInterval time.Duration
	// ListGrace is how long after its launch a node's instance may be
	// missing from its cloud's listing before the node is marked terminated
	// (default 2 min).
	ListGrace time.Duration
	// InstanceTypeRefresh is how often the instance-type cache is reloaded
	// (default 1 h).
	InstanceTypeRefresh time.Duration
	// ProviderBackoff bounds the Manager's retries of throttled cloud
	// calls, beyond the SDKs' own.
	ProviderBackoff providers.Backoff
	// MigrationDeadlines bound each phase of a migration (zero fields: the
	// seed's defaults — propose 30 s, launching 2 min, target ready 2 min,
	// source stop 30 s, applying 10 s, stopping source 30 s, starting
	// target 1 min).
	MigrationDeadlines automanager.MigrationDeadlines
	// Repair bounds the AutoManager's repairs of degraded anti-affinity
	// (zero fields: at most 2 at once, a bundle's repairs 1 min apart).
	Repair automanager.RepairPolicy
	// EventWriteTimeout is how long a write to an event subscriber may
	// block before its stream is cut (default 30 s; a write is cut
	// between once and one and a half times it: the deadline is set per
	// batch of events, decision 0062).
	EventWriteTimeout time.Duration
	// EventBuffer is the fewest events the event stream holds for resuming
	// subscribers, whatever their age (default 65536). EventRetention is
	// how long it holds every event beyond that (default 5 min; negative:
	// no time window, EventBuffer events only), within EventMaxBytes of
	// held events' estimated memory (default 512 MiB). Decision 0066.
	EventBuffer    int
	EventRetention time.Duration
	EventMaxBytes  int64
	// BackupDir holds backups (default <DataDir>/backups); BackupInterval
	// is how often a scheduled backup is taken (default 1h; negative turns
	// them off) and BackupRetain how many scheduled ones are kept
	// (default 24).
	BackupDir      string
	BackupInterval time.Duration
	BackupRetain   int
	// BootstrapToken is the admin token a store with no tokens is given at
	// its first start ("nmt_<id>.<secret>"); empty: a new one is made and
	// handed to OnBootstrapToken once (Server.BootstrapToken returns it too).
	BootstrapToken string
	// OnBootstrapToken, if set, is called once with the admin token this
	// member made for a store that had none, after the token is committed:
	// by the primary that made it, from its boot work (in a cluster, that may
	// be after New has returned, or never on a member that does not become
	// primary first). The binary prints it on its console; the store keeps
	// only its hash. It is not called for a preset BootstrapToken.
	OnBootstrapToken func(token string)
	// RateLimit is the calls per second each caller may make (burst: twice
	// as many); default 1000.
	RateLimit float64
	// MaxRequestBytes bounds a request message (default 8 MiB).
	MaxRequestBytes int
	// RequestBodyTimeout is how long a request's body may take to arrive
	// after its headers (default 30 s; negative: no bound). A stream's
	// response is not bounded by it. ReadHeaderTimeout bounds the headers
	// (default 10 s).
	RequestBodyTimeout time.Duration
	ReadHeaderTimeout  time.Duration
	// MaxUnauthenticatedPerSource bounds the requests one source address
	// may have waiting unauthenticated (default 16; gate.go).
	MaxUnauthenticatedPerSource int
	// TLS is "auto" (default: TLS unless the API listens on loopback),
	// "on" or "off" (cleartext; a loud warning on a non-loopback address).
	// With TLS the Manager signs each registering worker's key with the
	// cluster CA and dials its stream over mutual TLS. See tls.go and
	// docs/operations.md.
	TLS string
	// TLSCertFile and TLSKeyFile are the API's certificate (chain) and key
	// (bring your own; re-read when they change). Default: a certificate
	// the cluster CA issues for the listen and advertised hosts, the
	// hostname and TLSHosts, kept in TLSDir.
	TLSCertFile string
	TLSKeyFile  string
	// TLSCAFile and TLSCAKeyFile are the cluster CA (bring your own; both or
	// neither). Default: the CA in TLSDir, made at the first start.
	TLSCAFile    string
	TLSCAKeyFile string
	// TLSDir holds the automatic CA and API certificate (default
	// <DataDir>/tls).
	TLSDir string
	// TLSHosts are extra names and addresses the automatic API certificate
	// covers.
	TLSHosts []string
	// AccessReplicaKeysFile is a JWKS of the public keys norsk-mgr signs
	// access replicas with (manager/api/access_replica.go). Without it
	// PublishAccessReplica is refused with FAILED_PRECONDITION.
	AccessReplicaKeysFile string

	// ClusterNodes are the members of this Manager's cluster, this one
	// included (empty: a standalone member). ClusterState is "new" (the
	// default: a new store bootstraps the cluster with ClusterNodes) or
	// "existing" (a new store joins the running cluster; its primary must
	// expect it: AddClusterMember).
	ClusterNodes []ClusterNode
	ClusterState string
	// RaftListen is where raft listens for the other members (default
	// ":6792" in a cluster; unused standalone). RaftAdvertise is the
	// address they reach it at (default: ClusterNodes' entry for this
	// member, else the listen address).
	RaftListen    string
	RaftAdvertise string
	// ClusterSecret authenticates the members to each other (required in a
	// cluster; the same on every member). ClusterSecretFile, if set, is a
	// file holding it (read at start).
	ClusterSecret     string
	ClusterSecretFile string
	// Witness: this member votes but holds no job state it acts on, serves
	// no API and never stays primary.
	Witness bool
	// RaftHeartbeatTimeout and RaftElectionTimeout tune failover (default
	// 500 ms each).
	RaftHeartbeatTimeout time.Duration
	RaftElectionTimeout  time.Duration
	// RaftStreamLayer and MemberHTTPClient replace the raft transport's
	// TCP and the client members call each other with (tests inject
	// faults through them).
	RaftStreamLayer  func() (raft.StreamLayer, error)
	MemberHTTPClient *http.Client

	Clock  clock.Clock
	Logger *slog.Logger
}

func (c *Config) defaults() error {
	if c.DataDir == "" {
		return errors.New("manager: DataDir is required")
	}
	if c.NodeName == "" {
		h, err := os.Hostname()
		if err != nil || h == "" {
			h = "manager"
		}
		c.NodeName = h
	}
	if c.Listen == "" {
		c.Listen = fmt.Sprintf("127.0.0.1:%d", DefaultPort)
	}
	if c.LostGrace <= 0 {
		c.LostGrace = DefaultLostGrace
	}
	if c.TakeoverGrace <= 0 {
		c.TakeoverGrace = DefaultTakeoverGrace
	}
	if c.HeartbeatInterval <= 0 {
		c.HeartbeatInterval = DefaultHeartbeatInterval
	}
	switch minTTL := MinLeaseHeartbeats * c.HeartbeatInterval; {
	case c.LeaseTTL <= 0:
		c.LeaseTTL = max(DefaultLeaseTTL, minTTL)
	case c.LeaseTTL < minTTL:
		return fmt.Errorf("manager: leaseTTL %s is shorter than %d × heartbeatInterval (%s): a worker would stop its lease-protected jobs after missing a single heartbeat; set leaseTTL to at least %s, or shorten heartbeatInterval",
			c.LeaseTTL, MinLeaseHeartbeats, c.HeartbeatInterval, minTTL)
	}
	if c.DefaultIdleExpiry <= 0 {
		c.DefaultIdleExpiry = 10 * time.Minute
	}
	if c.ReaperInterval <= 0 {
		c.ReaperInterval = 5 * time.Second
	}
	if c.MockProvider != nil {
		mc, err := c.MockProvider.WithDefaults()
		if err != nil {
			return fmt.Errorf("manager: %w", err)
		}
		c.MockProvider = &mc
	}
	if err := c.checkSpares(); err != nil {
		return err
	}
	if c.Clock == nil {
		c.Clock = clock.Real{}
	}
	if c.BackupDir == "" {
		c.BackupDir = filepath.Join(c.DataDir, "backups")
	}
	if c.BackupInterval == 0 {
		c.BackupInterval = time.Hour
	}
	if c.BackupRetain <= 0 {
		c.BackupRetain = 24
	}
	if c.EventWriteTimeout <= 0 {
		c.EventWriteTimeout = eventwrite.DefaultTimeout
	}
	if c.RateLimit <= 0 {
		c.RateLimit = 1000
	}
	if c.MaxRequestBytes <= 0 {
		c.MaxRequestBytes = 8 << 20
	}
	if c.RequestBodyTimeout == 0 {
		c.RequestBodyTimeout = DefaultRequestBodyTimeout
	}
	if c.ReadHeaderTimeout <= 0 {
		c.ReadHeaderTimeout = DefaultReadHeaderTimeout
	}
	if c.MaxUnauthenticatedPerSource <= 0 {
		c.MaxUnauthenticatedPerSource = DefaultMaxUnauthenticatedPerSource
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	switch c.ClusterState {
	case "":
		c.ClusterState = ClusterStateNew
	case ClusterStateNew, ClusterStateExisting:
	default:
		return fmt.Errorf("manager: clusterState %q: want new or existing", c.ClusterState)
	}
	if c.ClusterSecret == "" && c.ClusterSecretFile != "" {
		b, err := os.ReadFile(c.ClusterSecretFile)
		if err != nil {
			return fmt.Errorf("manager: clusterSecretFile: %w", err)
		}
		c.ClusterSecret = strings.TrimSpace(string(b))
	}
	if c.clustered() {
		if _, ok := c.clusterNode(c.NodeName); !ok {
			return fmt.Errorf("manager: this member (%q) is not in clusterNodes; name every member there, this one included (set nodeName to its entry)", c.NodeName)
		}
		if len(c.ClusterSecret) < 16 {
			return errors.New("manager: a cluster member needs clusterSecret (or clusterSecretFile): at least 16 characters, the same on every member")
		}
		if c.RaftListen == "" && c.RaftStreamLayer == nil {
			c.RaftListen = fmt.Sprintf(":%d", DefaultRaftPort)
		}
		if c.RaftAdvertise == "" {
			if n, ok := c.clusterNode(c.NodeName); ok && n.Raft != "" {
				c.RaftAdvertise = n.Raft
			}
		}
	}
	return nil
}

// Server is a running Manager member.
type Server struct {
	cfg Config
	log *slog.Logger
	// base is log without its component=manager: the member's parts add
	// their own component to it.
	base *slog.Logger
	// nodesRef is the node controller of the current primary term (nil on
	// a follower).
	nodesRef    atomic.Pointer[nodes.Controller]
	nodeMetrics *nodes.Metrics
	amMetrics   *automanager.Metrics
	provMetrics *providers.Metrics
	// api is the Manager service's handler.
	api *api.Handler
	// migrator is the running AutoManager's migration surface (nil: none).
	migrator api.MigratorRef
	// fleet is the providers' side: node creation, and during a primary
	// term the reaper and reconciliation (providers.go).
	fleet *providers.Fleet
	// member is this member's life in its cluster: the store (which a
	// recovery replaces while the API keeps serving), the primary terms,
	// the write path and the other members (internal/cluster).
	member  *cluster.Member
	metrics *metrics
	// backups is the scheduled backups' last result and the newest
	// backup's time, for metrics.
	backups backupWatch
	ln      net.Listener
	http    *http.Server
	url     string
	lock    *dataDirLock
	boot    *managerv1.BootReport
	audit   auditCheck
	authz   *auth.Authorizer
	gate    *gate
	tls     *tlsState
	// accessKeys are the access replica's trusted keys (nil: none).
	accessKeys *api.AccessReplicaKeys
	// bootstrap is the admin token made at this first start ("" if none).
	mu        sync.Mutex
	bootstrap string

	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once
	err    error
}

// closeListener closes a Config.Listener New will not serve on.
func closeListener(ln net.Listener) {
	if ln != nil {
		_ = ln.Close()
	}
}

// New opens the store, starts serving and returns once the member is ready
// for calls: a standalone member once it leads (its boot work — schema
// migration, bootstrap token — done); a cluster member once its store is
// open (its peers elect a primary; writes forward to it). Close stops it.
func New(ctx context.Context, cfg Config) (*Server, error) {
	if err := cfg.defaults(); err != nil {
		closeListener(cfg.Listener)
		return nil, err
	}
	// base is what the member's parts (automanager, providers) log through,
	// each adding its own component; log is the member's own lines.
	base := cfg.Logger.With("member", cfg.NodeName)
	log := base.With("component", "manager")
	accessKeys, err := api.LoadAccessReplicaKeys(cfg.AccessReplicaKeysFile)
	if err != nil {
		closeListener(cfg.Listener)
		return nil, err
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		closeListener(cfg.Listener)
		return nil, fmt.Errorf("manager: data dir: %w", err)
	}
	lock, err := lockDataDir(cfg.DataDir)
	if err != nil {
		closeListener(cfg.Listener)
		return nil, err
	}
	if err := checkMemberName(cfg.DataDir, cfg.NodeName); err != nil {
		closeListener(cfg.Listener)
		_ = lock.Close()
		return nil, err
	}
	ln := cfg.Listener
	if ln == nil {
		if ln, err = net.Listen("tcp", cfg.Listen); err != nil {
			_ = lock.Close()
			return nil, fmt.Errorf("manager: listen on %s: %w", cfg.Listen, err)
		}
	}
	tlsSt, err := setupTLS(&cfg, ln.Addr(), log)
	if err != nil {
		_ = ln.Close()
		_ = lock.Close()
		return nil, err
	}
	if tlsSt.on {
		ln = tls.NewListener(ln, tlsSt.server)
	}
	m := newMetrics()
	s := &Server{cfg: cfg, log: log, base: base, metrics: m, ln: ln, lock: lock, tls: tlsSt, accessKeys: accessKeys,
		nodeMetrics: nodes.NewMetrics(m.reg),
		amMetrics:   automanager.NewMetrics(m.reg),
		provMetrics: providers.NewMetrics(m.reg),
		boot:        &managerv1.BootReport{BootedAt: timestamppb.New(cfg.Clock.Now())},
	}
	registerStoreMetrics(m.reg, s.st)
	registerEventMetrics(m.reg, s.st)
	m.reg.MustRegister(newHealthCollector(s))
	watchRaftPeers()
	s.url = cfg.AdvertiseURL
	if s.url == "" {
		s.url = tlsSt.scheme() + "://" + advertiseAddr(ln.Addr())
	}
	s.member = s.newMember()
	if err := s.newFleet(); err != nil {
		_ = ln.Close()
		_ = lock.Close()
		return nil, err
	}
	fail := func(err error) (*Server, error) {
		_ = s.member.Close()
		_ = ln.Close()
		_ = lock.Close()
		return nil, err
	}
	if err := s.member.Open(ctx); err != nil {
		return fail(err)
	}
	if s.authz, err = auth.NewAuthorizer(func() *state.Read { return s.st().State().Snapshot() },
		auth.Options{Clock: cfg.Clock, RateLimit: cfg.RateLimit, ClusterSecret: cfg.ClusterSecret, Witness: cfg.Witness}); err != nil {
		return fail(err)
	}
	s.authz.CatchUp = s.member.Linearize

	mux := http.NewServeMux()
	s.api = api.New(api.Config{
		Backend: backend{s}, Cluster: s.member.RPCs(), Clock: cfg.Clock, Log: log,
		NodeName: cfg.NodeName, DataDir: cfg.DataDir, BackupDir: cfg.BackupDir, Clustered: cfg.clustered(),
		DefaultIdleExpiry: cfg.DefaultIdleExpiry, EventWriteTimeout: cfg.EventWriteTimeout,
		HeartbeatInterval: cfg.HeartbeatInterval, LeaseTTL: cfg.LeaseTTL, Pools: cfg.Pools, CloudHypervisor: cfg.CloudHypervisor,
		CA: tlsSt.ca, AccessKeys: accessKeys, Migrator: &s.migrator, Boot: s.boot,
		Metrics: api.EventMetrics{Sent: m.eventsSent, Subscribers: m.eventSubscribers, Drops: m.eventDrops, Resyncs: m.eventResyncs},
	})
	// The gate authenticates each call from its headers before its body
	// is read (gate.go); the interceptors then check the decoded request's
	// field bounds (intercept/bounds.go) before the handler runs.
	gt := newGate(s.authz, cfg, m)
	s.gate = gt
	interceptors := connect.WithInterceptors(s.authz.Interceptor(), m.interceptor(), intercept.BoundsInterceptor(), intercept.AuditInterceptor(), s.member.ConsistencyInterceptor())
	// Compress only messages worth it: connect gzips every message a client
	// accepts gzip for, and resetting a gzip writer costs far more than
	// sending a small message (job views, events and hashes) as it is.
	apiOpts := func(maxBytes int) []connect.HandlerOption {
		return append([]connect.HandlerOption{interceptors, connect.WithCompressMinBytes(1024), connect.WithReadMaxBytes(maxBytes), intercept.ProtoCodec()}, intercept.StrictJSONCodecs()...)
	}
	path, managerAPI := managerv1connect.NewManagerHandler(s.api, apiOpts(cfg.MaxRequestBytes)...)
	mux.Handle(path, gt.api(managerAPI))
	// The event stream's writes are batched (decision 0062).
	mux.Handle(managerv1connect.ManagerEventStreamProcedure, gt.api(eventwrite.Batching(managerAPI)))
	mpath, members := managerv1connect.NewMembersHandler(s.member.Service(), apiOpts(cfg.MaxRequestBytes+(1<<20))...)
	mux.Handle(mpath, gt.api(members))
	public := func(path string, h http.Handler) { mux.Handle(path, gt.public(h)) }
	publicOpts := connect.WithReadMaxBytes(maxPublicRequestBytes)
	checker := grpchealth.NewStaticChecker(managerv1connect.ManagerName)
	public(grpchealth.NewHandler(checker, publicOpts))
	reflector := grpcreflect.NewStaticReflector(managerv1connect.ManagerName)
	public(grpcreflect.NewHandlerV1(reflector, publicOpts))
	public(grpcreflect.NewHandlerV1Alpha(reflector, publicOpts))
	public("GET /healthz", http.HandlerFunc(s.healthz))
	public("GET /metrics", promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg}))

	var protocols http.Protocols
	protocols.SetHTTP1(true)
	protocols.SetHTTP2(true) // over TLS, by ALPN
	protocols.SetUnencryptedHTTP2(true)
	s.http = &http.Server{
		Handler:           mux,
		Protocols:         &protocols,
		ReadHeaderTimeout: cfg.ReadHeaderTimeout,
		// An idle keep-alive connection is closed (a stream in progress is
		// not idle).
		IdleTimeout:    2 * time.Minute,
		MaxHeaderBytes: maxHeaderBytes,
		HTTP2:          &http.HTTP2Config{PingTimeout: 15 * time.Second, SendPingTimeout: 30 * time.Second},
		ErrorLog:       slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelWarn),
	}
	runCtx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	s.wg.Add(3)
	go func() {
		defer s.wg.Done()
		s.fleet.Registry().Run(runCtx) // the instance-type cache, on every member
	}()
	go func() {
		defer s.wg.Done()
		if err := s.http.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("API server stopped", "err", err)
		}
	}()
	go func() {
		defer s.wg.Done()
		s.member.Run(runCtx)
	}()
	if !cfg.clustered() {
		// A standalone member leads at once; wait for its boot work.
		select {
		case <-s.member.Ready():
		case <-ctx.Done():
			_ = s.Close()
			return nil, fmt.Errorf("manager: waiting for the first primary term: %w", ctx.Err())
		}
		if err := s.member.ReadyErr(); err != nil {
			_ = s.Close()
			return nil, err
		}
	}
	log.Info("manager ready", "api", s.url, "data_dir", cfg.DataDir, "index", s.st().State().Snapshot().Index(),
		"cluster", cfg.clustered(), "witness", cfg.Witness)
	return s, nil
}

// advertiseAddr is the host:port others reach a listener at: its own
// address, or — listening on every address — the hostname.
func advertiseAddr(a net.Addr) string {
	tcp, ok := a.(*net.TCPAddr)
	if !ok || !tcp.IP.IsUnspecified() {
		return a.String()
	}
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "localhost"
	}
	return net.JoinHostPort(host, strconv.Itoa(tcp.Port))
}

// URL is where the API is served.
func (s *Server) URL() string { return s.url }

// Addr is the API listener's address.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// BootstrapToken is the admin token this start made for a store that had
// none ("" otherwise). Show it once; the store keeps only its hash.
func (s *Server) BootstrapToken() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bootstrap
}

// NodeName is this member's name.
func (s *Server) NodeName() string { return s.cfg.NodeName }

// Store is the member's store (tests and tools read it).
func (s *Server) Store() *store.Store { return s.st() }

// st is the member's current store.
func (s *Server) st() *store.Store { return s.member.Store() }

// IsPrimaryReady reports whether this member is the primary and has
// finished taking over (a standalone member: it leads).
func (s *Server) IsPrimaryReady() bool { return s.member.IsPrimaryReady() }

// controller is the node controller of the current primary term (nil on a
// follower).
func (s *Server) controller() *nodes.Controller { return s.nodesRef.Load() }

func (s *Server) healthz(w http.ResponseWriter, r *http.Request) {
	st := map[string]any{
		"status":  "ok",
		"member":  s.cfg.NodeName,
		"primary": s.st().IsLeader(),
		"index":   s.st().State().Snapshot().Index(),
	}
	code := http.StatusOK
	if leader, _ := s.st().Leader(); leader == "" {
		st["status"] = "no primary"
		code = http.StatusServiceUnavailable
	} else {
		st["primaryMember"] = leader
	}
	// A member that cannot take writes because of its own store says why.
	if status, detail := storeHealth(s.st()); status != "" {
		st["status"] = status
		st["store"] = detail
		code = http.StatusServiceUnavailable
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(st)
}

// Close stops serving (giving calls in flight a few seconds), stops the node
// controller and closes the store. Workers and their instances are not
// touched: they keep running and are adopted when the Manager comes back.
func (s *Server) Close() error {
	s.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		// A primary stopping on purpose hands its role over first; the
		// primary's work (AutoManager, node controller, backups) stops
		// while the API still answers it.
		s.member.Stop(ctx)
		// Event streams end when the store's broker closes; stop them first
		// so Shutdown does not wait for them.
		s.st().Broker().Close()
		if err := s.http.Shutdown(ctx); err != nil {
			_ = s.http.Close()
		}
		s.cancel()
		s.wg.Wait()
		s.err = s.member.Close()
		_ = s.lock.Close()
		s.log.Info("manager stopped")
	})
	return s.err
}
