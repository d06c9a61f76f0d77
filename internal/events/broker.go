// Package events is the Manager's event broker: a ring of the events the
// FSM raised, in store-index order, shared by every event-stream
// subscriber.
//
// The ring keeps a time window (decision 0066): every event is held for at
// least the retention after it was published, the ring growing (doubling)
// while its oldest event is younger than that, within a bound on the held
// events' estimated memory; it never holds fewer than its count floor
// (the configured event buffer), and shrinks back (halving) once the window
// needs less. An idle broker drops what has aged out by itself.
//
// Publishing never blocks and never waits for a subscriber: each subscriber
// reads the shared ring at its own cursor (a sequence number, valid across
// the ring's growth and shrinking), and one that falls behind what the ring
// holds is cut off (ErrSlowConsumer) instead of stalling the Manager. It
// reconnects with the last index it saw and misses nothing: the events are
// still in the ring, or it is told to resync from a snapshot (ErrResync).
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
	"time"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/internal/clock"
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

const (
	// DefaultCapacity is the count floor when none is given: the broker
	// never holds fewer than this many of the newest events.
	DefaultCapacity = 65536
	// DefaultRetention is how long every event is held when no retention
	// is given: long enough for a consumer's restart, a Manager failover
	// and a few minutes of lag behind a burst (decision 0066).
	DefaultRetention = 5 * time.Minute
	// DefaultMaxBytes bounds the held events' estimated memory when no
	// bound is given (see EstimatedSize): about 200,000 of a job's events
	// as a large fleet raises them.
	DefaultMaxBytes = 512 << 20
)

// maxBatch is the size Next aims a batch at (it runs over to finish an index).
const maxBatch = 1024

// Config sizes a broker.
type Config struct {
	// Events is the count floor: the broker never holds fewer than this
	// many of the newest events, whatever their age or size (0:
	// DefaultCapacity). The ring starts at this size.
	Events int
	// Retention is the time window: beyond the floor, every event is held
	// at least this long after it was published, as long as the held
	// events fit MaxBytes (0: DefaultRetention; negative: no window, the
	// broker holds exactly the Events newest events).
	Retention time.Duration
	// MaxBytes bounds the estimated memory (EstimatedSize) of every held
	// event, the floor's included; the floor is held even when it alone is
	// over (0: DefaultMaxBytes).
	MaxBytes int64
	// Clock stamps each event's publish time and times the window (nil:
	// the system clock).
	Clock clock.Clock
}

// Broker holds the newest events.
type Broker struct {
	clock     clock.Clock
	floor     int
	retention time.Duration // <= 0: no time window
	maxBytes  int64

	mu sync.Mutex
	// ring holds seqs [seq-n, seq), seq s at ring[s%len(ring)];
	// len(ring) >= floor, and n <= len(ring). Slots not held are nil.
	ring []*Entry
	// seq is the sequence number the next published event gets.
	seq uint64
	n   int
	// bytes is the held entries' EstimatedSize, summed.
	bytes int64
	// evictedEarly counts events dropped younger than the retention.
	evictedEarly uint64
	// heldAfter: every event with an index greater than heldAfter that was
	// ever published is still in the ring (or was never published yet).
	heldAfter uint64
	// epoch counts Resets: a subscription from an earlier epoch must
	// resync, whether or not it had read everything.
	epoch  uint64
	notify chan struct{}
	closed bool
	// janitor reports whether the goroutine that drops aged-out events
	// while nothing is published is running (it runs while the window
	// holds more than the floor); done stops it, and janitorDone is closed
	// when it has returned.
	janitor     bool
	done        chan struct{}
	janitorDone chan struct{}
}

// New returns a broker holding exactly the capacity newest events (0:
// DefaultCapacity), with no time window: NewBroker(Config{Events:
// capacity, Retention: -1}).
func New(capacity int) *Broker { return NewBroker(Config{Events: capacity, Retention: -1}) }

