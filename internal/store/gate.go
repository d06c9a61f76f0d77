package store

import (
	"sync"
	"sync/atomic"
	"time"
)

// commitGate holds new proposals back while commands this member handed to
// its raft log have not yet reached its FSM (decision 0061).
//
// Why: hashicorp/raft's leader loop writes a batch to the log and then, when
// both are ready, picks at random between handing the committed batch to
// the FSM and taking the proposals that queued during the write into a new
// log write. Half the time a committed batch — and every caller waiting on
// it — waits one more fsync before it is applied. Holding proposals outside
// raft until the FSM has been handed the batch in flight leaves the loop
// only the commit to take; the held proposals then go to raft together, as
// one batch, a few microseconds later.
//
// The gate can never hold a proposal for good: a wait ends when the FSM is
// handed the batch, when the store closes, or after the store's
// ProposalHold, whichever comes first (a leadership lost mid-batch, a
// refused log write, a follower's log). Past that a proposal goes to raft
// as it did without the gate.
//
// wrote is called by the log (raft's leader loop, or its follower path)
// before a batch is written; reached by the FSM's goroutine before it
// applies a batch; wait by the proposer. All may run concurrently.
type commitGate struct {
	mu sync.Mutex
	// written is the highest index of a command handed to the log;
	// started the highest index handed to the FSM (or restored from a
	// snapshot).
	written, started uint64
	// open is closed when started catches up with written; nil while the
	// gate is open.
	open chan struct{}
	// holding is true while a wait is blocked (tests watch it).
	holding atomic.Bool
}

// wrote records that the log is about to store a command at index (the
// batch's last command).
func (g *commitGate) wrote(index uint64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if index <= g.written {
		return
	}
	g.written = index
	if g.written > g.started && g.open == nil {
		g.open = make(chan struct{})
	}
}

// dropped records that the log deleted the entries min..max: when that
// was its tail (a new leader's log replacing entries never committed),
// what was written there will not reach the FSM.
func (g *commitGate) dropped(min, max uint64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if min > g.written || max < g.written {
		return // not the tail written last (a compaction of the head)
	}
	g.written = min - 1
	g.openIfCaughtUpLocked()
}

// reached records that the FSM has been handed every entry up to index.
func (g *commitGate) reached(index uint64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if index > g.started {
		g.started = index
	}
	g.openIfCaughtUpLocked()
}

// openIfCaughtUpLocked opens the gate once the FSM has been handed
// everything written. The caller holds mu.
func (g *commitGate) openIfCaughtUpLocked() {
	if g.started >= g.written && g.open != nil {
		close(g.open)
		g.open = nil
	}
}

// wait returns when the gate is open, stop is closed or the channel limit
// makes (called only if the gate is shut) fires, and says whether the gate
// was open (false: it gave up waiting).
func (g *commitGate) wait(stop <-chan struct{}, limit func() <-chan time.Time) bool {
	g.mu.Lock()
	open := g.open
	g.mu.Unlock()
	if open == nil {
		return true
	}
	g.holding.Store(true)
	defer g.holding.Store(false)
	select {
	case <-open:
		return true
	case <-stop:
	case <-limit():
	}
	return false
}
