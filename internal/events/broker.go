// Package events is the Manager's event broker: a bounded ring of the events
// the FSM raised, in store-index order, shared by every event-stream
// subscriber.
//
// Publishing never blocks and never waits for a subscriber: each subscriber
// reads the shared ring at its own cursor, and one that falls more than the
// ring's capacity behind is cut off (ErrSlowConsumer) instead of stalling the
// Manager. It reconnects with the last index it saw and misses nothing: the
// events are still in the ring, or it is told to resync from a snapshot
// (ErrResync).
//
// Each event is held once, in an Entry every subscriber shares, with what
// is worked out of it once for all of them (its wire encoding, what it is
// about): sending an event to n subscribers encodes it once (decision 0062).
//
// Concurrency: Publish is called by the FSM goroutine; Subscribe and
// Subscription methods by any number of stream handlers.
package events

import (
	"context"
	"errors"
	"sort"
	"sync"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
)

var (
	// ErrSlowConsumer: the subscriber fell further behind than the ring
	// holds; it must resubscribe from the last index it saw.
	ErrSlowConsumer = errors.New("event consumer too slow: it fell behind the Manager's event buffer")
	// ErrResync: the events after the asked index are no longer held; the
	// subscriber must start again from a snapshot.
	ErrResync = errors.New("events after that index are no longer held; resync from a snapshot")
	// ErrClosed: the broker is shut down.
	ErrClosed = errors.New("event broker closed")
)

// DefaultCapacity is the ring size used when New is given 0.
const DefaultCapacity = 65536

// maxBatch is the size Next aims a batch at (it runs over to finish an index).
const maxBatch = 1024

// Broker holds the newest events.
type Broker struct {
	mu   sync.Mutex
	ring []*Entry
	// seq is the sequence number the next published event gets; the ring
	// holds seqs [seq-n, seq).
	seq uint64
	n   int
	// heldAfter: every event with an index greater than heldAfter that was
	// ever published is still in the ring (or was never published yet).
	heldAfter uint64
	// epoch counts Resets: a subscription from an earlier epoch must
	// resync, whether or not it had read everything.
	epoch  uint64
	notify chan struct{}
	closed bool
}

// New returns a broker holding at most capacity events.
func New(capacity int) *Broker {
	if capacity <= 0 {
		capacity = DefaultCapacity
	}
	return &Broker{ring: make([]*Entry, capacity), notify: make(chan struct{})}
}

// Publish appends events (in index order, each index not lower than the last
// published) and wakes the subscribers. The events must not be modified
// afterwards: every subscriber shares them.
func (b *Broker) Publish(events ...*managerv1.Event) {
	if len(events) == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return
	}
	c := len(b.ring)
	for _, e := range events {
		if b.n == c {
			// Evict the oldest; events of its index may now be missing.
			old := b.ring[(b.seq-uint64(c))%uint64(c)]
			if old.Index() > b.heldAfter {
				b.heldAfter = old.Index()
			}
		} else {
			b.n++
		}
		b.ring[b.seq%uint64(c)] = &Entry{msg: e}
		b.seq++
	}
	close(b.notify)
	b.notify = make(chan struct{})
}

// Reset forgets every held event: after a snapshot restore at index base,
// events up to base are not available from this broker.
func (b *Broker) Reset(base uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return
	}
	for i := range b.ring {
		b.ring[i] = nil
	}
	b.n = 0
	b.heldAfter = base
	b.epoch++
	close(b.notify)
	b.notify = make(chan struct{})
}

// Close wakes every subscriber with ErrClosed.
func (b *Broker) Close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.closed {
		b.closed = true
		close(b.notify)
	}
}

// Subscription reads the ring from a cursor. It is used by one goroutine.
type Subscription struct {
	b      *Broker
	epoch  uint64
	cursor uint64
	// skipThrough drops events with index <= it (already in a snapshot).
	skipThrough uint64
}

// SubscribeAfter returns a subscription that yields every event with an
// index greater than after, or ErrResync when some of them are no longer
// held.
func (b *Broker) SubscribeAfter(after uint64) (*Subscription, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, ErrClosed
	}
	if after < b.heldAfter {
		return nil, ErrResync
	}
	c := uint64(len(b.ring))
	first := b.seq - uint64(b.n)
	// The first held event with index > after.
	i := sort.Search(b.n, func(k int) bool {
		return b.ring[(first+uint64(k))%c].Index() > after
	})
	return &Subscription{b: b, epoch: b.epoch, cursor: first + uint64(i), skipThrough: after}, nil
}

// SubscribeTail returns a subscription that yields events published from now
// on, skipping those with an index <= skipThrough. A caller that takes a
// state snapshot at index I right after subscribing passes I through Skip so
// it sees each change exactly once.
func (b *Broker) SubscribeTail() *Subscription {
	b.mu.Lock()
	defer b.mu.Unlock()
	return &Subscription{b: b, epoch: b.epoch, cursor: b.seq}
}

// Skip makes the subscription drop events with an index <= index.
func (s *Subscription) Skip(index uint64) { s.skipThrough = index }

// Next returns the next events (at least one), blocking until there are some
// or ctx ends. A batch never ends in the middle of an index, so a subscriber
// that resumes after the last index it saw misses nothing. After a Reset
// (the state was replaced by a snapshot restore) it returns ErrResync. The
// returned events must not be modified.
func (s *Subscription) Next(ctx context.Context) ([]*managerv1.Event, error) {
	entries, err := s.NextEntries(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]*managerv1.Event, len(entries))
	for i, e := range entries {
		out[i] = e.msg
	}
	return out, nil
}

// NextEntries is Next returning the broker's entries, shared with every
// other subscriber: a subscriber that sends events on uses their shared
// encoding. The returned slice is the caller's; the entries must not be
// modified.
func (s *Subscription) NextEntries(ctx context.Context) ([]*Entry, error) {
	for {
		s.b.mu.Lock()
		if s.b.closed {
			s.b.mu.Unlock()
			return nil, ErrClosed
		}
		if s.epoch != s.b.epoch {
			s.b.mu.Unlock()
			return nil, ErrResync
		}
		c := uint64(len(s.b.ring))
		first := s.b.seq - uint64(s.b.n)
		if s.cursor < first {
			s.b.mu.Unlock()
			return nil, ErrSlowConsumer
		}
		var out []*Entry
		for ; s.cursor < s.b.seq; s.cursor++ {
			e := s.b.ring[s.cursor%c]
			if len(out) >= maxBatch && e.Index() != out[len(out)-1].Index() {
				break
			}
			if e.Index() <= s.skipThrough {
				continue
			}
			out = append(out, e)
		}
		wait := s.b.notify
		s.b.mu.Unlock()
		if len(out) > 0 {
			return out, nil
		}
		select {
		case <-wait:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}
