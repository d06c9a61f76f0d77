package placement

// MilliUnitsPerVCPU is the default CPU capacity of one vCPU, in thousandths
// of a reference unit (one real-time H.264 1080p30 preset-medium encode).
// 500 means one such encode needs two vCPUs: a 4-vCPU node holds 2.0
// reference units. Config.MilliUnitsPerVCPU overrides it.
const MilliUnitsPerVCPU = 500

// AntiAffinity says whether two replicas of a bundle may share a failure
// domain. The zero value allows it.
type AntiAffinity int

const (
	// Allow puts no constraint on the placement.
	Allow AntiAffinity = iota
	// Forbid is honoured whenever an otherwise eligible compliant node
	// exists; when none does the job is placed anyway and the result carries
	// a Degradation.
	Forbid
)

// String names the value as the API does ("ALLOW" or "FORBID").
func (a AntiAffinity) String() string {
	if a == Forbid {
		return "FORBID"
	}
	return "ALLOW"
}

// AntiAffinityPolicy is a bundle's resilience policy between its replicas
// (replicaIndex 0 = primary, 1 = backup, ...). Failure domains nest: same
// node, then same availability zone (Node.Zone), then same cloud
// (Node.Cloud). An empty zone or cloud is unknown and never equals another.
type AntiAffinityPolicy struct {
	SameNode  AntiAffinity
	SameAz    AntiAffinity
	SameCloud AntiAffinity
}

// GPU is one GPU of a node. Capacity is in the GPU's own reference units
// (1.0 = one whole GPU).
type GPU struct {
	Model    string
	Capacity float64
}

// Capability is a named, counted resource a node advertises (for example
// four SDI inputs) or a job requires. Counts are consumed by the jobs placed
// on the node unless Config.PresenceCapabilities names the capability.
type Capability struct {
	Name  string
	Count uint32
}

// Spare is a node's hot-spare specification (node tags spare=true, warmFor,
// reservedFor, exclusive).
type Spare struct {
	// Enabled marks the node as a hot spare.
	Enabled bool
	// WarmFor names the templates whose images the spare keeps warm; such a
	// spare is preferred for those templates among spares.
	WarmFor []string
	// ReservedFor names the templates the spare is set aside for.
	ReservedFor []string
	// Exclusive spares take only the templates in ReservedFor unless the
	// request sets OverrideReservation.
	Exclusive bool
}

// Node is the placement view of one node: what it has, never what runs on
// it (that is the Allocations).
type Node struct {
	// ID identifies the node; nodes are considered in ID order.
	ID string
	// Pool is the pool tier the node belongs to (its "pool" tag).
	Pool string
	// Zone is the node's availability zone; "" = unknown.
	Zone string
	// Cloud is the node's cloud or provider; "" = unknown.
	Cloud string
	// Attributes are the node's tags, matched by Request.NodeSelector and
	// counted by Request.Spread.
	Attributes map[string]string
	// VCPUs sets the node's CPU capacity (VCPUs × units per vCPU) and the
	// number of cores jobs may hold exclusively.
	VCPUs        uint32
	GPUs         []GPU
	Capabilities []Capability
	Spare        Spare
	// Runtime is the worker's container runtime (RuntimeDocker,
	// RuntimeProcess); "" = the worker did not say, and the node is taken
	// to run anything (see RuntimeRuns).
	Runtime string
	// Images are the image references the node's runtime holds, as
	// NormalizeImageRef gives them (tags, and repository@digest forms):
	// a node holding a job's images ranks above one that must pull them,
	// just before best fit.
	Images []string
	// Unavailable, when set, says why no request may use the node (it is
	// not online, or is draining): the exclusion rule refuses the node
	// with this reason for every request, as if each request's Exclude
	// named it — a request whose Exclude names the node gives its own
	// reason instead. A caller with many such nodes says so here, once
	// per State, rather than in every request: a State keeps them out of
	// its index, so a placement costs nothing per unavailable node, where
	// a request's Exclude is read (and keyed) per request.
	Unavailable string
}

// Requirements are what a job needs of a node (the API's JobRequirements).
type Requirements struct {
	// Capacity is CPU in reference units.
	Capacity float64
	// Cores is the number of cores the job holds exclusively; 0 = shares
	// cores. A job's CPU demand is max(Capacity, Cores × units per vCPU).
	Cores uint32
	// GPUCapacity is taken from one GPU of the node (GPUModel when set).
	GPUCapacity float64
	GPUModel    string
	// Capabilities the node must have free, with counts.
	Capabilities []Capability
	// PriorityBand selects Config.BandCeilings; "" or an unlisted band may
	// fill a node to 100%.
	PriorityBand string
}

