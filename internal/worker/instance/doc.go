// Package instance runs a worker's job instances: one actor per (job id,
// role) that applies the Manager's commands (start, start-prepared, stop,
// update) and its services' exits in order, under fencing tokens; keeps the
// instance's record on disk before acting; orders its services' starts and
// stops (dependsOn); restarts services under their policies and budgets;
// adopts what an earlier worker process left running; stops
// lease-protected instances when the lease runs out; and opens each
// instance's job socket. It is the worker's counterpart of a task runner.
//
// The agent (internal/worker) makes a Supervisor with New for each Run and
// gives it the Host it needs (reports, notices, goroutines, the lease);
// it routes commands with Command, adopts with Adopt, and stops everything
// with StopAll. The contract each part keeps is in internal/worker's
// package comment (Instances, Supervision, Adoption, Leases): this package
// is where it is carried out.
//
// Following one start command: commands.go (start) → record.go (the
// record written first) → prepare.go (the runtime's Prepare, cancellable)
// → instance.go (startAll, in order.go's order; watch) → restart.go (an
// exit) → instance.go (shutdown).
package instance
