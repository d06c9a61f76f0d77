// Package nodes is the Manager's side of its workers: one connection per
// worker, dialled at the address the worker registered, carrying the
// NodeController stream, and a level-triggered reconciler that makes each
// worker hold exactly the instances the store says it should.
//
// The store is the source of truth for what should run (an instance's
// desired state and fencing token); the worker's reports are the truth of
// what does run. On every change of either, Plan compares the two and the
// connection sends the commands that close the gap (start, start prepared,
// stop, update). Commands are idempotent and fenced by token, so resending
// after a reconnect or a Manager restart is always safe, and a partitioned
// worker that comes back is told to stop whatever a newer binding has
// superseded.
//
// Every report a worker sends is recorded in the order received, and before
// the end of the stream that carried it is handled. Once a batch holding
// STOPPED reports is committed the worker is told so (ReportsRecorded):
// only then does it forget those instances' tombstones, so a report lost to
// a Manager that failed before committing it comes again in the next hello.
//
// Liveness: a worker whose stream has been gone longer than LostGrace makes
// its node lost (its instances stopping with reason nodeStopped); a stream
// that stays up but carries no heartbeat for three intervals is dropped.
//
// Leases: every heartbeat that carries its send time (on the worker's
// monotonic clock) is answered with a LeaseGrant echoing it, with the lease
// TTL and whether leases are paused (the store's LeaseState). The worker
// stops its lease-protected instances when no grant has extended its lease
// for two thirds of the TTL; the primary counts a node's lease from the last
// heartbeat it heard (Live.LeaseRefreshed), so its view always ends later
// than the worker's. A lease-protected instance is started on a worker only
// once that worker has sent a heartbeat on the current stream.
//
// Termination and deregistration: a stopping node whose worker is not
// connected (or never registered) has nothing to stop, so it is finished
// without its worker (recorded terminated, or its slot removed).
//
// The Controller runs on the primary only; its goroutines stop when the
// context given to Run ends.
package nodes
