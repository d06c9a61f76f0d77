package sim

import (
	"context"
	"time"
)

// Cluster is the Manager cluster a scenario runs against.
type Cluster interface {
	// Members are the members' names and API URLs, in a fixed order.
	Members() []Member
	// Token is an admin API token.
	Token() string
	// Stats measures a member's process: its live heap after a forced
	// collection, and the CPU time it has used so far.
	Stats(ctx context.Context, member string) (ProcessStats, error)
	// Kill takes a member away as a crash does (its peers see its links
	// drop) and brings it back once revive is closed, as a supervisor
	// restarts a crashed daemon. Kill returns once the member is down.
	Kill(ctx context.Context, member string, revive <-chan struct{}) error
}

// Member is one Manager member.
type Member struct {
	Name string
	URL  string
}

// ProcessStats is a member process's memory and CPU.
type ProcessStats struct {
	// HeapBytes is the live heap after a forced garbage collection.
	HeapBytes uint64
	// CPU is the user and system CPU time the process has used.
	CPU time.Duration
	// Goroutines is how many goroutines the process runs.
	Goroutines int
	// Shared says the figures are of a process that holds more than the
	// member (an in-process test cluster: every member, the fleet and the
	// test); they are not the member's own.
	Shared bool
}
