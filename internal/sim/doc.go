// Package sim simulates a fleet of worker nodes in one process, speaking the
// real NodeController protocol to a real Manager cluster, so that the
// Manager can be measured at a scale this machine could never run real
// workers at (thousands of nodes, a hundred thousand instances).
//
// A simulated node does what a worker does on the wire and nothing else: it
// registers with a slot token (ClusterMemberRegister), serves the Control
// stream the Manager dials, answers the hello with its inventory, sends
// heartbeats with a load at the interval the hello gives, acknowledges
// every command, reports every phase change of its instances, keeps
// STOPPED tombstones until the Manager says it has recorded them, and
// refuses a hello from an older primary. Its instances run nothing: a
// start is RUNNING at once (or after Config.StartDelay), a stop is STOPPED
// at once.
//
// One HTTP/2 listener serves every node (fleet.go); a stream is routed to
// its node by the node secret it carries as its bearer token. The Fleet
// counts, per instance, the fencing tokens it was started under, across
// every node: an instance started twice is visible there (Fleet.Starts).
//
// Run (scenario.go) drives a whole measurement against a Cluster: register
// the nodes, measure the primary, create jobs in bundles, follow them with
// event-stream subscribers, fail the primary over, and check that every
// instance runs exactly once.
package sim
