package norsk

import managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"

// The API messages of norsk.manager.v1, re-exported so that users of the SDK
// need one import. They are the generated protobuf types: build them as Go
// structs, read them with their Get… methods, and serialise them with
// protojson. The proto comments (api/proto/norsk/manager/v1) are their
// reference; the oneof wrapper types (Event_JobCreated, PortMapping_Specific,
// …) are what the Kind / HostPort / Event / Match fields hold.

// From norsk/manager/v1/job.proto.
type (
	Job                         = managerv1.Job
	TerminalState               = managerv1.TerminalState
	Service                     = managerv1.Service
	RestartPolicy               = managerv1.RestartPolicy
	PortRange                   = managerv1.PortRange
	Ephemeral                   = managerv1.Ephemeral
	PortMapping                 = managerv1.PortMapping
	PortMapping_Ephemeral       = managerv1.PortMapping_Ephemeral
	PortMapping_Range           = managerv1.PortMapping_Range
	PortMapping_Specific        = managerv1.PortMapping_Specific
	VolumeMount                 = managerv1.VolumeMount
	AutoPlacement               = managerv1.AutoPlacement
	CapabilityRequirement       = managerv1.CapabilityRequirement
	JobRequirements             = managerv1.JobRequirements
	JobHash                     = managerv1.JobHash
	ResolvedPortMapping         = managerv1.ResolvedPortMapping
	ResolvedPortMappings        = managerv1.ResolvedPortMappings
	JobHistoryEntry             = managerv1.JobHistoryEntry
	JobHistoryEntry_Created     = managerv1.JobHistoryEntry_Created
	JobHistoryEntry_Updated     = managerv1.JobHistoryEntry_Updated
	JobHistoryEntry_Provisioned = managerv1.JobHistoryEntry_Provisioned
	JobHistoryEntry_Prepared    = managerv1.JobHistoryEntry_Prepared
	JobHistoryEntry_Running     = managerv1.JobHistoryEntry_Running
	JobHistoryEntry_Stopping    = managerv1.JobHistoryEntry_Stopping
	JobHistoryEntry_Stopped     = managerv1.JobHistoryEntry_Stopped
	JobHistoryEntry_Completed   = managerv1.JobHistoryEntry_Completed
	JobHistoryEntry_Rejected    = managerv1.JobHistoryEntry_Rejected
	JobHistoryEntry_Notice      = managerv1.JobHistoryEntry_Notice
	JobCreated                  = managerv1.JobCreated
	JobUpdated                  = managerv1.JobUpdated
	InstanceRef                 = managerv1.InstanceRef
	InstanceProvisioned         = managerv1.InstanceProvisioned
	InstancePrepared            = managerv1.InstancePrepared
	InstanceRunning             = managerv1.InstanceRunning
	InstanceStopping            = managerv1.InstanceStopping
	InstanceStopped             = managerv1.InstanceStopped
	JobCompleted                = managerv1.JobCompleted
	JobRejected                 = managerv1.JobRejected
	InstanceNotice              = managerv1.InstanceNotice
	Instance                    = managerv1.Instance
	JobWithHistory              = managerv1.JobWithHistory
	JobState                    = managerv1.JobState
	TerminalKind                = managerv1.TerminalKind
	RestartMode                 = managerv1.RestartMode
	Protocol                    = managerv1.Protocol
	StoppingReason              = managerv1.StoppingReason
	InstanceDesired             = managerv1.InstanceDesired
	InstancePhase               = managerv1.InstancePhase
)

// From norsk/manager/v1/node.proto.
type (
	Gpu             = managerv1.Gpu
	Capability      = managerv1.Capability
	Hardware        = managerv1.Hardware
	NodeLoad        = managerv1.NodeLoad
	Node            = managerv1.Node
	InstanceSummary = managerv1.InstanceSummary
	ClusterSlot     = managerv1.ClusterSlot
	NodeState       = managerv1.NodeState
	Architecture    = managerv1.Architecture
)

