package events_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"pgregory.net/rapid"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/internal/clock"
	"github.com/norsk-go/norsk-manager/internal/events"
)

var epoch = time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)

// sizedEv is an event of the same EstimatedSize as every other sizedEv
// (its index has two bytes as a varint: 128 to 16383).
func sizedEv(index uint64) *managerv1.Event { return ev(128+index, "x") }

var evSize = events.EstimatedSize(sizedEv(0))

// step is one thing a window test does: advance the fake clock, then
// publish publish events (one index each). After each, the test waits for
// the broker's own goroutine to drop what aged out (with nothing
// published, it is the goroutine that does).
type step struct {
	advance time.Duration
	publish int
}

// TestWindow: the ring grows while its oldest event is younger than the
// retention, drops what is older beyond the floor, shrinks back, keeps the
// floor whatever the age or the bytes, and stays within the byte bound.
func TestWindow(t *testing.T) {
	const floor = 4
	tests := []struct {
		name      string
		retention time.Duration
		maxEvents int64 // the byte bound, in events of evSize (0: the default)
		steps     []step
		// want: the held events, the ring's slots, the events dropped
		// younger than the retention, and the oldest held index as
		// SubscribeAfter sees it (the lowest after that does not resync).
		events, slots int
		early         uint64
		resumeFrom    uint64
	}{
		{"grows while the oldest is younger than the retention", time.Minute, 0,
			[]step{{publish: 10}}, 10, 16, 0, 0},
		{"grows in batches as in single events", time.Minute, 0,
			[]step{{publish: 3}, {advance: 30 * time.Second, publish: 3}, {advance: 29 * time.Second, publish: 3}}, 9, 16, 0, 0},
		{"no window: a ring of the floor", -1, 0,
			[]step{{publish: 10}}, 4, 4, 0, 6},
		{"drops beyond the floor what was held for the retention", time.Minute, 0,
			[]step{{publish: 10}, {advance: time.Minute, publish: 1}}, 4, 8, 0, 7},
		{"keeps what is a moment younger than the retention", time.Minute, 0,
			[]step{{publish: 8}, {advance: 59 * time.Second, publish: 1}, {advance: time.Second - 1, publish: 1}}, 10, 16, 0, 0},
		{"an event exactly the retention old is dropped", time.Minute, 0,
			[]step{{publish: 8}, {advance: 59 * time.Second, publish: 1}, {advance: time.Second, publish: 1}}, 4, 8, 0, 6},
		{"shrinks by halves to a ring at most half full", time.Minute, 0,
			[]step{{publish: 64}, {advance: time.Minute, publish: 1}}, 4, 8, 0, 61},
		{"keeps the floor's newest however old they are", time.Minute, 0,
			[]step{{publish: 64}, {advance: time.Hour}, {advance: time.Hour, publish: 1}}, 4, 8, 0, 61},
		{"the byte bound drops the oldest beyond the floor", time.Minute, 6,
			[]step{{publish: 10}}, 6, 8, 4, 4},
		{"the floor is held over the byte bound", time.Minute, 2,
			[]step{{publish: 10}}, 4, 4, 6, 6},
		{"an idle broker drops what aged out by itself", time.Minute, 0,
			[]step{{publish: 20}, {advance: time.Minute}}, 4, 8, 0, 16},
		{"an idle broker waits for the oldest to age out", time.Minute, 0,
			[]step{{publish: 10}, {advance: 30 * time.Second, publish: 10}, {advance: 30*time.Second - 1}}, 20, 32, 0, 0},
		{"an idle broker drops each event as it ages out", time.Minute, 0,
			[]step{{publish: 10}, {advance: 30 * time.Second, publish: 10}, {advance: 30 * time.Second}}, 10, 32, 0, 10},
		{"an idle broker keeps the floor", time.Minute, 0,
			[]step{{publish: 3}, {advance: time.Hour}}, 3, 4, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				clk := clock.NewFake(epoch)
				b := events.NewBroker(events.Config{Events: floor, Retention: tt.retention, MaxBytes: tt.maxEvents * evSize, Clock: clk})
				defer b.Close()
				var index uint64
				for _, s := range tt.steps {
					clk.Advance(s.advance)
					synctest.Wait() // the broker's goroutine has done what it had to
					var batch []*managerv1.Event
					for range s.publish {
						index++
						batch = append(batch, sizedEv(index))
					}
					b.Publish(batch...)
					synctest.Wait()
				}
				st := b.Stats()
				if st.Events != tt.events || st.Slots != tt.slots || st.EvictedEarly != tt.early || st.Bytes != int64(st.Events)*evSize {
					t.Errorf("held %d events (%d bytes) in %d slots, %d dropped early; want %d events (%d bytes) in %d slots, %d dropped early",
						st.Events, st.Bytes, st.Slots, st.EvictedEarly, tt.events, int64(tt.events)*evSize, tt.slots, tt.early)
				}
				// Every held event is still there for a subscriber, from
				// the oldest on; before it, a resync.
				if tt.resumeFrom > 0 {
					if _, err := b.SubscribeAfter(128 + tt.resumeFrom - 1); !errors.Is(err, events.ErrResync) {
						t.Errorf("SubscribeAfter(before the oldest held) = %v, want ErrResync", err)
					}
				}
				s, err := b.SubscribeAfter(128 + tt.resumeFrom)
				if err != nil {
					t.Fatalf("SubscribeAfter(%d): %v", tt.resumeFrom, err)
				}
				got, err := drain(t, s)
				var want []*managerv1.Event
				for i := tt.resumeFrom + 1; i <= index; i++ {
					want = append(want, sizedEv(i))
				}
				if err != nil || got != describe(want) {
					t.Errorf("resuming after %d: %q, %v; want %q", tt.resumeFrom, got, err, describe(want))
				}
			})
		})
	}
}

