package bench

// Cluster benchmarks: three in-process members (internal/testcluster: each a
// real manager.New with its raft-wal store on disk, raft over TCP on
// loopback through testcluster's fault-injecting network), the raft
// timeouts at the product defaults (testcluster sets none, so the store's
// defaults apply: HeartbeatTimeout 500 ms, ElectionTimeout 500 ms,
// LeaderLeaseTimeout 250 ms). Figures only.
//
//	go test ./bench -run '^$' -bench 'ClusterFailover' -benchtime=10x
//	go test ./bench -run '^$' -bench 'ClusterWrite' -benchtime=2000x
//	go test ./bench -run '^$' -bench 'ClusterCatchUp' -benchtime=1x
//
// testcluster starts its members with the default per-caller rate limit
// (1000 calls/s, burst 2000), which would cap the write figures; the write
// and catch-up benchmarks lift it to 1e9 by restarting every member with
// Member.Extra (followers first, then the primary: one failover, before the
// clock starts). The failover benchmark keeps every default.
//
// # BenchmarkClusterFailover/kill=stop, /kill=isolate
//
// Each iteration takes the primary away and measures the time from that
// moment until the first write issued afterwards is acknowledged: one
// writer per surviving member, each calling KvCommit (one put) through its
// member in a loop (3 s per attempt, 5 ms between failed attempts), the
// first acknowledgement wins. A write on a follower is forwarded to the
// primary, so the figure includes election, the new primary's takeover
// (barrier, generation check, boot work) and forwarding.
//
//   - kill=stop: Member.Stop, the clean close of the daemon (HTTP shutdown,
//     then raft shutdown; no leadership transfer). The clock starts before
//     Stop is called and writes start once it has returned, so Stop's own
//     time (stop-ms) is inside the figure.
//   - kill=isolate: the primary's links are cut (testcluster's network
//     refuses new connections and breaks open ones), as a kill -9 or a
//     pulled cable looks to its peers; it is stopped once the figure is
//     taken.
//
// Then the old primary is started again (healed first) and the iteration
// waits, with the timer stopped, until it follows and has applied
// everything. Reported:
//
//	ms/failover   mean time from the kill to the first acknowledged write
//	p50-ms        median of the same over the iterations
//	max-ms        the slowest
//	elect-ms      mean time until a survivor's raft is leader (polled
//	              every ms)
//	ready-ms      mean time until it has finished taking over
//	              (IsPrimaryReady)
//	stop-ms       mean duration of Member.Stop (kill=stop only)
//
// # BenchmarkClusterWrite/via=primary|follower/clients=1|32
//
// b.N KvCommit calls (one put of a 64-byte value to a new key, guarded by
// expected revision 0, as BenchmarkKvCommit) spread over 1 or 32 client
// goroutines sharing one SDK connection to the primary or to a follower
// (which forwards each write to the primary and answers once it has applied
// it itself). One cluster serves every sub-benchmark. Reported: commits/s,
// p50-ms, p99-ms, max-ms.
//
// # BenchmarkClusterCatchUp/snapshot=auto|forced
//
// Per iteration, on a fresh cluster: a follower is stopped, 100,000 KV
// commits (one raft entry each; -catchup.entries) are written through the
// primary by 32 clients, the follower is started and the clock runs until
// its applied index reaches the primary's commit index as of the start.
//
//   - snapshot=auto: raft snapshots when it would by itself (it checks every
//     SnapshotInterval, 2 min to 4 min after start, for SnapshotThreshold
//     = 8192 new entries); when the load is shorter than that the primary
//     still holds the whole log and the follower catches up by log replay.
//   - snapshot=forced: the primary takes a snapshot after the load, which
//     compacts its log to the last TrailingLogs (10240) entries, so the
//     follower, 100,000 behind, should have to install the snapshot. It
//     does not (snapshot-installs 0): raft-wal v0.4.0 truncates the head of
//     its unsealed tail segment only logically (state.getLog asks the tail
//     writer first, which does not check the new first index), so the
//     "compacted" entries are still served while they sit in the tail
//     segment (64 MiB), and the follower catches up by log replay here too.
//
// Reported:
//
//	catchup-s           seconds from starting the follower until its
//	                    applied index reaches the primary's commit index
//	entries/s           entries it missed (that commit index less its
//	                    applied index when stopped) / catchup-s
//	contact-ms          time from the start until the primary first reached
//	                    it (raft's LastContact)
//	start-ms            time Member.Start took (store open, server up,
//	                    client connected; the client's connection waits
//	                    for the replicated admin token, so this overlaps
//	                    the catch-up)
//	load-commits/s      write rate of the load with one member down
//	snapshot-installs   "Installed remote snapshot" lines raft logged on
//	                    the follower (0: log replay)
//	primary-snapshots   snapshots the primary took during the iteration

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

	"github.com/norsk-go/norsk-manager/internal/manager"
	"github.com/norsk-go/norsk-manager/internal/testcluster"
	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