// From norsk/manager/v1/event.proto.
type (
	Event                         = managerv1.Event
	Event_JobSnapshot             = managerv1.Event_JobSnapshot
	Event_NodeSnapshot            = managerv1.Event_NodeSnapshot
	Event_InitialDataComplete     = managerv1.Event_InitialDataComplete
	Event_JobCreated              = managerv1.Event_JobCreated
	Event_JobUpdated              = managerv1.Event_JobUpdated
	Event_JobDeleted              = managerv1.Event_JobDeleted
	Event_NodeOnline              = managerv1.Event_NodeOnline
	Event_NodeLost                = managerv1.Event_NodeLost
	Event_NodeStopping            = managerv1.Event_NodeStopping
	Event_NodeTerminated          = managerv1.Event_NodeTerminated
	Event_NodeTagsUpdated         = managerv1.Event_NodeTagsUpdated
	Event_NodeImagesUpdated       = managerv1.Event_NodeImagesUpdated
	Event_ImagesPrefetched        = managerv1.Event_ImagesPrefetched
	ImagesPrefetched              = managerv1.ImagesPrefetched
	ImagePrefetchResult           = managerv1.ImagePrefetchResult
	ImagePrefetchOutcome          = managerv1.ImagePrefetchOutcome
	HeldImage                     = managerv1.HeldImage
	PrefetchImagesResponse        = managerv1.PrefetchImagesResponse
	PullPolicy                    = managerv1.PullPolicy
	Event_ClusterSlotRegistered   = managerv1.Event_ClusterSlotRegistered
	Event_ClusterSlotUpdated      = managerv1.Event_ClusterSlotUpdated
	Event_ClusterSlotDeregistered = managerv1.Event_ClusterSlotDeregistered
	InitialDataComplete           = managerv1.InitialDataComplete
	JobEvent                      = managerv1.JobEvent
	JobDeleted                    = managerv1.JobDeleted
	NodeEvent                     = managerv1.NodeEvent
	ClusterSlotEvent              = managerv1.ClusterSlotEvent
)

// From norsk/manager/v1/manager.proto.
type (
	DaemonHello                   = managerv1.DaemonHello
	VersionInfo                   = managerv1.VersionInfo
	TagFilter                     = managerv1.TagFilter
	TagFilter_Eq                  = managerv1.TagFilter_Eq
	TagFilter_Neq                 = managerv1.TagFilter_Neq
	TagFilter_Re                  = managerv1.TagFilter_Re
	TagFilter_Exists              = managerv1.TagFilter_Exists
	IdFilter                      = managerv1.IdFilter
	IdFilter_Eq                   = managerv1.IdFilter_Eq
	IdFilter_Neq                  = managerv1.IdFilter_Neq
	IdFilter_Re                   = managerv1.IdFilter_Re
	DateWithin                    = managerv1.DateWithin
	DateFilter                    = managerv1.DateFilter
	DateFilter_Eq                 = managerv1.DateFilter_Eq
	DateFilter_Lt                 = managerv1.DateFilter_Lt
	DateFilter_Lte                = managerv1.DateFilter_Lte
	DateFilter_Gt                 = managerv1.DateFilter_Gt
	DateFilter_Gte                = managerv1.DateFilter_Gte
	DateFilter_Within             = managerv1.DateFilter_Within
	JobFilter                     = managerv1.JobFilter
	JobFilter_Tag                 = managerv1.JobFilter_Tag
	JobFilter_Id                  = managerv1.JobFilter_Id
	JobFilter_Date                = managerv1.JobFilter_Date
	JobSearchResponse             = managerv1.JobSearchResponse
	RegisterClusterNodeResponse   = managerv1.RegisterClusterNodeResponse
	ClusterMemberRegisterRequest  = managerv1.ClusterMemberRegisterRequest
	ClusterMemberRegisterResponse = managerv1.ClusterMemberRegisterResponse
	NodeIdleExpiry                = managerv1.NodeIdleExpiry
	DateField                     = managerv1.DateField
)

