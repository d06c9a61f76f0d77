package state

import (
	"strings"
	"sync"

	"github.com/hashicorp/go-memdb"
)

// The state's own change notifications (decision 0047).
//
// go-memdb can close a watch channel per radix node that a write touches, but
// the price is paid on every commit: a transaction that touches more than
// 8,192 radix nodes (a 1,000-bind command does) makes go-immutable-radix walk
// the whole tree to find the channels to close, so a commit's cost grows
// with the store. The state therefore writes to a memdb that tracks no
// mutations, and wakes its readers itself: each commit records what it
// changed (memdb's change set: table, row before, row after), turns every
// changed row into the keys a reader could have read it by — the table as a
// whole, and each index's value of the row before and after — and closes
// the channels registered under those keys. Only the indexes someone
// watches are computed at commit; a commit costs in proportion to the rows
// it changed, never to the rows stored.
//
// A reader registers a key with the index of the view it read (Read.Index):
// a change that landed between that view and the registration is found in a
// short history of recent commits and wakes the reader at once. A view older
// than that history gets a closed channel (the reader reads again: a wake
// that finds nothing changed is allowed, one that is missed is not).

// watchKey names what a read depended on: a table's rows under one index
// value, or (index "") the whole table.
type watchKey struct {
	table, index, value string
}

// watchHistory is how many commits a late registration is checked against.
const watchHistory = 16

// minSweep is the fewest registered channels at which a sweep happens
// (see watches.sweepAt).
const minSweep = 1 << 16

// committed is what one commit changed; keys is built from changes on the
// first late registration that needs it.
type committed struct {
	prev, index uint64
	changes     memdb.Changes
	keys        map[watchKey]struct{}
}

// tableIndex is a watched index of a table ("" for the whole table).
type tableIndex struct{ table, index string }

// watches is one generation's notifier. Apply (one goroutine) calls commit;
// readers call ch from any goroutine.
type watches struct {
	schema *memdb.DBSchema

	mu    sync.Mutex
	index uint64 // the last index committed
	chans map[watchKey]chan struct{}
	// watched counts the open channels per table index, so that a commit
	// computes only the keys someone waits on.
	watched map[tableIndex]int
	// sweepAt bounds chans: a channel stays registered until its key
	// changes, though its reader may have moved on (a job whose instance
	// left the node). When chans grows past sweepAt every channel is
	// closed — a wake that finds nothing changed is allowed — and the
	// readers still waiting register again; the next sweep waits until
	// the registrations have doubled.
	sweepAt int
	recent  []*committed // oldest first, at most watchHistory
	stopped bool         // the generation was replaced: every channel is closed
}

func newWatches(schema *memdb.DBSchema, index uint64) *watches {
	return &watches{schema: schema, index: index, chans: map[watchKey]chan struct{}{}, watched: map[tableIndex]int{}, sweepAt: minSweep}
}

// closedCh is a channel that is always closed.
var closedCh = func() chan struct{} {
	ch := make(chan struct{})
	close(ch)
	return ch
}()

// ch returns a channel closed by the first commit after viewIndex that
// changes key (possibly at once, when one already has).
func (w *watches) ch(key watchKey, viewIndex uint64) <-chan struct{} {
	if w == nil {
		return closedCh
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped {
		return closedCh
	}
	if viewIndex < w.index {
		// Commits after the view have landed: is key among them?
		covered := false
		for _, c := range w.recent {
			if c.index <= viewIndex {
				continue
			}
			if !covered && c.prev > viewIndex {
				return closedCh // older than the history
			}
			covered = true
			if c.keys == nil {
				c.keys = w.keysOf(c.changes)
			}
			if _, ok := c.keys[key]; ok {
				return closedCh
			}
		}
		if !covered {
			return closedCh
		}
	}
	ch, ok := w.chans[key]
	if !ok {
		if len(w.chans) >= w.sweepAt {
			w.sweepAt = max(minSweep, 2*len(w.chans))
			w.closeAll()
		}
		ch = make(chan struct{})
		w.chans[key] = ch
		w.watched[tableIndex{key.table, key.index}]++
	}
	return ch
}

// closeAll closes every registered channel. Called with w.mu held.
func (w *watches) closeAll() {
	for k, ch := range w.chans {
		close(ch)
		delete(w.chans, k)
	}
	clear(w.watched)
}

// wake closes key's channel, if any. Called with w.mu held.
func (w *watches) wake(key watchKey) {
	if ch, ok := w.chans[key]; ok {
		close(ch)
		delete(w.chans, key)
		ti := tableIndex{key.table, key.index}
		if w.watched[ti]--; w.watched[ti] == 0 {
			delete(w.watched, ti)
		}
	}
}

// commit records that index (applied after the last one) made changes,
// and wakes the watchers of what they touched.
func (w *watches) commit(index uint64, changes memdb.Changes) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.watched) > 0 {
		for _, c := range changes {
			if c.Table == tableMeta {
				continue
			}
			if w.watched[tableIndex{table: c.Table}] > 0 {
				w.wake(watchKey{table: c.Table})
			}
			for name, ix := range w.schema.Tables[c.Table].Indexes {
				if w.watched[tableIndex{c.Table, name}] == 0 {
					continue
				}
				for _, row := range []any{c.Before, c.After} {
					if row != nil {
						forIndexKeys(c.Table, name, ix.Indexer, row, w.wake)
					}
				}
			}
		}
	}
	if len(w.recent) == watchHistory {
		w.recent[0] = nil
		w.recent = w.recent[1:]
	}
	w.recent = append(w.recent, &committed{prev: w.index, index: index, changes: changes})
	w.index = index
}

// stop closes every channel: the generation has been replaced.
func (w *watches) stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.closeAll()
	w.stopped = true
}

// keysOf is every key a reader could have read the changed rows by.
func (w *watches) keysOf(changes memdb.Changes) map[watchKey]struct{} {
	keys := make(map[watchKey]struct{}, len(changes)*3)
	for _, c := range changes {
		if c.Table == tableMeta {
			continue // the applied index: every commit changes it
		}
		keys[watchKey{table: c.Table}] = struct{}{}
		ts := w.schema.Tables[c.Table]
		for name, ix := range ts.Indexes {
			for _, row := range []any{c.Before, c.After} {
				if row != nil {
					forIndexKeys(c.Table, name, ix.Indexer, row, func(k watchKey) { keys[k] = struct{}{} })
				}
			}
		}
	}
	return keys
}

// forIndexKeys calls fn with the key of each of row's values under one
// index.
func forIndexKeys(table, index string, ixr memdb.Indexer, row any, fn func(watchKey)) {
	switch x := ixr.(type) {
	case memdb.SingleIndexer:
		if ok, v, err := x.FromObject(row); ok && err == nil {
			fn(watchKey{table, index, string(v)})
		}
	case memdb.MultiIndexer:
		if ok, vs, err := x.FromObject(row); ok && err == nil {
			for _, v := range vs {
				fn(watchKey{table, index, string(v)})
			}
		}
	}
}

// keyFor is the key of a read of table by index with args: the rows under
// one value, or the whole table for a prefix or range read.
func (w *watches) keyFor(table, index string, args ...any) watchKey {
	if w == nil || strings.HasSuffix(index, "_prefix") {
		return watchKey{table: table}
	}
	ts, ok := w.schema.Tables[table]
	if !ok {
		return watchKey{table: table}
	}
	ix, ok := ts.Indexes[index]
	if !ok {
		return watchKey{table: table}
	}
	v, err := ix.Indexer.FromArgs(args...)
	if err != nil {
		return watchKey{table: table}
	}
	return watchKey{table, index, string(v)}
}