var catchupEntries = flag.Int("catchup.entries", 100_000, "BenchmarkClusterCatchUp: entries the stopped follower falls behind by")

// clLogs counts raft log lines of interest per member, from the Logger
// testcluster hands every member (each tagged process=<member>).
type clLogs struct {
	mu     sync.Mutex
	counts map[string]int // "<member>|<pattern>"
}

var clPatterns = []string{"Installed remote snapshot", "installing snapshot on", "snapshot complete up to"}

func (l *clLogs) count(member, pattern string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.counts[member+"|"+pattern]
}

func (l *clLogs) reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.counts = map[string]int{}
}

type clLogHandler struct {
	logs    *clLogs
	process string
}

func (h clLogHandler) Enabled(_ context.Context, lv slog.Level) bool { return lv >= slog.LevelInfo }

func (h clLogHandler) Handle(_ context.Context, r slog.Record) error {
	for _, p := range clPatterns {
		if strings.Contains(r.Message, p) {
			h.logs.mu.Lock()
			h.logs.counts[h.process+"|"+p]++
			h.logs.mu.Unlock()
		}
	}
	return nil
}

func (h clLogHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	for _, a := range attrs {
		if a.Key == "process" {
			h.process = a.Value.String()
		}
	}
	return h
}

func (h clLogHandler) WithGroup(string) slog.Handler { return h }

// clNew starts a cluster of three full members with every default but the
// logger (which counts raft's snapshot lines).
func clNew(b *testing.B) (*testcluster.Cluster, *clLogs) {
	b.Helper()
	logs := &clLogs{counts: map[string]int{}}
	c := testcluster.New(b, testcluster.Options{Members: 3, Logger: slog.New(clLogHandler{logs: logs})})
	return c, logs
}

// clOthers is every member but m.
func clOthers(c *testcluster.Cluster, m *testcluster.Member) []*testcluster.Member {
	var out []*testcluster.Member
	for _, o := range c.Members {
		if o != m {
			out = append(out, o)
		}
	}
	return out
}