// TestWindowOldestAge: Stats tells how old the oldest held event is.
func TestWindowOldestAge(t *testing.T) {
	clk := clock.NewFake(epoch)
	b := events.NewBroker(events.Config{Events: 4, Retention: time.Minute, Clock: clk})
	defer b.Close()
	if st := b.Stats(); st.OldestAge != 0 || st.Events != 0 {
		t.Errorf("empty broker: %+v", st)
	}
	b.Publish(sizedEv(1))
	clk.Advance(10 * time.Second)
	b.Publish(sizedEv(2))
	clk.Advance(5 * time.Second)
	if st := b.Stats(); st.OldestAge != 15*time.Second {
		t.Errorf("oldest age = %v, want 15s", st.OldestAge)
	}
}

// TestWindowCursorAcrossResize: a subscriber's cursor is a sequence
// number: it holds while the ring grows and shrinks under it.
func TestWindowCursorAcrossResize(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clk := clock.NewFake(epoch)
		b := events.NewBroker(events.Config{Events: 4, Retention: time.Minute, Clock: clk})
		defer b.Close()
		var want []*managerv1.Event // want[i] is event i+1
		publish := func(from, to uint64) {
			for i := from; i <= to; i++ {
				e := sizedEv(i)
				want = append(want, e)
				b.Publish(e)
			}
		}
		check := func(s *events.Subscription, from, to int) {
			t.Helper()
			got, err := drain(t, s)
			if err != nil || got != describe(want[from-1:to]) {
				t.Errorf("got %q, %v; want events %d to %d", got, err, from, to)
			}
		}
		publish(1, 3)
		early := b.SubscribeTail()
		late, err := b.SubscribeAfter(128 + 1)
		if err != nil {
			t.Fatal(err)
		}
		publish(4, 40) // grows from 4 to 64 slots under both cursors
		check(late, 2, 40)
		behind, err := b.SubscribeAfter(128 + 36)
		if err != nil {
			t.Fatal(err)
		}
		clk.Advance(time.Minute)
		synctest.Wait()
		// Aged out: the floor's 4 newest are left, in 8 slots.
		if st := b.Stats(); st.Events != 4 || st.Slots != 8 {
			t.Fatalf("after the window passed: %+v", st)
		}
		if _, err := drain(t, early); !errors.Is(err, events.ErrSlowConsumer) {
			t.Errorf("a cursor on a dropped event: %v, want ErrSlowConsumer", err)
		}
		check(behind, 37, 40)
		publish(41, 50) // grows from 8 to 16 slots
		check(late, 41, 50)
		check(behind, 41, 50)
	})
}

