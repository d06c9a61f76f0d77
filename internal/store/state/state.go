// Package state is the Manager's state store and the deterministic FSM that
// changes it: tables of jobs, instances and nodes in go-memdb, changed only by
// applying raft commands (storev1.Command) in log order.
//
// Determinism is the contract: Apply reads nothing but its arguments and the
// tables — no wall clock, no randomness, no I/O. Times, ids and secrets are
// stamped into the command by the RPC handler before it is proposed, and the
// raft index of the entry is the revision of whatever it writes (a job's
// hash, an instance's fencing token). A test reads this package's source and
// imports to keep it so.
//
// Concurrency: Apply is called by one goroutine at a time (raft's FSM
// goroutine). Readers take a Snapshot, an immutable view that may be used
// concurrently with Apply and with each other; rows returned by a snapshot
// must not be modified.
package state

import (
	"sync/atomic"

	"github.com/hashicorp/go-memdb"
)

// Limits bound what the state keeps.
type Limits struct {
	// MaxHistory is how many history entries a job keeps (oldest dropped).
	MaxHistory int
}

// DefaultLimits are used when a field is zero.
var DefaultLimits = Limits{MaxHistory: 1000}

// State is the set of tables.
type State struct {
	cur    atomic.Pointer[generation]
	limits Limits
}

// generation is one incarnation of the tables; a restore replaces it and
// closes the old one's abandon channel so that watchers re-read.
type generation struct {
	db      *memdb.MemDB
	abandon chan struct{}
	counts  *counts
	// watches wakes readers on change, in place of memdb's watch channels
	// (watch.go).
	watches *watches
}

func newGeneration() *generation {
	sch := schema()
	db, err := memdb.NewMemDB(sch)
	if err != nil {
		panic("state schema: " + err.Error()) // a programming error
	}
	// A memdb snapshot tracks no mutations: its commits close no radix
	// watch channels, so their cost does not grow with the tables (memdb
	// walks the whole tree when a commit touches more than 8,192 nodes).
	// The state wakes its readers itself (watch.go).
	db = db.Snapshot()
	return &generation{db: db, abandon: make(chan struct{}), counts: newCounts(), watches: newWatches(watchSchema(), 0)}
}

// New returns an empty state.
func New(limits Limits) *State {
	if limits.MaxHistory <= 0 {
		limits.MaxHistory = DefaultLimits.MaxHistory
	}
	s := &State{limits: limits}
	s.cur.Store(newGeneration())
	return s
}

// Snapshot returns a consistent read-only view of the tables.
func (s *State) Snapshot() *Read {
	g := s.cur.Load()
	r := &Read{txn: g.db.Txn(false), abandon: g.abandon, w: g.watches}
	r.index = r.Index()
	return r
}
