package intercept

import (
	"context"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/norsk-go/norsk-manager/internal/apibounds"
	"github.com/norsk-go/norsk-manager/internal/providers"
	"github.com/norsk-go/norsk-manager/internal/rpcerr"
	"github.com/norsk-go/norsk-manager/internal/store/state"
	"github.com/norsk-go/norsk-manager/pkg/accessreplica"
	"github.com/norsk-go/norsk-manager/pkg/jobspec"
)

// Bounds of the API's numbers that have no other home.
const (
	// MaxIdleExpiry is the longest idle expiry SetNodeIdleExpiry takes.
	MaxIdleExpiry = providers.MaxIdleExpiry
	// MaxTokenTTL is the longest API token lifetime CreateToken takes.
	MaxTokenTTL = 100 * 365 * 24 * time.Hour
	// MaxAnnounceInterval is the longest announcement interval.
	MaxAnnounceInterval = 24 * time.Hour
	// MaxEpochMs is the last millisecond of year 9999: audit times are ms
	// since the epoch up to it.
	MaxEpochMs = 253402300799999
	// MaxShmSizeBytes bounds a service's /dev/shm (1 TiB).
	MaxShmSizeBytes = 1 << 40
	// MaxSecretLen bounds tokens and secrets a caller presents.
	MaxSecretLen = 1024
)

// MinTierSecretLen is the shortest tier secret the Manager takes: node
// tokens are HMACs under it, so it needs the entropy of an HMAC key.
const MinTierSecretLen = 32

// msOf is a duration in ms, as a bound.
func msOf(d time.Duration) float64 { return float64(d.Milliseconds()) }

