package bench

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	connectrpc "connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1/managerv1connect"
	"github.com/norsk-go/norsk-manager/internal/auth"
	"github.com/norsk-go/norsk-manager/internal/events/eventstest"
	"github.com/norsk-go/norsk-manager/internal/nodes"
)

func BenchmarkEventDelivery(b *testing.B) {
	for _, subs := range []int{1, 10, 100} {
		b.Run(fmt.Sprintf("subscribers=%d", subs), func(b *testing.B) { benchEventDelivery(b, subs) })
	}
}

// deliveryEventsPerIndex is how many events the benchmark publishes under
// one store index, as one command (a bundle's jobs) raises several.
const deliveryEventsPerIndex = 10

// deliveryAhead bounds how far the publisher runs ahead of the slowest
// subscriber, well inside the broker's ring, so that no subscriber is cut
// off for falling behind: the benchmark measures delivery, not drops.
const deliveryAhead = 8192

// countingCodec is a subscriber's codec: it counts the messages it is
// given and their bytes and decodes none of them, so the subscribers' own
// work is small and the same whatever the Manager does.
type countingCodec struct {
	msgs, bytes *atomic.Int64
}

func (countingCodec) Name() string { return "proto" }

func (countingCodec) Marshal(m any) ([]byte, error) { return proto.Marshal(m.(proto.Message)) }

func (c countingCodec) Unmarshal(data []byte, _ any) error {
	c.msgs.Add(1)
	c.bytes.Add(int64(len(data)))
	return nil
}

// benchEventDelivery: subs subscribers, each on its own HTTP/2 connection
// (separate consumers), follow a real Manager's event stream (live events
// only) while the benchmark publishes b.N job events straight into its
// event broker, as the FSM does, deliveryEventsPerIndex to an index. The
// write path is not in it: what is measured is the Manager's fan-out
// (the EventStream handler, connect, HTTP/2 on loopback) and the
// subscribers' reading of frames, in one process. Reported, per event
// delivered to one subscriber:
//
//	cpu-µs/delivery     the process's CPU time (user + system)
//	allocs/delivery     heap allocations
//	B/delivery          bytes allocated
//	wire-B/delivery     the message's bytes as the subscriber got them
//	deliveries/s        wall-clock rate, summed over subscribers
func benchEventDelivery(b *testing.B, subs int) {
	srv := startManager(b)
	broker := srv.Store().Broker()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	type sub struct {
		msgs, bytes atomic.Int64
		stream      *connectrpc.ServerStreamForClient[managerv1.Event]
		done        chan struct{} // closed when b.N events have arrived
	}
	ss := make([]*sub, subs)
	// progress wakes the publisher when a subscriber has taken another
	// deliveryAhead/8 events.
	progress := make(chan struct{}, 1)
	var wg sync.WaitGroup
	for i := range ss {
		s := &sub{done: make(chan struct{})}
		ss[i] = s
		c := managerv1connect.NewManagerClient(nodes.H2CClient(), srv.URL(), connectrpc.WithGRPC(),
			auth.WithBearer(benchToken), connectrpc.WithCodec(countingCodec{&s.msgs, &s.bytes}))
		st, err := c.EventStream(ctx, connectrpc.NewRequest(&managerv1.EventStreamRequest{SkipSnapshot: true}))
		if err != nil {
			b.Fatalf("EventStream: %v", err)
		}
		s.stream = st
		// The first message is initial_data_complete: the subscription is
		// in place once it has arrived.
		if !st.Receive() {
			b.Fatalf("EventStream ended before its first message: %v", st.Err())
		}
		s.msgs.Store(0)
		s.bytes.Store(0)
		wg.Go(func() {
			for st.Receive() {
				n := s.msgs.Load()
				if n%(deliveryAhead/8) == 0 {
					select {
					case progress <- struct{}{}:
					default:
					}
				}
				if n == int64(b.N) {
					close(s.done)
				}
			}
		})
	}
	defer func() {
		cancel()
		for _, s := range ss {
			_ = s.stream.Close()
		}
		wg.Wait()
	}()

	base := srv.Store().State().Snapshot().Index() + 1000
	ts := timestamppb.Now()
	evs := make([]*managerv1.Event, b.N)
	for i := range evs {
		evs[i] = eventstest.JobRunning(i, base+uint64(i/deliveryEventsPerIndex), ts)
	}
	slowest := func() int64 {
		m := int64(b.N)
		for _, s := range ss {
			m = min(m, s.msgs.Load())
		}
		return m
	}

	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	cpu0 := cpuTime()
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i += deliveryEventsPerIndex {
		for int64(i)-slowest() > deliveryAhead {
			<-progress
		}
		broker.Publish(evs[i:min(i+deliveryEventsPerIndex, b.N)]...)
	}
	deadline := time.After(2 * time.Minute)
	for _, s := range ss {
		select {
		case <-s.done:
		case <-deadline:
			b.Fatalf("the subscribers had %d of %d events 2 minutes after the last was published", slowest(), b.N)
		}
	}
	wall := time.Since(start)
	b.StopTimer()
	cpu := cpuTime() - cpu0
	runtime.ReadMemStats(&after)

	var wire int64
	for _, s := range ss {
		wire += s.bytes.Load()
	}
	deliveries := float64(b.N) * float64(subs)
	b.ReportMetric(float64(cpu.Microseconds())/deliveries, "cpu-µs/delivery")
	b.ReportMetric(float64(after.Mallocs-before.Mallocs)/deliveries, "allocs/delivery")
	b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/deliveries, "B/delivery")
	b.ReportMetric(float64(wire)/deliveries, "wire-B/delivery")
	b.ReportMetric(deliveries/wall.Seconds(), "deliveries/s")
}