// From norsk/manager/v1/audit.proto.
type (
	AuditLogEntry   = managerv1.AuditLogEntry
	AuditCheckpoint = managerv1.AuditCheckpoint
	// AuditLogPage is one page of GetAuditLog: entries newest first, the
	// Manager's at-boot verdict on its chain, the checkpoint and the seq to
	// page on from (NextBeforeSeq).
	AuditLogPage = managerv1.GetAuditLogResponse
)

// From norsk/manager/v1/kv.proto. (The writes and options of a commit are
// the Go types KvWrite and KvCommitOptions of kv.go.)
type (
	KvEntry = managerv1.KvEntry
)

// From norsk/manager/v1/security.proto: the discovery fleet (discovery.go)
// and, from node_controller.proto, the access a node receives of it.
type (
	DiscoveryFleet  = managerv1.DiscoveryFleet
	DiscoveryAccess = managerv1.DiscoveryAccess
)

// From norsk/manager/v1/security.proto: norsk-mgr's role-store replica
// (access_replica.go).
type AccessReplicaPublication = managerv1.AccessReplicaPublication

// From norsk/manager/v1/placement.proto: placement explained (placement.go).
type (
	ExplainPlacementResponse = managerv1.ExplainPlacementResponse
	PlacementNodeVerdict     = managerv1.PlacementNodeVerdict
	PlacementRefusal         = managerv1.PlacementRefusal
	PlacementEvent           = managerv1.PlacementEvent
)

// From norsk/manager/v1/cluster.proto: the Manager cluster (cluster.go).
type (
	ClusterStatus = managerv1.ClusterStatus
	ClusterMember = managerv1.ClusterMember
	ClusterEvent  = managerv1.ClusterEvent
	MemberRole    = managerv1.MemberRole
	// ClusterEventsPage is GetClusterEvents' answer: the events, newest
	// first, and the member whose own log they are (Member).
	ClusterEventsPage = managerv1.GetClusterEventsResponse
)

// From norsk/manager/v1/store_info.proto.
type (
	StoreInfo   = managerv1.StoreInfo
	StoreSchema = managerv1.StoreSchema
	BackupInfo  = managerv1.BackupInfo
	BootReport  = managerv1.BootReport
)

// JobState values.
const (
	JobStatePre    = managerv1.JobState_JOB_STATE_PRE
	JobStateActive = managerv1.JobState_JOB_STATE_ACTIVE
	JobStatePost   = managerv1.JobState_JOB_STATE_POST
)

// TerminalKind values.
const (
	TerminalKindUnspecified = managerv1.TerminalKind_TERMINAL_KIND_UNSPECIFIED
	TerminalKindCompleted   = managerv1.TerminalKind_TERMINAL_KIND_COMPLETED
	TerminalKindFailed      = managerv1.TerminalKind_TERMINAL_KIND_FAILED
)

// RestartMode values.
const (
	RestartModeUnspecified = managerv1.RestartMode_RESTART_MODE_UNSPECIFIED
	RestartModeNever       = managerv1.RestartMode_RESTART_MODE_NEVER
	RestartModeOnFailure   = managerv1.RestartMode_RESTART_MODE_ON_FAILURE
	RestartModeAlways      = managerv1.RestartMode_RESTART_MODE_ALWAYS
)

// PullPolicy values (Service.PullPolicy).
const (
	PullPolicyUnspecified  = managerv1.PullPolicy_PULL_POLICY_UNSPECIFIED
	PullPolicyIfNotPresent = managerv1.PullPolicy_PULL_POLICY_IF_NOT_PRESENT
	PullPolicyAlways       = managerv1.PullPolicy_PULL_POLICY_ALWAYS
	PullPolicyNever        = managerv1.PullPolicy_PULL_POLICY_NEVER
)

// ImagePrefetchOutcome values (ImagePrefetchResult.Outcome).
const (
	ImagePrefetchPulled         = managerv1.ImagePrefetchOutcome_IMAGE_PREFETCH_OUTCOME_PULLED
	ImagePrefetchAlreadyPresent = managerv1.ImagePrefetchOutcome_IMAGE_PREFETCH_OUTCOME_ALREADY_PRESENT
	ImagePrefetchFailed         = managerv1.ImagePrefetchOutcome_IMAGE_PREFETCH_OUTCOME_FAILED
)