// TestWindowReset: a reset forgets the window and the ring goes back to
// the floor.
func TestWindowReset(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clk := clock.NewFake(epoch)
		b := events.NewBroker(events.Config{Events: 4, Retention: time.Minute, Clock: clk})
		defer b.Close()
		for i := range uint64(20) {
			b.Publish(sizedEv(i + 1))
		}
		b.Reset(128 + 20)
		synctest.Wait() // the broker's goroutine ends: nothing left to age out
		if st := b.Stats(); st.Events != 0 || st.Slots != 4 || st.Bytes != 0 {
			t.Errorf("after Reset: %+v", st)
		}
	})
}

// TestWindowCloseStopsTheJanitor: Close returns once the goroutine that
// drops aged-out events has stopped (goleak checks none is left).
func TestWindowCloseStopsTheJanitor(t *testing.T) {
	clk := clock.NewFake(epoch)
	b := events.NewBroker(events.Config{Events: 1, Retention: time.Minute, Clock: clk})
	b.Publish(evs("1:a", "2:b", "3:c")...) // beyond the floor: the janitor waits for 1:a to age
	b.Close()
	b.Close()
	b.Publish(evs("4:d")...)
}

// TestWindowProperty: whatever is published, however the clock moves and
// whenever a subscriber subscribes and reads, a subscriber gets every
// event after its index exactly once and in order, or it is told it fell
// behind (ErrSlowConsumer) or must resync (ErrResync) — never a gap. And
// it is told so only for an event the window may drop: one outside the
// floor's newest events that was held for the retention (or, with a small
// byte bound, any outside the floor).
//
// The broker's own goroutine drops aged-out events whenever the fake clock
// has moved, at some moment the test does not wait for: whatever it does
// is something the window may do, so every check holds either way.
func TestWindowProperty(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) { windowMachine(rt) })
}

// published is an event the property test published, and when.
type published struct {
	e  *managerv1.Event
	at time.Time
}

// modelSub is a subscription and what it must deliver.
type modelSub struct {
	s     *events.Subscription
	after uint64 // it wants every event of index > after
	from  int    // published-since-reset position it starts at
	got   int    // how many of its wanted events it has had
	// pos is the published-since-reset position of the next event its
	// cursor reads (one it skips included: an index it had already seen).
	pos  int
	dead bool
}

