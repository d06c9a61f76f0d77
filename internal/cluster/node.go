package cluster

// Cluster states a member starts in.
const (
	// StateNew: a new store bootstraps the cluster with its configured members.
	StateNew = "new"
	// StateExisting: a new store joins the running cluster.
	StateExisting = "existing"
)

// DefaultRaftPort is raft's default port in a cluster.
const DefaultRaftPort = 6792

// Node is a member of the cluster as config.yaml names it.
type Node struct {
	// Name is the member's node name (its raft id).
	Name string `json:"name"`
	// Raft is its raft address (host:port).
	Raft string `json:"raft"`
	// API is its API URL (http(s)://host:port).
	API string `json:"api"`
	// Witness: it votes but holds no job state it acts on and serves no API.
	Witness bool `json:"witness,omitempty"`
}
