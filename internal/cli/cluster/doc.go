// Package cluster is norsk-ctl's Manager-cluster commands: the cluster group
// (status, events, add and remove members, force-standalone, leave-quorum) and
// the lease group (leases of lease-protected jobs: status, pause for a
// Manager's maintenance, resume).
package cluster