// clWaitSettled waits until there is a ready primary and every running
// member follows it and has applied everything it had committed.
func clWaitSettled(b *testing.B, c *testcluster.Cluster, timeout time.Duration) *testcluster.Member {
	b.Helper()
	deadline := time.Now().Add(timeout)
	for {
		p := c.Primary()
		ok := true
		if ps := p.Server(); ps != nil {
			target := ps.Store().CommitIndex()
			for _, m := range c.Members {
				s := m.Server()
				if s == nil || m == p {
					continue
				}
				st := s.Store()
				if st == nil {
					ok = false
					break
				}
				leader, _ := st.Leader()
				if leader != p.Name || st.AppliedIndex() < target {
					ok = false
				}
			}
		} else {
			ok = false
		}
		if ok {
			return p
		}
		if time.Now().After(deadline) {
			b.Fatalf("cluster not settled after %s", timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// clLiftRateLimit restarts every member with RateLimit 1e9 (testcluster
// has no option for it at the first start): the followers, then the
// primary.
func clLiftRateLimit(b *testing.B, c *testcluster.Cluster) {
	b.Helper()
	for _, m := range c.Members {
		m.Extra = func(cfg *manager.Config) { cfg.RateLimit = 1e9 }
	}
	p := clWaitSettled(b, c, 2*time.Minute)
	for _, m := range clOthers(c, p) {
		m.Restart()
		clWaitSettled(b, c, 2*time.Minute)
	}
	p.Restart()
	clWaitSettled(b, c, 2*time.Minute)
}

// clPut is one KvCommit of a 64-byte value to key (guarded: the key must be
// new when guard is set).
func clPut(ctx context.Context, m *norsk.Manager, ns, key string, guard bool) error {
	w := norsk.KvPut(key, clValue)
	if guard {
		w = w.IfAbsent()
	}
	_, err := m.KvCommit(ctx, ns, []norsk.KvWrite{w}, norsk.KvCommitOptions{})
	return err
}

var clValue = make([]byte, 64)

func BenchmarkClusterFailover(b *testing.B) {
	for _, kill := range []string{"stop", "isolate"} {
		b.Run("kill="+kill, func(b *testing.B) { benchClusterFailover(b, kill) })
	}
}

func benchClusterFailover(b *testing.B, kill string) {
	c, _ := clNew(b)
	prefix := fmt.Sprintf("r%d-", runID.Add(1))
	ctx := context.Background()
	// Warm up: a write through every member, so that each client's
	// connection and each follower's connection to the primary exist.
	for _, m := range c.Members {
		if err := clPut(ctx, m.Client(), "failover", prefix+"warm-"+m.Name, false); err != nil {
			b.Fatalf("warm-up write through %s: %v", m.Name, err)
		}
	}
	clWaitSettled(b, c, time.Minute)

	var total, elect, ready, stop []time.Duration
	b.ResetTimer()
	for i := range b.N {
		p := clWaitSettled(b, c, time.Minute)
		survivors := clOthers(c, p)

		// Watch the survivors for leadership and a finished takeover.
		var electAt, readyAt atomic.Int64
		watchCtx, stopWatch := context.WithCancel(ctx)
		var watch sync.WaitGroup

		t0 := time.Now()
		switch kill {
		case "stop":
			p.Stop()
			stop = append(stop, time.Since(t0))
		case "isolate":
			c.Net.Isolate(p.Name)
		}
		watch.Go(func() {
			for watchCtx.Err() == nil && readyAt.Load() == 0 {
				for _, m := range survivors {
					s := m.Server()
					if s == nil || s.Store() == nil {
						continue
					}
					if s.Store().IsLeader() && electAt.Load() == 0 {
						electAt.Store(int64(time.Since(t0)))
					}
					if s.IsPrimaryReady() && readyAt.Load() == 0 {
						readyAt.Store(int64(time.Since(t0)))
					}
				}
				time.Sleep(time.Millisecond)
			}
		})

		// One writer per survivor; the first acknowledgement ends the wait.
		wctx, cancel := context.WithTimeout(ctx, time.Minute)
		type ack struct {
			at  time.Duration
			via string
		}
		acks := make(chan ack, len(survivors))
		var writers sync.WaitGroup
		for _, m := range survivors {
			cl := m.Client()
			writers.Go(func() {
				for n := 0; wctx.Err() == nil; n++ {
					actx, acancel := context.WithTimeout(wctx, 3*time.Second)
					err := clPut(actx, cl, "failover", fmt.Sprintf("%s%d-%s-%d", prefix, i, m.Name, n), false)
					acancel()
					if err == nil {
						acks <- ack{time.Since(t0), m.Name}
						return
					}
					select {
					case <-wctx.Done():
					case <-time.After(5 * time.Millisecond):
					}
				}
			})
		}
		var first ack
		select {
		case first = <-acks:
		case <-wctx.Done():
		}
		cancel()
		writers.Wait()
		// Give the watcher a moment to see a takeover that finished just
		// as the write was acknowledged.
		for j := 0; j < 100 && readyAt.Load() == 0; j++ {
			time.Sleep(time.Millisecond)
		}
		stopWatch()
		watch.Wait()
		if first.via == "" {
			b.Fatalf("iteration %d: no write acknowledged within a minute of the kill (%s)", i, kill)
		}
		total = append(total, first.at)
		elect = append(elect, time.Duration(electAt.Load()))
		ready = append(ready, time.Duration(readyAt.Load()))
		b.Logf("failover %d (kill=%s of %s): first ack %.0f ms via %s; elected %.0f ms, ready %.0f ms",
			i, kill, p.Name, ms(first.at), first.via, ms(time.Duration(electAt.Load())), ms(time.Duration(readyAt.Load())))

		// Bring the old primary back as a follower (not timed).
		b.StopTimer()
		if kill == "isolate" {
			p.Stop()
			c.Net.Heal()
		}
		p.Start()
		clWaitSettled(b, c, 2*time.Minute)
		b.StartTimer()
	}
	b.StopTimer()
	mean := func(ds []time.Duration) float64 {
		var sum time.Duration
		for _, d := range ds {
			sum += d
		}
		return ms(sum / time.Duration(len(ds)))
	}
	b.ReportMetric(mean(total), "ms/failover")
	b.ReportMetric(mean(elect), "elect-ms")
	b.ReportMetric(mean(ready), "ready-ms")
	if len(stop) > 0 {
		b.ReportMetric(mean(stop), "stop-ms")
	}
	slices.Sort(total)
	b.ReportMetric(ms(percentile(total, 50)), "p50-ms")
	b.ReportMetric(ms(total[len(total)-1]), "max-ms")
}

func BenchmarkClusterWrite(b *testing.B) {
	c, _ := clNew(b)
	clLiftRateLimit(b, c)
	for _, via := range []string{"primary", "follower"} {
		for _, clients := range []int{1, 32} {
			b.Run(fmt.Sprintf("via=%s/clients=%d", via, clients), func(b *testing.B) {
				p := clWaitSettled(b, c, time.Minute)
				target := p
				if via == "follower" {
					target = clOthers(c, p)[0]
				}
				cl := target.Client()
				ctx := context.Background()
				prefix := fmt.Sprintf("r%d-", runID.Add(1))
				// Warm up: one call per client so the streams exist.
				var wg sync.WaitGroup
				for i := range clients {
					wg.Go(func() {
						if err := clPut(ctx, cl, "bench", fmt.Sprintf("%swarm-%d", prefix, i), true); err != nil {
							b.Errorf("warm-up: %v", err)
						}
					})
				}
				wg.Wait()
				if b.Failed() {
					return
				}
				stClosedLoop(b, clients, "commits/s", func(i int64) error {
					return clPut(ctx, cl, "bench", fmt.Sprintf("%sk-%d", prefix, i), true)
				})
				if q := clWaitSettled(b, c, time.Minute); q != p {
					b.Logf("the primary moved from %s to %s during the run", p.Name, q.Name)
				}
			})
		}
	}
}

func BenchmarkClusterCatchUp(b *testing.B) {
	for _, snap := range []string{"auto", "forced"} {
		b.Run("snapshot="+snap, func(b *testing.B) { benchClusterCatchUp(b, snap == "forced") })
	}
}

func benchClusterCatchUp(b *testing.B, forceSnapshot bool) {
	const clients = 32
	entries := *catchupEntries
	var catchup, boot, contact, loadRate, installs, primarySnaps, rate []float64
	b.StopTimer()
	for it := range b.N {
		c, logs := clNew(b)
		clLiftRateLimit(b, c)
		p := clWaitSettled(b, c, time.Minute)
		f := clOthers(c, p)[0]
		atStop := f.Server().Store().AppliedIndex()
		f.Stop()
		logs.reset()

		// The load: entries commits through the primary, 32 clients.
		cl := p.Client()
		ctx := context.Background()
		prefix := fmt.Sprintf("r%d-", runID.Add(1))
		var next atomic.Int64
		var failed atomic.Pointer[error]
		var wg sync.WaitGroup
		t0 := time.Now()
		for range clients {
			wg.Go(func() {
				for {
					i := next.Add(1) - 1
					if i >= int64(entries) || failed.Load() != nil {
						return
					}
					if err := clPut(ctx, cl, "catchup", fmt.Sprintf("%sk-%d", prefix, i), false); err != nil {
						failed.CompareAndSwap(nil, &err)
						return
					}
				}
			})
		}
		wg.Wait()
		loadTime := time.Since(t0)
		if err := failed.Load(); err != nil {
			b.Fatalf("load: %v", *err)
		}
		if q := c.Primary(); q != p {
			b.Fatalf("the primary moved from %s to %s during the load", p.Name, q.Name)
		}
		pst := p.Server().Store()
		if forceSnapshot {
			if err := pst.TakeSnapshot(); err != nil {
				b.Fatalf("snapshot on the primary: %v", err)
			}
		}
		target := pst.CommitIndex()
		stats := pst.Stats()
		down := time.Since(t0)

		// Start the follower and time its catch-up. Start returns once the
		// member's client connects, which on a follower can itself wait for
		// the catch-up (the admin token is in the replicated state), so a
		// poller watches the member from the moment its server exists.
		var firstContact, caughtUp atomic.Int64
		pollDone := make(chan struct{})
		t1 := time.Now()
		go func() {
			defer close(pollDone)
			deadline := t1.Add(10 * time.Minute)
			for time.Now().Before(deadline) {
				if s := f.Server(); s != nil && s.Store() != nil {
					st := s.Store()
					if firstContact.Load() == 0 && st.LastContact().After(t1) {
						firstContact.Store(int64(time.Since(t1)))
					}
					if st.AppliedIndex() >= target {
						caughtUp.Store(int64(time.Since(t1)))
						return
					}
				}
				time.Sleep(2 * time.Millisecond)
			}
		}()
		b.StartTimer()
		f.Start()
		booted := time.Since(t1)
		<-pollDone
		b.StopTimer()
		if caughtUp.Load() == 0 {
			b.Fatalf("follower %s at applied index %d after 10 min, want %d", f.Name, f.Server().Store().AppliedIndex(), target)
		}
		took := time.Duration(caughtUp.Load())
		fst := f.Server().Store().Stats()
		behind := target - atStop
		inst := logs.count(f.Name, "Installed remote snapshot")
		psnaps := logs.count(p.Name, "snapshot complete up to")
		b.Logf("catch-up %d: %s down %.1f s, behind by %d entries (applied %d when stopped, primary at %d; primary last_snapshot_index %s); load %d commits in %.1f s; first contact from the primary %.0f ms after start, Start returned after %.0f ms, caught up after %.2f s; snapshot installs on %s %d (its last_snapshot_index now %s), primary snapshots %d",
			it, f.Name, down.Seconds(), behind, atStop, target, stats["last_snapshot_index"], entries, loadTime.Seconds(),
			ms(time.Duration(firstContact.Load())), ms(booted), took.Seconds(), f.Name, inst, fst["last_snapshot_index"], psnaps)
		catchup = append(catchup, took.Seconds())
		boot = append(boot, ms(booted))
		contact = append(contact, ms(time.Duration(firstContact.Load())))
		loadRate = append(loadRate, float64(entries)/loadTime.Seconds())
		installs = append(installs, float64(inst))
		primarySnaps = append(primarySnaps, float64(psnaps))
		rate = append(rate, float64(behind)/took.Seconds())
		for _, m := range c.Members {
			m.Stop()
		}
	}
	avg := func(xs []float64) float64 {
		var s float64
		for _, x := range xs {
			s += x
		}
		return s / float64(len(xs))
	}
	b.ReportMetric(avg(catchup), "catchup-s")
	b.ReportMetric(avg(rate), "entries/s")
	b.ReportMetric(avg(contact), "contact-ms")
	b.ReportMetric(avg(boot), "start-ms")
	b.ReportMetric(avg(loadRate), "load-commits/s")
	b.ReportMetric(avg(installs), "snapshot-installs")
	b.ReportMetric(avg(primarySnaps), "primary-snapshots")
}
