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
// with StopAll. The lease itself (grants, the fencing loop) is the
// agent's; see internal/worker's package comment.
//
// # Instances
//
// An instance is keyed by (job id, role) and held under a fencing token. Its
// record, DataDir/instances/<job>_<role>_<hash>.json, holds the last start
// command (with the latest spec an update gave), the desired state and the
// restart bookkeeping; it is written before the worker acts on a command.
// Each instance has one goroutine that applies its commands and its services'
// exits in order, so everything about one instance is serialised; instances
// proceed independently.
//
// Commands are idempotent and fenced: a start with an older token than the
// one held is refused (FAILED_PRECONDITION "superseded by token N"), and so
// is one older than any token this worker process has accepted for the key,
// even after that instance is gone; the same token changes nothing; a newer
// token replaces the held instance (reported STOPPING/STOPPED under the old
// token with reason NODE_STOPPED, "superseded by token N"). A stop of an
// instance holding a newer token than the stop's does nothing. Every command
// is acknowledged (CommandAck) after the reports it caused; refusals carry a
// gRPC code name (INVALID_ARGUMENT, NOT_FOUND, FAILED_PRECONDITION, INTERNAL,
// UNAVAILABLE).
//
// An instance that stops (a stop command, or a failure) leaves a tombstone:
// its STOPPED report, kept (in memory and in its record) until it has been
// sent on a live stream, so that the Manager learns why even if the stream
// was down when it happened. Tombstones appear in the hello inventory.
//
// # Supervision
//
// One goroutine per running service waits for it to exit. A service that
// exits while its instance runs is restarted when its policy says so (ALWAYS,
// or ON_FAILURE with a non-zero exit) and its budget (count restarts within
// period_s seconds) is not spent, after a backoff of 1 s doubling to 30 s
// (reset once the service has run for 60 s; timed by Config.Clock).
// Otherwise the instance has failed: its other services are stopped and it is
// reported STOPPING (JOB_FAILED, with the exit code and the service's last
// output) and STOPPED. Updated specs are kept for later re-creation; running
// services are never recreated implicitly. A service an update removed from
// the job keeps running until it exits; its exit is then not a failure and it
// is not restarted; when the instance stops, such services are stopped first.
// A restart is booked (counted against the budget) once per exit, when the
// exit is seen; the record keeps when it is due, so that a worker restart
// during the backoff finishes that restart instead of booking it again.
//
// # Adoption
//
// When the worker's Run starts (Supervisor.Adopt) it reads the records and the runtime's List (its
// cluster's services and those without a cluster id): running services are
// adopted (waited on again, never restarted); services that exited while
// the worker was down get their restart policy applied at once; an instance
// whose stop was in progress is stopped; runtime services of its cluster
// that no record names belong to nobody and are stopped and removed;
// services without a cluster id that no record names are left running,
// untouched (they may be another Manager's). Each of these, and services a
// record names found missing (re-created) or adopted without a cluster id,
// is sent to the Manager as a WorkerNotice for the job's history. A record that
// cannot be read (damaged, or written by a newer worker) never costs a live
// channel: the services of its key are left running untouched, and are not
// reported, until the Manager starts (re-adopting them under the same token)
// or stops the instance or the node. When an unreadable record's file name
// matches no runtime key, no orphans are removed at all.
//
// Following one start command: commands.go (start) → record.go (the
// record written first) → prepare.go (the runtime's Prepare, cancellable)
// → instance.go (startAll, in order.go's order; watch) → restart.go (an
// exit) → instance.go (shutdown).
package instance
