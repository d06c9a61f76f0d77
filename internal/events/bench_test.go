package events_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/internal/clock"
	"github.com/norsk-go/norsk-manager/internal/events"
	"github.com/norsk-go/norsk-manager/internal/events/eventstest"
)

// benchPool is how many distinct events a Publish benchmark cycles
// through (made before its timer starts): the ring holds up to hundreds
// of thousands of entries, and the events they share stay few.
const benchPool = 4096

// benchEvents are the events a Publish benchmark publishes, 4 to an
// index, as a bundle's command raises several.
func benchEvents() []*managerv1.Event {
	ts := timestamppb.New(time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC))
	out := make([]*managerv1.Event, benchPool)
	for i := range out {
		out[i] = eventstest.JobRunning(i, uint64(i/4+1), ts)
	}
	return out
}

// BenchmarkPublish measures Publish of one job event at a time (about 380
// bytes encoded, 2.6 kB estimated) with no subscriber:
//
//	ring=65536      a ring of a fixed count (no window), full: it drops
//	                one event per event published
//	window/steady   the default window, the clock moving so that about
//	                65,536 events are a retention old: it drops 64 aged
//	                events every 64 published
//	window/growing  the default window, the clock standing still: the
//	                ring grows by doubling until the byte bound (about
//	                200,000 of these events), then drops one per event
func BenchmarkPublish(b *testing.B) {
	published := benchEvents()
	run := func(b *testing.B, br *events.Broker, tick func()) {
		defer br.Close()
		b.ReportAllocs()
		b.ResetTimer()
		for i := range b.N {
			br.Publish(published[i%benchPool])
			tick()
		}
		b.StopTimer()
		st := br.Stats()
		b.ReportMetric(float64(st.Events), "held")
		b.ReportMetric(float64(st.Slots), "slots")
	}
	b.Run("ring=65536", func(b *testing.B) {
		run(b, events.New(65536), func() {})
	})
	b.Run("window/steady", func(b *testing.B) {
		// The clock moves every 64 events, so that its own cost is not
		// what is measured.
		clk := clock.NewFake(epoch)
		step := 64 * events.DefaultRetention / 65536
		n := 0
		run(b, events.NewBroker(events.Config{Clock: clk}), func() {
			if n++; n%64 == 0 {
				clk.Advance(step)
			}
		})
	})
	b.Run("window/growing", func(b *testing.B) {
		run(b, events.NewBroker(events.Config{Clock: clock.NewFake(epoch)}), func() {})
	})
}

// BenchmarkHeldMemory measures what the broker's estimate (EstimatedSize)
// stands for: the heap a held event takes, as a message and its entry
// and once encoded, against the estimate. Each event is made anew, as the
// FSM makes them. It reports per event:
//
//	heap-B          the heap it takes as published
//	heap-encoded-B  the heap once a subscriber has had it encoded
//	estimated-B     EstimatedSize
//	wire-B          its encoded size
func BenchmarkHeldMemory(b *testing.B) {
	kinds := []struct {
		name string
		make func(i int, ts *timestamppb.Timestamp) *managerv1.Event
	}{
		{"job", func(i int, ts *timestamppb.Timestamp) *managerv1.Event {
			return eventstest.JobRunning(i, uint64(i+1), ts)
		}},
		{"deleted", func(i int, ts *timestamppb.Timestamp) *managerv1.Event {
			return &managerv1.Event{Index: uint64(i + 1), Timestamp: ts, Kind: &managerv1.Event_JobDeleted{JobDeleted: &managerv1.JobDeleted{JobId: fmt.Sprintf("bench-b%06d.j%02d.0", i/10, i%10)}}}
		}},
	}
	for _, k := range kinds {
		b.Run(k.name, func(b *testing.B) {
			br := events.New(b.N)
			defer br.Close()
			h0 := heapInUse()
			var wire, est int64
			for i := range b.N {
				e := k.make(i, timestamppb.Now())
				wire += int64(proto.Size(e))
				est += events.EstimatedSize(e)
				br.Publish(e)
			}
			h1 := heapInUse()
			s, err := br.SubscribeAfter(0)
			if err != nil {
				b.Fatal(err)
			}
			for n := 0; n < b.N; {
				es, err := s.NextEntries(context.Background())
				if err != nil {
					b.Fatal(err)
				}
				for _, e := range es {
					if _, err := e.Wire(); err != nil {
						b.Fatal(err)
					}
				}
				n += len(es)
			}
			h2 := heapInUse()
			runtime.KeepAlive(br)
			n := float64(b.N)
			b.ReportMetric(float64(h1-h0)/n, "heap-B")
			b.ReportMetric(float64(h2-h0)/n, "heap-encoded-B")
			b.ReportMetric(float64(est)/n, "estimated-B")
			b.ReportMetric(float64(wire)/n, "wire-B")
		})
	}
}

func heapInUse() int64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

// BenchmarkWire measures the encoding of a job's event by the first
// subscriber that sends it: published (its sizes worked out and cached by
// Publish) against an entry NewEntry made (sized as it is encoded).
func BenchmarkWire(b *testing.B) {
	ts := timestamppb.New(time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC))
	b.Run("published", func(b *testing.B) {
		br := events.New(1)
		defer br.Close()
		b.ReportAllocs()
		for i := range b.N {
			b.StopTimer()
			s := br.SubscribeTail()
			br.Publish(eventstest.JobRunning(i, uint64(i+1), ts))
			es, err := s.NextEntries(context.Background())
			if err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
			if _, err := es[0].Wire(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("unpublished", func(b *testing.B) {
		b.ReportAllocs()
		for i := range b.N {
			b.StopTimer()
			e := events.NewEntry(eventstest.JobRunning(i, uint64(i+1), ts))
			b.StartTimer()
			if _, err := e.Wire(); err != nil {
				b.Fatal(err)
			}
		}
	})
}