// NewBroker returns a broker sized by cfg. Close stops it.
func NewBroker(cfg Config) *Broker {
	if cfg.Events <= 0 {
		cfg.Events = DefaultCapacity
	}
	if cfg.Retention == 0 {
		cfg.Retention = DefaultRetention
	}
	if cfg.MaxBytes <= 0 {
		cfg.MaxBytes = DefaultMaxBytes
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	return &Broker{
		clock: cfg.Clock, floor: cfg.Events, retention: cfg.Retention, maxBytes: cfg.MaxBytes,
		ring: make([]*Entry, cfg.Events), notify: make(chan struct{}), done: make(chan struct{}),
	}
}

// windowed reports whether the broker keeps a time window.
func (b *Broker) windowed() bool { return b.retention > 0 }

// Publish appends events (in index order, each index not lower than the last
// published) and wakes the subscribers. The events must not be modified
// afterwards: every subscriber shares them. It is O(1) amortised per event
// (the ring's growth copies it, doubling) and never waits for a subscriber.
func (b *Broker) Publish(events ...*managerv1.Event) {
	if len(events) == 0 {
		return
	}
	now := b.clock.Now()
	entries := make([]*Entry, len(events))
	for i, e := range events {
		entries[i] = &Entry{msg: e, index: e.GetIndex(), at: now, size: EstimatedSize(e)}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return
	}
	b.expire(now)
	for _, e := range entries {
		b.push(e, now)
	}
	if b.windowed() && b.n > b.floor && !b.janitor {
		b.janitor = true
		b.janitorDone = make(chan struct{})
		go b.runJanitor(b.janitorDone)
	}
	close(b.notify)
	b.notify = make(chan struct{})
}

// push appends e, making room: the ring grows while its oldest event is
// younger than the retention and the bytes allow, and otherwise drops its
// oldest. Then it drops the oldest beyond the floor while the held bytes
// are over the bound. b.mu is held.
func (b *Broker) push(e *Entry, now time.Time) {
	if b.n == len(b.ring) {
		if b.windowed() && now.Sub(b.oldest().at) < b.retention && b.bytes+e.size <= b.maxBytes {
			b.resize(2 * len(b.ring))
		} else {
			b.evictOldest(now)
		}
	}
	b.ring[b.seq%uint64(len(b.ring))] = e
	b.seq++
	b.n++
	b.bytes += e.size
	for b.n > b.floor && b.bytes > b.maxBytes {
		b.evictOldest(now)
	}
}

// expire drops the events beyond the floor that have been held for the
// retention, then shrinks the ring (halving, never below the floor) while
// it is at most a quarter full: a ring that grew back right after
// shrinking has had as many events published as it copied. b.mu is held.
func (b *Broker) expire(now time.Time) {
	if !b.windowed() {
		return
	}
	for b.n > b.floor && now.Sub(b.oldest().at) >= b.retention {
		b.evictOldest(now)
	}
	size := len(b.ring)
	for size > b.floor && b.n <= size/4 {
		size = max(b.floor, size/2)
	}
	if size != len(b.ring) {
		b.resize(size)
	}
}

// oldest is the oldest held entry; b.n > 0 and b.mu is held.
func (b *Broker) oldest() *Entry {
	return b.ring[(b.seq-uint64(b.n))%uint64(len(b.ring))]
}

// evictOldest drops the oldest held entry; b.n > 0 and b.mu is held.
func (b *Broker) evictOldest(now time.Time) {
	i := (b.seq - uint64(b.n)) % uint64(len(b.ring))
	old := b.ring[i]
	b.ring[i] = nil
	b.n--
	b.bytes -= old.size
	// Events of its index may now be missing.
	if old.Index() > b.heldAfter {
		b.heldAfter = old.Index()
	}
	if b.windowed() && now.Sub(old.at) < b.retention {
		b.evictedEarly++
	}
}

// resize moves the held entries to a ring of size slots (>= b.n); each
// stays at its sequence number, so the subscribers' cursors hold. b.mu is
// held.
func (b *Broker) resize(size int) {
	ring := make([]*Entry, size)
	for s := b.seq - uint64(b.n); s < b.seq; s++ {
		ring[s%uint64(size)] = b.ring[s%uint64(len(b.ring))]
	}
	b.ring = ring
}

// runJanitor drops the events that age out while nothing is published, so
// that an idle Manager gives their memory back; it returns once the
// window holds no more than the floor, or the broker is closed.
func (b *Broker) runJanitor(done chan struct{}) {
	defer close(done)
	for {
		b.mu.Lock()
		if b.closed || b.n <= b.floor {
			b.janitor = false
			b.mu.Unlock()
			return
		}
		wait := b.oldest().at.Add(b.retention).Sub(b.clock.Now())
		b.mu.Unlock()
		t := b.clock.NewTimer(wait)
		select {
		case <-t.C():
		case <-b.done:
			t.Stop()
		}
		b.mu.Lock()
		if !b.closed {
			b.expire(b.clock.Now())
		}
		b.mu.Unlock()
	}
}

// Stats is what a broker holds.
type Stats struct {
	// Events is how many events are held, Bytes their EstimatedSize
	// summed, and Slots the ring's length.
	Events int
	Bytes  int64
	Slots  int
	// OldestAge is how long ago the oldest held event was published (0
	// when none is held).
	OldestAge time.Duration
	// EvictedEarly counts the events dropped younger than the retention
	// (by the bound on bytes, or by the floor's ring when the window could
	// not grow), since the broker was made.
	EvictedEarly uint64
}

// Stats returns what the broker holds now.
func (b *Broker) Stats() Stats {
	now := b.clock.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	st := Stats{Events: b.n, Bytes: b.bytes, Slots: len(b.ring), EvictedEarly: b.evictedEarly}
	if b.n > 0 {
		st.OldestAge = max(0, now.Sub(b.oldest().at))
	}
	return st
}

// Reset forgets every held event: after a snapshot restore at index base,
// events up to base are not available from this broker.
func (b *Broker) Reset(base uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return
	}
	b.ring = make([]*Entry, b.floor)
	b.n = 0
	b.bytes = 0
	b.heldAfter = base
	b.epoch++
	close(b.notify)
	b.notify = make(chan struct{})
}

// Close wakes every subscriber with ErrClosed and stops the broker's
// goroutine, returning once it has.
func (b *Broker) Close() {
	b.mu.Lock()
	done := b.janitorDone
	if !b.closed {
		b.closed = true
		close(b.notify)
		close(b.done)
	}
	b.mu.Unlock()
	if done != nil {
		<-done
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