// Protocol values.
const (
	ProtocolAny = managerv1.Protocol_PROTOCOL_ANY
	ProtocolTCP = managerv1.Protocol_PROTOCOL_TCP
	ProtocolUDP = managerv1.Protocol_PROTOCOL_UDP
)

// StoppingReason values.
const (
	StoppingReasonNodeStopped    = managerv1.StoppingReason_STOPPING_REASON_NODE_STOPPED
	StoppingReasonNodeTerminated = managerv1.StoppingReason_STOPPING_REASON_NODE_TERMINATED
	StoppingReasonUserRequested  = managerv1.StoppingReason_STOPPING_REASON_USER_REQUESTED
	StoppingReasonUnknownJob     = managerv1.StoppingReason_STOPPING_REASON_UNKNOWN_JOB
	StoppingReasonJobFailed      = managerv1.StoppingReason_STOPPING_REASON_JOB_FAILED
)

// InstanceDesired values.
const (
	InstanceDesiredUnspecified = managerv1.InstanceDesired_INSTANCE_DESIRED_UNSPECIFIED
	InstanceDesiredRunning     = managerv1.InstanceDesired_INSTANCE_DESIRED_RUNNING
	InstanceDesiredPrepared    = managerv1.InstanceDesired_INSTANCE_DESIRED_PREPARED
	InstanceDesiredStopped     = managerv1.InstanceDesired_INSTANCE_DESIRED_STOPPED
)

// InstancePhase values.
const (
	InstancePhaseUnspecified = managerv1.InstancePhase_INSTANCE_PHASE_UNSPECIFIED
	InstancePhaseProvisioned = managerv1.InstancePhase_INSTANCE_PHASE_PROVISIONED
	InstancePhasePrepared    = managerv1.InstancePhase_INSTANCE_PHASE_PREPARED
	InstancePhaseRunning     = managerv1.InstancePhase_INSTANCE_PHASE_RUNNING
	InstancePhaseStopping    = managerv1.InstancePhase_INSTANCE_PHASE_STOPPING
	InstancePhaseStopped     = managerv1.InstancePhase_INSTANCE_PHASE_STOPPED
)

// NodeState values.
const (
	NodeStateUnspecified = managerv1.NodeState_NODE_STATE_UNSPECIFIED
	NodeStateRegistered  = managerv1.NodeState_NODE_STATE_REGISTERED
	NodeStateOnline      = managerv1.NodeState_NODE_STATE_ONLINE
	NodeStateLost        = managerv1.NodeState_NODE_STATE_LOST
	NodeStateStopping    = managerv1.NodeState_NODE_STATE_STOPPING
	NodeStateTerminated  = managerv1.NodeState_NODE_STATE_TERMINATED
	NodeStateStarting    = managerv1.NodeState_NODE_STATE_STARTING
)

// Architecture values.
const (
	ArchitectureUnspecified = managerv1.Architecture_ARCHITECTURE_UNSPECIFIED
	ArchitectureX86_64      = managerv1.Architecture_ARCHITECTURE_X86_64
	ArchitectureAarch64     = managerv1.Architecture_ARCHITECTURE_AARCH_64
)

// MemberRole values.
const (
	MemberRoleUnspecified = managerv1.MemberRole_MEMBER_ROLE_UNSPECIFIED
	MemberRolePrimary     = managerv1.MemberRole_MEMBER_ROLE_PRIMARY
	MemberRoleFollower    = managerv1.MemberRole_MEMBER_ROLE_FOLLOWER
	MemberRoleWitness     = managerv1.MemberRole_MEMBER_ROLE_WITNESS
	MemberRoleUnknown     = managerv1.MemberRole_MEMBER_ROLE_UNKNOWN
)

// DateField values.
const (
	DateFieldCreated = managerv1.DateField_DATE_FIELD_CREATED
	DateFieldUpdated = managerv1.DateField_DATE_FIELD_UPDATED
	DateFieldStart   = managerv1.DateField_DATE_FIELD_START
)