func windowMachine(rt *rapid.T) {
	floor := rapid.IntRange(1, 8).Draw(rt, "floor")
	retention := time.Duration(rapid.IntRange(1, 10).Draw(rt, "retention s")) * time.Second
	smallBound := rapid.Bool().Draw(rt, "small byte bound")
	var maxBytes int64 // the default: far more than the test holds
	if smallBound {
		maxBytes = int64(rapid.IntRange(1, 16).Draw(rt, "bound in events")) * evSize
	}
	clk := clock.NewFake(epoch)
	b := events.NewBroker(events.Config{Events: floor, Retention: retention, MaxBytes: maxBytes, Clock: clk})
	defer b.Close()

	var (
		all   []published // since the last reset
		index uint64      // the last published index
		subs  []*modelSub
		base  uint64 // the last reset's index
		name  int
	)
	// mayDrop: the event at position i of all may have been dropped by now.
	mayDrop := func(i int) bool {
		if len(all)-i <= floor {
			return false // among the floor's newest
		}
		return smallBound || clk.Now().Sub(all[i].at) >= retention
	}
	// wanted is the position in all of the k-th event s wants.
	wanted := func(s *modelSub) []int {
		var out []int
		for i := s.from; i < len(all); i++ {
			if all[i].e.GetIndex() > s.after {
				out = append(out, i)
			}
		}
		return out
	}

	// read has m read what is there and checks it.
	read := func(m *modelSub) {
		if m.dead {
			return
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		got, err := m.s.Next(ctx)
		want := wanted(m)
		switch {
		case errors.Is(err, context.Canceled):
			if m.got != len(want) {
				rt.Fatalf("subscriber after %d had %d of %d events and Next returned none", m.after, m.got, len(want))
			}
			m.pos = len(all)
		case errors.Is(err, events.ErrSlowConsumer):
			if m.pos == len(all) || !mayDrop(m.pos) {
				rt.Fatalf("subscriber after %d cut off at event %d of %d published, which must still be held", m.after, m.pos, len(all))
			}
			m.dead = true
		case errors.Is(err, events.ErrResync):
			rt.Fatalf("ErrResync with no reset")
		case err != nil:
			rt.Fatalf("Next: %v", err)
		default:
			for _, e := range got {
				if m.got >= len(want) || e != all[want[m.got]].e {
					rt.Fatalf("subscriber after %d: its event %d is %s, not the next it wants", m.after, m.got, describe([]*managerv1.Event{e}))
				}
				m.got++
			}
			m.pos = len(all)
		}
	}

	steps := rapid.IntRange(1, 60).Draw(rt, "steps")
	for range steps {
		switch rapid.IntRange(0, 9).Draw(rt, "action") {
		case 0, 1, 2: // publish a command's events: 1 to 5, one or more indexes
			n := rapid.IntRange(1, 5).Draw(rt, "events")
			batch := make([]*managerv1.Event, n)
			for i := range batch {
				index += uint64(rapid.IntRange(0, 2).Draw(rt, "index step"))
				if index == base {
					index++
				}
				name++
				batch[i] = ev(index, fmt.Sprint("e", name))
				all = append(all, published{batch[i], clk.Now()})
			}
			b.Publish(batch...)
		case 3, 4: // the clock moves (the broker's goroutine drops what aged)
			clk.Advance(time.Duration(rapid.IntRange(0, 12).Draw(rt, "advance s")) * time.Second)
		case 5: // subscribe after an index
			// Mostly at or just before an index near the oldest held
			// event: where the window's edge is.
			after := uint64(rapid.IntRange(int(base), int(index)+1).Draw(rt, "after"))
			if len(all) > 0 && rapid.IntRange(0, 3).Draw(rt, "near the edge") > 0 {
				edge := len(all) - b.Stats().Events + rapid.IntRange(-2, 2).Draw(rt, "from the edge")
				after = all[min(max(edge, 0), len(all)-1)].e.GetIndex()
				after = max(base, after-uint64(rapid.IntRange(0, 1).Draw(rt, "just before")))
			}
			s, err := b.SubscribeAfter(after)
			if errors.Is(err, events.ErrResync) {
				// Some event after it must be one the window may drop.
				ok := false
				for i := range all {
					if all[i].e.GetIndex() > after && mayDrop(i) {
						ok = true
						break
					}
				}
				if !ok {
					rt.Fatalf("SubscribeAfter(%d) = ErrResync, but every event after it must still be held", after)
				}
				continue
			}
			if err != nil {
				rt.Fatalf("SubscribeAfter(%d): %v", after, err)
			}
			m := &modelSub{s: s, after: after, pos: len(all)}
			for i := range all {
				if all[i].e.GetIndex() > after {
					m.pos = i
					break
				}
			}
			subs = append(subs, m)
			if rapid.Bool().Draw(rt, "reads at once") {
				read(m)
			}
		case 6: // subscribe at the tail
			subs = append(subs, &modelSub{s: b.SubscribeTail(), after: 0, from: len(all), pos: len(all)})
		case 7: // a subscriber reads what is there
			if len(subs) > 0 {
				read(subs[rapid.IntRange(0, len(subs)-1).Draw(rt, "subscriber")])
			}
		case 8: // every subscriber reads what is there
			for _, m := range subs {
				read(m)
			}
		case 9: // a snapshot restore: every subscription must resync
			base = index
			b.Reset(base)
			for _, m := range subs {
				if m.dead {
					continue
				}
				ctx, cancel := context.WithCancel(context.Background())
				cancel()
				if _, err := m.s.Next(ctx); !errors.Is(err, events.ErrResync) {
					rt.Fatalf("after Reset: %v, want ErrResync", err)
				}
				m.dead = true
			}
			all = nil
		}
	}
}
