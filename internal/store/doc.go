// Package store is the Manager's replicated store: hashicorp/raft with
// raft-wal as the log and stable store (one fsync per append batch) and
// raft's file snapshot store, driving the deterministic FSM of package
// state.
//
// Every write goes through Apply: the handler builds a storev1.Command with
// its time and ids stamped, Apply proposes it, and returns once it is
// committed to the log on disk and applied — so an acknowledged write
// survives kill -9. The result carries the raft index: the revision of what
// was written, the resume point of the event stream, the fencing token of an
// instance binding. Reads take state snapshots (State().Snapshot()) and never
// go through raft.
//
// A single member bootstraps itself on first start; later starts replay the
// newest snapshot and the log after it.
package store
