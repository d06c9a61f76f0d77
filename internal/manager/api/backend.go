package api

import (
	"context"
	"log/slog"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1/managerv1connect"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/internal/automanager"
	"github.com/norsk-go/norsk-manager/internal/clock"
	"github.com/norsk-go/norsk-manager/internal/nodes"
	"github.com/norsk-go/norsk-manager/internal/pki"
	"github.com/norsk-go/norsk-manager/internal/providers"
	"github.com/norsk-go/norsk-manager/internal/providers/cloudconf"
	"github.com/norsk-go/norsk-manager/internal/providers/mock"
	"github.com/norsk-go/norsk-manager/internal/store"
	"github.com/norsk-go/norsk-manager/internal/store/state"
	"github.com/norsk-go/norsk-manager/pkg/placement"
)

// Backend is what the handlers need of the member that serves them: the
// one write path, the store to read, the parts a primary term runs, and
// the other members to pass calls to. It changes as the member's role
// does (a follower has no node controller).
type Backend interface {
	// Apply commits a stamped command: on the primary directly, from a
	// follower by forwarding it to the primary. It returns once this
	// member has applied it.
	Apply(ctx context.Context, cmd *storev1.Command) (state.Result, error)
	// Store is the member's current store.
	Store() *store.Store
	// Controller is the node controller of the current primary term (nil
	// on a follower).
	Controller() *nodes.Controller
	// Fleet is the providers' side: node creation and the instance-type
	// cache.
	Fleet() *providers.Fleet
	// MockProvider is the mock provider of elastic nodes (nil: none).
	MockProvider() *mock.Provider
	// PlacementConfig and ElasticTiers are placement's pools and the
	// elastic tiers, as the AutoManager uses them.
	PlacementConfig() placement.Config
	ElasticTiers() []automanager.ElasticTier
	// CAFingerprint is the cluster CA's fingerprint ("" without TLS).
	CAFingerprint() string
	// AuditVerdict is whether the audit chain verified at boot, and why not.
	AuditVerdict() (verified bool, detail string)
	// MemberAPI is a member's API URL ("" if unknown); ManagerClient is a
	// client of the Manager service at url.
	MemberAPI(name string) string
	ManagerClient(url string) managerv1connect.ManagerClient
}

// ClusterRPCs are the Manager service's cluster-membership calls; the
// member's cluster side implements them.
type ClusterRPCs interface {
	AddClusterMember(context.Context, *connect.Request[managerv1.AddClusterMemberRequest]) (*connect.Response[managerv1.AddClusterMemberResponse], error)
	RemoveClusterMember(context.Context, *connect.Request[managerv1.RemoveClusterMemberRequest]) (*connect.Response[managerv1.RemoveClusterMemberResponse], error)
	ForceStandalone(context.Context, *connect.Request[managerv1.ForceStandaloneRequest]) (*connect.Response[managerv1.ForceStandaloneResponse], error)
	LeaveQuorum(context.Context, *connect.Request[managerv1.LeaveQuorumRequest]) (*connect.Response[managerv1.LeaveQuorumResponse], error)
	AnnounceControlPlane(context.Context, *connect.Request[managerv1.AnnounceControlPlaneRequest]) (*connect.Response[managerv1.AnnounceControlPlaneResponse], error)
	GetClusterEvents(context.Context, *connect.Request[managerv1.GetClusterEventsRequest]) (*connect.Response[managerv1.GetClusterEventsResponse], error)
	GetClusterStatus(context.Context, *connect.Request[managerv1.GetClusterStatusRequest]) (*connect.Response[managerv1.ClusterStatus], error)
}

// Config is what a Handler is built from: the member's backend and its
// settings and parts that do not change while it runs.
type Config struct {
	Backend Backend
	Cluster ClusterRPCs
	Clock   clock.Clock
	Log     *slog.Logger
	// NodeName, DataDir and BackupDir are the member's name and
	// directories; Clustered says it is one of a cluster.
	NodeName  string
	DataDir   string
	BackupDir string
	Clustered bool
	// The member's defaults the handlers report or apply (manager.Config).
	DefaultIdleExpiry time.Duration
	EventWriteTimeout time.Duration
	HeartbeatInterval time.Duration
	LeaseTTL          time.Duration
	Pools             map[string][]string
	CloudHypervisor   *cloudconf.CloudHypervisor
	// CA signs registering workers' and host agents' CSRs (nil: no TLS).
	CA *pki.CA
	// AccessKeys are the access replica's trusted keys (nil: none).
	AccessKeys *AccessReplicaKeys
	// Migrator is the running AutoManager's migration surface.
	Migrator *MigratorRef
	// Boot is this start's boot report.
	Boot *managerv1.BootReport
	// Metrics count the event stream's traffic.
	Metrics EventMetrics
}

// EventMetrics are the event stream's metrics: events sent, live
// subscribers, subscribers cut off for falling behind, and subscribers
// that asked to resume after an index whose events were no longer held
// (sent a snapshot instead).
type EventMetrics struct {
	Sent        prometheus.Counter
	Subscribers prometheus.Gauge
	Drops       prometheus.Counter
	Resyncs     prometheus.Counter
}
