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
// the channels registered under those keys. A commit costs in proportion to
// the rows it changed, never to the rows stored.
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

// committed is what one commit changed.
type committed struct {
	prev, index uint64
	keys        map[watchKey]struct{}
}

// watches is one generation's notifier. Apply (one goroutine) calls commit;
// readers call ch from any goroutine.
type watches struct {
	schema *memdb.DBSchema

	mu      sync.Mutex
	index   uint64 // the last index committed
	chans   map[watchKey]chan struct{}
	recent  []committed // oldest first, at most watchHistory
	stopped bool        // the generation was replaced: every channel is closed
}

func newWatches(schema *memdb.DBSchema, index uint64) *watches {
	return &watches{schema: schema, index: index, chans: map[watchKey]chan struct{}{}}
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
		ch = make(chan struct{})
		w.chans[key] = ch
	}
	return ch
}

// commit records that index (applied after prev) changed the keys of
// changes, and wakes their watchers.
func (w *watches) commit(index uint64, changes memdb.Changes) {
	keys := w.keysOf(changes)
	w.mu.Lock()
	defer w.mu.Unlock()
	for k := range keys {
		if ch, ok := w.chans[k]; ok {
			close(ch)
			delete(w.chans, k)
		}
	}
	if len(w.recent) == watchHistory {
		copy(w.recent, w.recent[1:])
		w.recent = w.recent[:watchHistory-1]
	}
	w.recent = append(w.recent, committed{prev: w.index, index: index, keys: keys})
	w.index = index
}

// stop closes every channel: the generation has been replaced.
func (w *watches) stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for k, ch := range w.chans {
		close(ch)
		delete(w.chans, k)
	}
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
					addIndexKeys(keys, c.Table, name, ix.Indexer, row)
				}
			}
		}
	}
	return keys
}

// addIndexKeys adds the keys of row's values under one index.
func addIndexKeys(keys map[watchKey]struct{}, table, index string, ixr memdb.Indexer, row any) {
	switch x := ixr.(type) {
	case memdb.SingleIndexer:
		if ok, v, err := x.FromObject(row); ok && err == nil {
			keys[watchKey{table, index, string(v)}] = struct{}{}
		}
	case memdb.MultiIndexer:
		if ok, vs, err := x.FromObject(row); ok && err == nil {
			for _, v := range vs {
				keys[watchKey{table, index, string(v)}] = struct{}{}
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