// requestBounds are the bounds of every field of every request the Manager
// and Members services take (docs/api.md, "Field bounds", is this table).
// The boundsInterceptor applies them before any handler runs; the handlers
// and pkg/jobspec check what needs meaning (an id's form, a job's
// services, whether a thing exists). Every string must be valid UTF-8.
var requestBounds = &apibounds.Table{
	Defaults: apibounds.Defaults{
		String:   apibounds.Str(1024),
		Bytes:    apibounds.Bytes(64 << 10),
		Items:    1024,
		MapItems: 256,
		MapKey:   apibounds.Str(256),
		MapValue: apibounds.Str(1024),
	},
	Names: map[protoreflect.Name]apibounds.Rule{
		"job_id":                   apibounds.Str(jobspec.MaxJobIDLen),
		"source_job_id":            apibounds.Str(jobspec.MaxJobIDLen),
		"after_job_id":             apibounds.Str(jobspec.MaxJobIDLen),
		"node_id":                  apibounds.Str(jobspec.MaxJobIDLen),
		"target_node_id":           apibounds.Str(jobspec.MaxJobIDLen),
		"source_node_id":           apibounds.Str(jobspec.MaxJobIDLen),
		"failed_node_id":           apibounds.Str(jobspec.MaxJobIDLen),
		"requested_target_node_id": apibounds.Str(jobspec.MaxJobIDLen),
		"node_name":                apibounds.Str(jobspec.MaxJobIDLen),
		"role":                     apibounds.Str(jobspec.MaxRoleLen),
		"source_role":              apibounds.Str(jobspec.MaxRoleLen),
		"target_role":              apibounds.Str(jobspec.MaxRoleLen),
		"runtime_role":             apibounds.Str(jobspec.MaxRoleLen),
		"migration_id":             apibounds.Str(jobspec.MaxJobIDLen),
		"bundle_id":                apibounds.Str(jobspec.MaxBundleIDLen),
		"job_name":                 apibounds.Str(jobspec.MaxBundleIDLen),
		"pool":                     apibounds.Str(jobspec.MaxTagValueLen),
		"by":                       apibounds.Str(256),
		"reason":                   apibounds.TextOf(jobspec.MaxReasonLen),
		"tags":                     apibounds.Map(jobspec.MaxTags, apibounds.Str(jobspec.MaxTagKeyLen), apibounds.Str(jobspec.MaxTagValueLen)),
		"namespace":                apibounds.Arg(jobspec.MaxKVNamespaceLen),
		"grace_ms":                 apibounds.Between(0, jobspec.MaxGraceMs),
	},
	Fields: fieldBounds(map[string]apibounds.Rule{
		"HelloRequest.protocol_version": apibounds.Str(32),
		"HelloRequest.client_label":     apibounds.Str(256),

		// Jobs (bundles carry them too).
		"Job.description":                         apibounds.TextOf(jobspec.MaxDescriptionLen),
		"Job.services":                            apibounds.Rule{}.Items(jobspec.MaxServices),
		"Job.volumes":                             apibounds.Str(63).Items(jobspec.MaxVolumes),
		"Service.name":                            apibounds.Str(jobspec.MaxServiceNameLen),
		"Service.image":                           apibounds.Str(1024),
		"Service.command":                         apibounds.Arg(jobspec.MaxArgBytes).Items(jobspec.MaxArgs).Because("and command + args at most 256 KiB together"),
		"Service.args":                            apibounds.Arg(jobspec.MaxArgBytes).Items(jobspec.MaxArgs),
		"Service.env":                             apibounds.Map(jobspec.MaxEnv, apibounds.Str(256), apibounds.Arg(jobspec.MaxEnvValueLen)).Because("at most 1 MiB together"),
		"Service.ports":                           apibounds.Rule{}.Items(jobspec.MaxPorts),
		"Service.volume_mounts":                   apibounds.Rule{}.Items(jobspec.MaxVolumes),
		"Service.depends_on":                      apibounds.Str(jobspec.MaxServiceNameLen).Items(jobspec.MaxServices),
		"Service.working_dir":                     apibounds.Str(jobspec.MaxPathLen),
		"Service.shm_size_bytes":                  apibounds.Between(0, MaxShmSizeBytes),
		"Service.cpu_set":                         apibounds.Rule{}.Items(4096),
		"PortMapping.container_port":              apibounds.Between(0, 65535),
		"PortMapping.specific":                    apibounds.Between(0, 65535),
		"PortMapping.host_address":                apibounds.Str(64),
		"PortRange.min_port":                      apibounds.Between(0, 65535),
		"PortRange.max_port":                      apibounds.Between(0, 65535),
		"VolumeMount.source":                      apibounds.Str(jobspec.MaxPathLen),
		"VolumeMount.container_path":              apibounds.Str(jobspec.MaxPathLen),
		"JobRequirements.required_gpu_model":      apibounds.Str(256),
		"JobRequirements.required_capabilities":   apibounds.Rule{}.Items(64),
		"JobRequirements.priority_band":           apibounds.Str(jobspec.MaxPriorityBandLen),
		"CapabilityRequirement.name":              apibounds.Str(128),
		"JobSearchRequest.filters":                apibounds.Rule{}.Items(jobspec.MaxFilters),
		"TagFilter.tag_name":                      apibounds.Str(jobspec.MaxTagKeyLen),
		"StartJobsRequest.starts":                 apibounds.Rule{}.Items(jobspec.MaxStartJobs),
		"StartJobOptions.migration_initial_state": apibounds.Bytes(state.MaxMigrationPayload),
		"PlacementEvent.kind":                     apibounds.Str(64),
		"PlacementEvent.summary":                  apibounds.TextOf(16 << 10),
		"PlacementEvent.failure":                  apibounds.TextOf(16 << 10),
		"PlacementEvent.degradations":             apibounds.Rule{}.Items(64),

		// Nodes and workers.
		"ClusterMemberRegisterRequest.token":          apibounds.Str(256).Secretly(),
		"ClusterMemberRegisterRequest.node_secret":    apibounds.Str(256).Secretly(),
		"ClusterMemberRegisterRequest.address":        apibounds.Str(512),
		"ClusterMemberRegisterRequest.capabilities":   apibounds.Rule{}.Items(256),
		"ClusterMemberRegisterRequest.runtime":        apibounds.Str(64),
		"ClusterMemberRegisterRequest.worker_version": apibounds.Str(128),
		"ClusterMemberRegisterRequest.csr_der":        apibounds.Bytes(16 << 10),
		"RegisterHostAgentRequest.url":                apibounds.Str(512),
		"RegisterHostAgentRequest.csr_der":            apibounds.Bytes(16 << 10),
		"Hardware.hostname":                           apibounds.Str(253),
		"Hardware.gpus":                               apibounds.Rule{}.Items(64),
		"Gpu.model":                                   apibounds.Str(256),
		"Capability.name":                             apibounds.Str(128),
		"SetNodeIdleExpiryRequest.idle_expiry_ms":     apibounds.Between(0, msOf(MaxIdleExpiry)).Because("0 clears the override; at most a year"),

		// Audit and KV.
		"AppendAuditEntryRequest.source":           apibounds.Str(jobspec.MaxAuditSourceLen),
		"AppendAuditEntryRequest.kind":             apibounds.Str(jobspec.MaxAuditKindLen),
		"AppendAuditEntryRequest.payload":          apibounds.TextOf(jobspec.MaxAuditPayloadLen),
		"GetAuditLogRequest.limit":                 apibounds.Between(0, jobspec.MaxAuditPage),
		"GetAuditLogRequest.before_seq":            apibounds.Between(0, 1<<53).Because("a seq"),
		"GetAuditLogRequest.source":                apibounds.Str(jobspec.MaxAuditSourceLen),
		"GetAuditLogRequest.kind":                  apibounds.Str(jobspec.MaxAuditKindLen),
		"GetAuditLogRequest.from_ms":               apibounds.Between(0, MaxEpochMs).Because("ms since the epoch, up to year 9999"),
		"GetAuditLogRequest.to_ms":                 apibounds.Between(0, MaxEpochMs).Because("ms since the epoch, up to year 9999"),
		"PruneAuditLogRequest.before_timestamp_ms": apibounds.Between(0, MaxEpochMs).Because("ms since the epoch, up to year 9999"),
		"KvCommitRequest.writes":                   apibounds.Rule{}.Items(jobspec.MaxKVWrites),
		"KvWrite.key":                              apibounds.Arg(jobspec.MaxKVKeyLen),
		"KvWrite.put":                              apibounds.Bytes(jobspec.MaxKVValueLen).Because("at most 4 MiB per commit"),
		"KvGetRequest.key":                         apibounds.Arg(jobspec.MaxKVKeyLen),
		"KvListRequest.key_prefix":                 apibounds.Arg(jobspec.MaxKVKeyLen),

		// Security.
		"CreateTokenRequest.name":                          apibounds.Str(64),
		"CreateTokenRequest.role":                          apibounds.Str(32),
		"CreateTokenRequest.ttl_s":                         apibounds.Between(0, MaxTokenTTL.Seconds()).Because("0 never expires; at most 100 years"),
		"RevokeTokenRequest.id":                            apibounds.Str(64),
		"DiscoveryFleet.addresses":                         apibounds.Str(512).Items(64),
		"DiscoveryFleet.address":                           apibounds.Str(512),
		"DiscoveryFleet.leaf_token":                        apibounds.Str(MaxSecretLen).Secretly(),
		"DiscoveryFleet.tier_secret":                       apibounds.Str(MaxSecretLen).Secretly().Because("a new tier secret is at least 32 bytes"),
		"DiscoveryFleet.tier_secret_alt":                   apibounds.Str(MaxSecretLen).Secretly(),
		"DiscoveryFleet.rotation_phase":                    apibounds.Str(32),
		"RotateDiscoveryTierSecretRequest.step":            apibounds.Str(32),
		"RotateDiscoveryTierSecretRequest.new_tier_secret": apibounds.Str(MaxSecretLen).AtLeast(MinTierSecretLen).Secretly(),
		"AccessReplicaPublication.snapshot_jws":            apibounds.Str(accessreplica.MaxJWSBytes),
		"AccessReplicaPublication.delta_jws":               apibounds.Str(accessreplica.MaxJWSBytes),
		"AccessReplicaPublication.attestation_jws":         apibounds.Str(accessreplica.MaxAttestationBytes),

		// The cluster.
		"AddClusterMemberRequest.node":            apibounds.Str(jobspec.MaxJobIDLen),
		"RemoveClusterMemberRequest.node":         apibounds.Str(jobspec.MaxJobIDLen),
		"GetClusterEventsRequest.kinds":           apibounds.Str(64).Items(64),
		"AnnounceControlPlaneRequest.url":         apibounds.Str(2048),
		"AnnounceControlPlaneRequest.interval_ms": apibounds.Between(0, msOf(MaxAnnounceInterval)),
		"ForwardRequest.command":                  apibounds.Bytes(apibounds.Unbounded).Because("a member's forwarded write: the request limit"),
		"JoinRequest.name":                        apibounds.Str(jobspec.MaxJobIDLen),
		"JoinRequest.raft_address":                apibounds.Str(512),
		"JoinRequest.api_url":                     apibounds.Str(2048),

		// Bundles and leases.
		"Bundle.jobs":                        apibounds.Rule{}.Items(jobspec.MaxBundleJobs),
		"Bundle.deleting_reason":             apibounds.TextOf(jobspec.MaxReasonLen),
		"BundleJobSpec.co_locate_with":       apibounds.Str(jobspec.MaxBundleIDLen).Items(jobspec.MaxBundleJobs),
		"BundleJobSpec.separate_from":        apibounds.Str(jobspec.MaxBundleIDLen).Items(jobspec.MaxBundleJobs),
		"BundleJobSpec.start_mode":           apibounds.Str(32),
		"IntraReplicaRules.spread_attribute": apibounds.Str(jobspec.MaxTagKeyLen),
		"ResiliencePolicy.replicas":          apibounds.Between(0, jobspec.MaxBundleReplicas),
		"RenewBundleLeaseRequest.ttl_ms":     apibounds.Between(0, msOf(jobspec.MaxBundleLeaseTTL)),

		// Migrations.
		"NotifyMigrationCutoverReadyRequest.payload": apibounds.Bytes(state.MaxMigrationPayload),
		"NotifyMigrationCutoverApplyRequest.payload": apibounds.Bytes(state.MaxMigrationPayload),
		"MigrationState.initial_state":               apibounds.Bytes(state.MaxMigrationPayload),
		"MigrationState.target_payload":              apibounds.Bytes(state.MaxMigrationPayload),
		"MigrationState.source_payload":              apibounds.Bytes(state.MaxMigrationPayload),
		"MigrationState.abort_reason":                apibounds.TextOf(jobspec.MaxReasonLen),
		"MigrationState.placement_summary":           apibounds.TextOf(16 << 10),
		"MigrationState.requested_by":                apibounds.Str(256),
		"MigrationApplySummary.applied":              apibounds.Str(1024).Items(1 << 16),
		"MigrationApplySummary.failed":               apibounds.Rule{}.Items(1 << 16),

		// Drains.
		"DrainNodeRequest.deadline_ms": apibounds.Between(0, msOf(jobspec.MaxDrainDeadline)),
		"DrainNodeRequest.parallel":    apibounds.Between(0, jobspec.MaxDrainParallel),
		"NodeDrain.items":              apibounds.Rule{}.Items(state.MaxDrainItems),
		"NodeDrain.summary":            apibounds.TextOf(4096),
		"NodeDrain.requested_by":       apibounds.Str(256),
		"NodeDrain.parallel":           apibounds.Between(0, jobspec.MaxDrainParallel),
		"DrainItem.reason":             apibounds.TextOf(2048),
	}),
}