// Spread asks for the jobs of a group to be spread evenly across the values
// of a node attribute (a zone or rack tag), as Nomad's spread stanza does
// without targets: among the nodes otherwise ranked equal by anti-affinity,
// spare preference and tier, the node whose attribute value holds the fewest
// jobs of the group wins. Nodes lacking the attribute rank last.
type Spread struct {
	// Attribute is the key of Node.Attributes spread over.
	Attribute string
	// Group names the jobs counted together. "" = the request's BundleID,
	// or "pool:"+Pool when the request has no bundle.
	Group string
}

// Request is one job instance to place.
type Request struct {
	// JobID and Role identify the instance (its allocation key).
	JobID string
	Role  string
	// Template names the job's template for hot-spare reservations
	// (Spare.ReservedFor / WarmFor).
	Template string
	// Pool is the pool whose tiers are tried in order (Config.Pools); "" =
	// every node, as one tier.
	Pool         string
	Requirements Requirements
	// Services are the job's services as the runtime rule sees them: a
	// node whose runtime cannot run one of them is refused (RuntimeRuns).
	// None = anything runs it.
	Services []Service

	// BundleID, ReplicaIndex and JobName place the job within its bundle:
	// anti-affinity applies between replicas, co-location and separation
	// within one replica.
	BundleID     string
	ReplicaIndex int
	JobName      string
	AntiAffinity AntiAffinityPolicy
	// CoLocateWith and SeparateFrom name other jobs of the same replica.
	// Both relations are symmetric: a placed job that names this one binds
	// it too. Jobs not yet placed constrain nothing.
	CoLocateWith []string
	SeparateFrom []string

	// Spread, when set, spreads the group's jobs over a node attribute.
	Spread *Spread
	// NodeSelector lists node attributes that must be equal (a constraint).
	NodeSelector map[string]string
	// Exclude maps node ids to skip to the reason (unhealthy, recently
	// failed, the node the job failed on, a migration's source): what
	// is specific to this request. Nodes no request may use are marked
	// Node.Unavailable instead; an entry here for such a node gives the
	// refusal this request's reason.
	Exclude map[string]string
	// PinNode, when set, is the only node considered (a migration's named
	// target); every requirement is still checked.
	PinNode string
	// Recovery prefers hot spares over every other node (a failed node's
	// jobs); ordinary placement uses spares last.
	Recovery bool
	// OverrideReservation lets the job onto an exclusive spare reserved for
	// other templates.
	OverrideReservation bool
	// Explain asks for the per-node Explanation. It never changes the
	// Result otherwise; it costs a scan of every node and one record per
	// node, where a placement without it reads the State's index.
	Explain bool
}

// Allocation is a job instance already bound to a node. It consumes the
// node's capacity and constrains later placements of its bundle.
type Allocation struct {
	JobID        string
	Role         string
	NodeID       string
	Template     string
	Requirements Requirements
	// GPU is the index, among the node's GPUs, of the GPU the allocation's
	// GPUCapacity is taken from (Result.GPU); ignored when it needs none or
	// the index is out of range.
	GPU          int
	BundleID     string
	ReplicaIndex int
	JobName      string
	CoLocateWith []string
	SeparateFrom []string
	// SpreadGroup is the spread group the allocation counts towards ("" =
	// none).
	SpreadGroup string
}

// Config is the placement configuration from the Manager's configuration.
type Config struct {
	// Pools maps a pool to its tiers, cheapest first; a tier is a node Pool
	// value. A pool not listed has one tier of its own name.
	Pools map[string][]string
	// MilliUnitsPerVCPU overrides the package constant (0 = default).
	MilliUnitsPerVCPU int64
	// BandCeilings maps a priority band to the highest CPU utilisation, in
	// percent of the node's capacity, that placing a job of the band may
	// reach (e.g. bronze 80): the headroom above is left for higher bands.
	// Bands not listed (and "") may reach 100.
	BandCeilings map[string]int
	// PoolSpread spreads the jobs of a pool evenly over a node attribute
	// (pool → attribute key), for requests that ask for no spread of their
	// own (RequestForJob applies it; the group is "pool:"+pool).
	PoolSpread map[string]string
	// PresenceCapabilities names capabilities that are only required to be
	// advertised, never consumed (e.g. a worker's job socket).
	PresenceCapabilities map[string]bool
}
