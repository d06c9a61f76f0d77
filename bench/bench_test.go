package bench

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/norsk-go/norsk-manager/internal/auth"
	"github.com/norsk-go/norsk-manager/internal/manager"
	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

var (
	connMode      = flag.String("conn", "shared", "BenchmarkCreateJob: shared (one SDK connection for all clients) or per-client")
	fanoutWriters = flag.Int("fanout.writers", 4, "BenchmarkEventFanout: concurrent writers")
)

// startManager starts a Manager member on an empty store in a temporary
// directory, fsync on, and stops it when the benchmark ends.
func startManager(b *testing.B) *manager.Server {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv, err := manager.New(ctx, manager.Config{
		DataDir:        b.TempDir(),
		Listen:         "127.0.0.1:0",
		NodeName:       "bench",
		Logger:         slog.New(slog.DiscardHandler),
		BootstrapToken: benchToken,
		RateLimit:      1e9, // measure the Manager, not its per-caller limit
	})
	if err != nil {
		b.Fatalf("start manager: %v", err)
	}
	b.Cleanup(func() { _ = srv.Close() })
	return srv
}

// benchToken is the benchmark Managers' admin token.
var benchToken = auth.NewToken()

// connect opens an SDK connection to srv, closed when the benchmark ends.
func connect(b *testing.B, srv *manager.Server) *norsk.Manager {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m, err := norsk.Connect(ctx, norsk.Settings{URL: srv.URL(), Token: benchToken, ClientLabel: "bench", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatalf("connect: %v", err)
	}
	b.Cleanup(func() { _ = m.Close() })
	return m
}

// benchJob is a small valid job: one service, two tags.
func benchJob(id string) *norsk.Job {
	return &norsk.Job{
		JobId:       id,
		Description: "benchmark job",
		Tags:        map[string]string{"team": "bench", "channel": "news"},
		Services:    []*norsk.Service{{Name: "main", Image: "bench:dev"}},
	}
}

// percentile returns the p-th percentile (0 < p <= 100, nearest rank) of
// sorted samples.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(float64(len(sorted))*p/100+0.999999) - 1
	return sorted[min(max(rank, 0), len(sorted)-1)]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// runID distinguishes the job ids of the runs of one benchmark process
// (each run has its own Manager, but unique ids make no assumption).
var runID atomic.Int64

func BenchmarkCreateJob(b *testing.B) {
	for _, clients := range []int{1, 32} {
		b.Run(fmt.Sprintf("clients=%d", clients), func(b *testing.B) { benchCreateJob(b, clients) })
	}
}

func benchCreateJob(b *testing.B, clients int) {
	var perClient bool
	switch *connMode {
	case "shared":
	case "per-client":
		perClient = true
	default:
		b.Fatalf("-conn=%q: want shared or per-client", *connMode)
	}
	srv := startManager(b)
	conns := make([]*norsk.Manager, clients)
	for i := range conns {
		if i == 0 || perClient {
			conns[i] = connect(b, srv)
		} else {
			conns[i] = conns[0]
		}
	}
	ctx := context.Background()
	prefix := fmt.Sprintf("r%d-", runID.Add(1))

	// Warm up: every client makes a call, so that connections and HTTP/2
	// streams are established before the clock starts.
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			if _, err := conns[c].CreateJob(ctx, benchJob(fmt.Sprintf("%swarm-%d", prefix, c))); err != nil {
				b.Errorf("warm-up CreateJob: %v", err)
			}
		})
	}
	wg.Wait()
	if b.Failed() {
		return
	}

	var next atomic.Int64
	samples := make([][]time.Duration, clients)
	var failed atomic.Pointer[error]
	b.ResetTimer()
	start := time.Now()
	for c := range clients {
		wg.Go(func() {
			m := conns[c]
			lat := make([]time.Duration, 0, b.N/clients+1)
			for {
				i := next.Add(1) - 1
				if i >= int64(b.N) || failed.Load() != nil {
					break
				}
				job := benchJob(fmt.Sprintf("%sjob-%d", prefix, i))
				t0 := time.Now()
				_, err := m.CreateJob(ctx, job)
				lat = append(lat, time.Since(t0))
				if err != nil {
					failed.CompareAndSwap(nil, &err)
					break
				}
			}
			samples[c] = lat
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if err := failed.Load(); err != nil {
		b.Fatalf("CreateJob: %v", *err)
	}
	all := slices.Concat(samples...)
	slices.Sort(all)
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "jobs/s")
	b.ReportMetric(ms(percentile(all, 50)), "p50-ms")
	b.ReportMetric(ms(percentile(all, 99)), "p99-ms")
	b.ReportMetric(ms(all[len(all)-1]), "max-ms")
}

func BenchmarkEventFanout(b *testing.B) {
	b.Run("subscribers=100", func(b *testing.B) { benchEventFanout(b, 100, *fanoutWriters) })
}

// subscriber follows the event stream and counts this run's jobCreated
// events.
type subscriber struct {
	stream *norsk.EventStream
	seen   chan struct{} // closed when the warm-up event has arrived
	done   chan struct{} // closed when want measured events have arrived
	last   time.Time     // when the want-th measured event arrived
	delays []time.Duration
}

func benchEventFanout(b *testing.B, subscribers, writers int) {
	if writers < 1 {
		b.Fatalf("-fanout.writers=%d: want at least 1", writers)
	}
	srv := startManager(b)
	writer := connect(b, srv)
	prefix := fmt.Sprintf("r%d-", runID.Add(1))
	warmID := prefix + "warm"
	jobPrefix := prefix + "job-"
	want := b.N

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	subs := make([]*subscriber, subscribers)
	var wg sync.WaitGroup
	for i := range subs {
		s := &subscriber{
			stream: connect(b, srv).EventStream(ctx, norsk.EventStreamSettings{SkipSnapshot: true}),
			seen:   make(chan struct{}),
			done:   make(chan struct{}),
			delays: make([]time.Duration, 0, want),
		}
		subs[i] = s
		wg.Go(func() {
			n := 0
			for s.stream.Next() {
				ev := s.stream.Event()
				jc := ev.GetJobCreated()
				if jc == nil {
					continue
				}
				id := jc.GetJob().GetJob().GetJobId()
				switch {
				case id == warmID:
					close(s.seen)
				case strings.HasPrefix(id, jobPrefix):
					now := time.Now()
					s.delays = append(s.delays, now.Sub(ev.GetTimestamp().AsTime()))
					n++
					if n == want {
						s.last = now
						close(s.done)
					}
				}
			}
		})
	}
	defer func() {
		cancel()
		for _, s := range subs {
			_ = s.stream.Close()
		}
		wg.Wait()
	}()

	// The streams connect lazily: keep creating warm-up events until every
	// subscriber has one, so that all of them are live before the clock
	// starts.
	if _, err := writer.CreateJob(ctx, benchJob(warmID)); err != nil {
		b.Fatalf("warm-up CreateJob: %v", err)
	}
	for _, s := range subs {
		select {
		case <-s.seen:
		case <-time.After(30 * time.Second):
			b.Fatalf("a subscriber did not see the warm-up event in 30 s (stream err: %v)", s.stream.Err())
		}
	}

	var next atomic.Int64
	var failed atomic.Pointer[error]
	var wwg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for range writers {
		wwg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(want) || failed.Load() != nil {
					return
				}
				if _, err := writer.CreateJob(ctx, benchJob(fmt.Sprintf("%s%d", jobPrefix, i))); err != nil {
					failed.CompareAndSwap(nil, &err)
					return
				}
			}
		})
	}
	wwg.Wait()
	writesDone := time.Since(start)
	if err := failed.Load(); err != nil {
		b.Fatalf("CreateJob: %v", *err)
	}
	deadline := time.After(60 * time.Second)
	var lastAt time.Time
	for i, s := range subs {
		select {
		case <-s.done:
			if s.last.After(lastAt) {
				lastAt = s.last
			}
		case <-deadline:
			b.Fatalf("subscriber %d did not receive all %d events within 60 s of the last write (stream err: %v)", i, want, s.stream.Err())
		}
	}
	b.StopTimer()
	total := lastAt.Sub(start)

	var reconnects uint64
	delays := make([]time.Duration, 0, want*subscribers)
	for _, s := range subs {
		reconnects += s.stream.Reconnects()
		delays = append(delays, s.delays[:want]...)
	}
	slices.Sort(delays)
	b.ReportMetric(float64(want*subscribers)/total.Seconds(), "events/s")
	b.ReportMetric(float64(want)/writesDone.Seconds(), "writes/s")
	b.ReportMetric(ms(total), "last-event-ms")
	// The last event can arrive before the last writer has returned.
	b.ReportMetric(ms(max(total-writesDone, 0)), "drain-ms")
	b.ReportMetric(ms(percentile(delays, 50)), "deliver-p50-ms")
	b.ReportMetric(ms(percentile(delays, 99)), "deliver-p99-ms")
	b.ReportMetric(float64(reconnects), "reconnects")
}