// fieldBounds names rules by the full names of the Manager API's messages.
func fieldBounds(short map[string]apibounds.Rule) map[protoreflect.FullName]apibounds.Rule {
	out := make(map[protoreflect.FullName]apibounds.Rule, len(short))
	for k, r := range short {
		out[protoreflect.FullName("norsk.manager.v1."+k)] = r
	}
	return out
}

// checkBounds applies requestBounds to a request message.
func checkBounds(m any) error {
	pm, ok := m.(proto.Message)
	if !ok {
		return nil
	}
	return rpcerr.ToConnect(requestBounds.Check(pm))
}

// BoundsInterceptor refuses, with INVALID_ARGUMENT naming the field, any
// request with a field out of requestBounds, before its handler runs (a
// streaming call's messages as they are received).
func BoundsInterceptor() connect.Interceptor { return boundsCheck{} }

type boundsCheck struct{}

func (boundsCheck) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if err := checkBounds(req.Any()); err != nil {
			return nil, err
		}
		return next(ctx, req)
	}
}

func (boundsCheck) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (boundsCheck) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		return next(ctx, boundedConn{conn})
	}
}

// boundedConn checks each message a streaming call receives.
type boundedConn struct{ connect.StreamingHandlerConn }

func (c boundedConn) Receive(m any) error {
	if err := c.StreamingHandlerConn.Receive(m); err != nil {
		return err
	}
	return checkBounds(m)
}
