package apibounds

import (
	"time"

	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/norsk-go/norsk-manager/pkg/accessreplica"
	"github.com/norsk-go/norsk-manager/pkg/jobspec"
)

// msOf is a duration in ms, as a bound.
func msOf(d time.Duration) float64 { return float64(d.Milliseconds()) }

// ManagerRequests are the bounds of every field of every request the
// Manager and Members services take (docs/api.md, "Field bounds", is this
// table). The Manager applies them (Interceptor) before any handler runs,
// and so does the SDK's fake (norsktest); the handlers and pkg/jobspec check
// what needs meaning (an id's form, a job's services, whether a thing
// exists). Every string must be valid UTF-8.
var ManagerRequests = &Table{
	Defaults: Defaults{
		String:   Str(1024),
		Bytes:    Bytes(64 << 10),
		Items:    1024,
		MapItems: 256,
		MapKey:   Str(256),
		MapValue: Str(1024),
	},
	Names: map[protoreflect.Name]Rule{
		"job_id":                   Str(jobspec.MaxJobIDLen),
		"source_job_id":            Str(jobspec.MaxJobIDLen),
		"after_job_id":             Str(jobspec.MaxJobIDLen),
		"node_id":                  Str(jobspec.MaxJobIDLen),
		"target_node_id":           Str(jobspec.MaxJobIDLen),
		"source_node_id":           Str(jobspec.MaxJobIDLen),
		"failed_node_id":           Str(jobspec.MaxJobIDLen),
		"requested_target_node_id": Str(jobspec.MaxJobIDLen),
		"node_name":                Str(jobspec.MaxJobIDLen),
		"role":                     Str(jobspec.MaxRoleLen),
		"source_role":              Str(jobspec.MaxRoleLen),
		"target_role":              Str(jobspec.MaxRoleLen),
		"runtime_role":             Str(jobspec.MaxRoleLen),
		"migration_id":             Str(jobspec.MaxJobIDLen),
		"bundle_id":                Str(jobspec.MaxBundleIDLen),
		"job_name":                 Str(jobspec.MaxBundleIDLen),
		"pool":                     Str(jobspec.MaxTagValueLen),
		"by":                       Str(256),
		"reason":                   TextOf(jobspec.MaxReasonLen),
		"tags":                     Map(jobspec.MaxTags, Str(jobspec.MaxTagKeyLen), Str(jobspec.MaxTagValueLen)),
		"namespace":                Arg(jobspec.MaxKVNamespaceLen),
		"grace_ms":                 Between(0, jobspec.MaxGraceMs),
	},
	Fields: fieldBounds(map[string]Rule{
		"HelloRequest.protocol_version": Str(32),
		"HelloRequest.client_label":     Str(256),

		// Jobs (bundles carry them too).
		"Job.description":                         TextOf(jobspec.MaxDescriptionLen),
		"Job.services":                            Rule{}.Items(jobspec.MaxServices),
		"Job.volumes":                             Str(63).Items(jobspec.MaxVolumes),
		"Service.name":                            Str(jobspec.MaxServiceNameLen),
		"Service.image":                           Str(1024),
		"Service.command":                         Arg(jobspec.MaxArgBytes).Items(jobspec.MaxArgs).Because("and command + args at most 256 KiB together"),
		"Service.args":                            Arg(jobspec.MaxArgBytes).Items(jobspec.MaxArgs),
		"Service.env":                             Map(jobspec.MaxEnv, Str(256), Arg(jobspec.MaxEnvValueLen)).Because("at most 1 MiB together"),
		"Service.ports":                           Rule{}.Items(jobspec.MaxPorts),
		"Service.volume_mounts":                   Rule{}.Items(jobspec.MaxVolumes),
		"Service.depends_on":                      Str(jobspec.MaxServiceNameLen).Items(jobspec.MaxServices),
		"Service.working_dir":                     Str(jobspec.MaxPathLen),
		"Service.shm_size_bytes":                  Between(0, jobspec.MaxShmSizeBytes),
		"Service.cpu_set":                         Rule{}.Items(4096),
		"PortMapping.container_port":              Between(0, 65535),
		"PortMapping.specific":                    Between(0, 65535),
		"PortMapping.host_address":                Str(64),
		"PortRange.min_port":                      Between(0, 65535),
		"PortRange.max_port":                      Between(0, 65535),
		"VolumeMount.source":                      Str(jobspec.MaxPathLen),
		"VolumeMount.container_path":              Str(jobspec.MaxPathLen),
		"JobRequirements.required_gpu_model":      Str(256),
		"JobRequirements.required_capabilities":   Rule{}.Items(64),
		"JobRequirements.priority_band":           Str(jobspec.MaxPriorityBandLen),
		"CapabilityRequirement.name":              Str(128),
		"JobSearchRequest.filters":                Rule{}.Items(jobspec.MaxFilters),
		"TagFilter.tag_name":                      Str(jobspec.MaxTagKeyLen),
		"StartJobsRequest.starts":                 Rule{}.Items(jobspec.MaxStartJobs),
		"StartJobOptions.migration_initial_state": Bytes(jobspec.MaxMigrationPayload),
		"PlacementEvent.kind":                     Str(64),
		"PlacementEvent.summary":                  TextOf(16 << 10),
		"PlacementEvent.failure":                  TextOf(16 << 10),
		"PlacementEvent.degradations":             Rule{}.Items(64),

		// Nodes and workers.
		"ClusterMemberRegisterRequest.token":          Str(256).Secretly(),
		"ClusterMemberRegisterRequest.node_secret":    Str(256).Secretly(),
		"ClusterMemberRegisterRequest.address":        Str(512),
		"ClusterMemberRegisterRequest.capabilities":   Rule{}.Items(256),
		"ClusterMemberRegisterRequest.runtime":        Str(64),
		"ClusterMemberRegisterRequest.worker_version": Str(128),
		"ClusterMemberRegisterRequest.csr_der":        Bytes(16 << 10),
		"RegisterHostAgentRequest.url":                Str(512),
		"RegisterHostAgentRequest.csr_der":            Bytes(16 << 10),
		"Hardware.hostname":                           Str(253),
		"Hardware.gpus":                               Rule{}.Items(64),
		"Gpu.model":                                   Str(256),
		"Capability.name":                             Str(128),
		"SetNodeIdleExpiryRequest.idle_expiry_ms":     Between(0, msOf(jobspec.MaxIdleExpiry)).Because("0 clears the override; at most a year"),

		// Audit and KV.
		"AppendAuditEntryRequest.source":           Str(jobspec.MaxAuditSourceLen),
		"AppendAuditEntryRequest.kind":             Str(jobspec.MaxAuditKindLen),
		"AppendAuditEntryRequest.payload":          TextOf(jobspec.MaxAuditPayloadLen),
		"GetAuditLogRequest.limit":                 Between(0, jobspec.MaxAuditPage),
		"GetAuditLogRequest.before_seq":            Between(0, 1<<53).Because("a seq"),
		"GetAuditLogRequest.source":                Str(jobspec.MaxAuditSourceLen),
		"GetAuditLogRequest.kind":                  Str(jobspec.MaxAuditKindLen),
		"GetAuditLogRequest.from_ms":               Between(0, jobspec.MaxEpochMs).Because("ms since the epoch, up to year 9999"),
		"GetAuditLogRequest.to_ms":                 Between(0, jobspec.MaxEpochMs).Because("ms since the epoch, up to year 9999"),
		"PruneAuditLogRequest.before_timestamp_ms": Between(0, jobspec.MaxEpochMs).Because("ms since the epoch, up to year 9999"),
		"KvCommitRequest.writes":                   Rule{}.Items(jobspec.MaxKVWrites),
		"KvWrite.key":                              Arg(jobspec.MaxKVKeyLen),
		"KvWrite.put":                              Bytes(jobspec.MaxKVValueLen).Because("at most 4 MiB per commit"),
		"KvGetRequest.key":                         Arg(jobspec.MaxKVKeyLen),
		"KvListRequest.key_prefix":                 Arg(jobspec.MaxKVKeyLen),

		// Security.
		"CreateTokenRequest.name":                          Str(64),
		"CreateTokenRequest.role":                          Str(32),
		"CreateTokenRequest.ttl_s":                         Between(0, jobspec.MaxTokenTTL.Seconds()).Because("0 never expires; at most 100 years"),
		"RevokeTokenRequest.id":                            Str(64),
		"DiscoveryFleet.addresses":                         Str(512).Items(64),
		"DiscoveryFleet.address":                           Str(512),
		"DiscoveryFleet.leaf_token":                        Str(jobspec.MaxSecretLen).Secretly(),
		"DiscoveryFleet.tier_secret":                       Str(jobspec.MaxSecretLen).Secretly().Because("a new tier secret is at least 32 bytes"),
		"DiscoveryFleet.tier_secret_alt":                   Str(jobspec.MaxSecretLen).Secretly(),
		"DiscoveryFleet.rotation_phase":                    Str(32),
		"RotateDiscoveryTierSecretRequest.step":            Str(32),
		"RotateDiscoveryTierSecretRequest.new_tier_secret": Str(jobspec.MaxSecretLen).AtLeast(jobspec.MinTierSecretLen).Secretly(),
		"AccessReplicaPublication.snapshot_jws":            Str(accessreplica.MaxJWSBytes),
		"AccessReplicaPublication.delta_jws":               Str(accessreplica.MaxJWSBytes),
		"AccessReplicaPublication.attestation_jws":         Str(accessreplica.MaxAttestationBytes),

		// The cluster.
		"AddClusterMemberRequest.node":            Str(jobspec.MaxJobIDLen),
		"RemoveClusterMemberRequest.node":         Str(jobspec.MaxJobIDLen),
		"GetClusterEventsRequest.kinds":           Str(64).Items(64),
		"AnnounceControlPlaneRequest.url":         Str(2048),
		"AnnounceControlPlaneRequest.interval_ms": Between(0, msOf(jobspec.MaxAnnounceInterval)),
		"ForwardRequest.command":                  Bytes(Unbounded).Because("a member's forwarded write: the request limit"),
		"JoinRequest.name":                        Str(jobspec.MaxJobIDLen),
		"JoinRequest.raft_address":                Str(512),
		"JoinRequest.api_url":                     Str(2048),

		// Bundles and leases.
		"Bundle.jobs":                        Rule{}.Items(jobspec.MaxBundleJobs),
		"Bundle.deleting_reason":             TextOf(jobspec.MaxReasonLen),
		"BundleJobSpec.co_locate_with":       Str(jobspec.MaxBundleIDLen).Items(jobspec.MaxBundleJobs),
		"BundleJobSpec.separate_from":        Str(jobspec.MaxBundleIDLen).Items(jobspec.MaxBundleJobs),
		"BundleJobSpec.start_mode":           Str(32),
		"IntraReplicaRules.spread_attribute": Str(jobspec.MaxTagKeyLen),
		"ResiliencePolicy.replicas":          Between(0, jobspec.MaxBundleReplicas),
		"RenewBundleLeaseRequest.ttl_ms":     Between(0, msOf(jobspec.MaxBundleLeaseTTL)),

		// Migrations.
		"NotifyMigrationCutoverReadyRequest.payload": Bytes(jobspec.MaxMigrationPayload),
		"NotifyMigrationCutoverApplyRequest.payload": Bytes(jobspec.MaxMigrationPayload),
		"MigrationState.initial_state":               Bytes(jobspec.MaxMigrationPayload),
		"MigrationState.target_payload":              Bytes(jobspec.MaxMigrationPayload),
		"MigrationState.source_payload":              Bytes(jobspec.MaxMigrationPayload),
		"MigrationState.abort_reason":                TextOf(jobspec.MaxReasonLen),
		"MigrationState.placement_summary":           TextOf(16 << 10),
		"MigrationState.requested_by":                Str(256),
		"MigrationApplySummary.applied":              Str(1024).Items(1 << 16),
		"MigrationApplySummary.failed":               Rule{}.Items(1 << 16),

		// Drains.
		"DrainNodeRequest.deadline_ms": Between(0, msOf(jobspec.MaxDrainDeadline)),
		"DrainNodeRequest.parallel":    Between(0, jobspec.MaxDrainParallel),
		"NodeDrain.items":              Rule{}.Items(jobspec.MaxDrainItems),
		"NodeDrain.summary":            TextOf(4096),
		"NodeDrain.requested_by":       Str(256),
		"NodeDrain.parallel":           Between(0, jobspec.MaxDrainParallel),
		"DrainItem.reason":             TextOf(2048),
	}),
}

// fieldBounds names rules by the full names of the Manager API's messages.
func fieldBounds(short map[string]Rule) map[protoreflect.FullName]Rule {
	out := make(map[protoreflect.FullName]Rule, len(short))
	for k, r := range short {
		out[protoreflect.FullName("norsk.manager.v1."+k)] = r
	}
	return out
}
