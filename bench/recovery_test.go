package bench

// Recovery benchmarks: how long a live channel is dark when its worker's
// node dies. A real Manager member and three real workers (internal/
// testcluster, process runtime: the job is the runtime test program, a
// real child process), the AutoManager as the daemon runs it.
//
//	go test ./bench -run '^$' -bench Recovery -benchtime=3x
//
// Each iteration starts a cluster of its own (a few seconds) and waits for
// one recovery (about 1.6 s after a stop or a silent loss at the default
// settings; -benchtime=3x runs each sub-benchmark once with b.N=1
// first): a few minutes on a 2-core machine, inside go test's default
// 10-minute timeout; add -timeout 30m for more iterations.
//
// # BenchmarkRecovery/settings=default|quick/kill=stop|silent
//
// Each iteration, on a cluster of its own (untimed setup): worker-3 is
// tagged spare=true before anything is placed, then a resilient bundle is
// created — one job, a primary and a backup, sameNode FORBID — so the
// primary and the backup land on the two other workers. The primary's node
// is killed and the clock runs until the primary's instance is RUNNING on
// another node, as the Manager reports it (JobById polled every 10 ms); the
// new node must be the spare. A fresh cluster each time, because a reused
// one would not start from the same place: the AutoManager excludes from a
// job's recovery, for its restart window (10 min), every node that lost
// the job — a node killed and brought back as the next spare included.
//
// Settings:
//
//   - default: manager.Config's own defaults (manager.DefaultLostGrace
//     1.5 s, manager.DefaultHeartbeatInterval 500 ms, decisions 0024 and
//     0048; LeaseTTL 15 s, not involved: the job is not lease-protected).
//     testcluster's quick LostGrace and heartbeat are zeroed through
//     Options.ManagerConfig, so manager.Config.defaults fills them in as
//     the daemon does.
//   - quick: testcluster's settings (LostGrace 2 s, HeartbeatInterval
//     100 ms).
//
// Kills (both leave nothing of the node running: the worker agent stops
// and every process of its instances is SIGKILLed, the agent first, so it
// never reports their deaths):
//
//   - stop: testcluster's Worker.Kill: the agent's sockets close, so the
//     Manager sees the stream end at once (a crashed worker whose kernel
//     still closes its sockets).
//   - silent: the node's network goes silent first (testcluster's
//     Link.Cut(CutSilent): no byte, FIN or reset reaches the Manager),
//     then the node dies: a power loss or a dead switch. The Manager
//     notices only by the worker's silence: lost once nothing has been
//     heard from it for the lost grace (decision 0048).
//
// Reported (seconds, over the iterations of the run):
//
//	recovery-p50-s, recovery-max-s  kill → the primary RUNNING on the spare
//	down-s      kill → the Manager shows the node's stream gone
//	            (Node.connected false, ListNodes polled every 10 ms)
//	lost-s      kill → the node is lost (the stopping(nodeStopped) history
//	            entry of the primary's binding, stamped by the Manager)
//	start-s     kill → the AutoManager's StartJob on the spare (the new
//	            binding's provisioned entry)
//	running-s   kill → the spare's worker reported it running (its running
//	            entry)
//
// down-s, lost-s, start-s and running-s are medians; ns/op is the mean of
// the recovery time.

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/norsk-go/norsk-manager/internal/manager"
	"github.com/norsk-go/norsk-manager/internal/testcluster"
	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

// rcSettings are the Manager settings BenchmarkRecovery runs with.
var rcSettings = []struct {
	name string
	cfg  func(*manager.Config)
}{
	// Zero: manager.Config's defaults (manager.DefaultLostGrace 1.5 s,
	// manager.DefaultHeartbeatInterval 500 ms).
	{"default", func(cfg *manager.Config) { cfg.LostGrace, cfg.HeartbeatInterval = 0, 0 }},
	// testcluster's own (LostGrace 2 s, heartbeat 100 ms).
	{"quick", nil},
}

// The bundle's job and the roles recovered.
const (
	rcBundle  = "news"
	rcPrimary = "news.channel.0"
	rcBackup  = "news.channel.1"
)

func BenchmarkRecovery(b *testing.B) {
	for _, s := range rcSettings {
		for _, kill := range []string{"stop", "silent"} {
			b.Run("settings="+s.name+"/kill="+kill, func(b *testing.B) { benchRecovery(b, s.cfg, kill) })
		}
	}
}

// rcSample is one iteration's timeline, from the kill.
type rcSample struct {
	recovery, down, lost, start, running time.Duration
}

func benchRecovery(b *testing.B, cfg func(*manager.Config), kill string) {
	b.StopTimer()
	ctx := b.Context()
	samples := make([]rcSample, 0, b.N)
	for range b.N {
		// A cluster of its own for each iteration: the job's history (the
		// AutoManager excludes, for its restart window, the nodes that lost
		// it) and the layout are the same every time.
		c := testcluster.New(b, testcluster.Options{Workers: 3, WorkerLinks: kill == "silent", ManagerConfig: cfg})
		cl := c.Client()
		const spare = "worker-3"
		if _, err := cl.SetNodeTags(ctx, spare, map[string]string{"spare": "true"}); err != nil {
			b.Fatal(err)
		}
		if _, err := cl.CreateBundle(ctx, rcResilientBundle(b)); err != nil {
			b.Fatal(err)
		}
		var p, backup *norsk.Instance
		rcWait(b, "the primary and the backup running", time.Minute, func() bool {
			p, backup = rcRunning(ctx, cl, rcPrimary, "primary", ""), rcRunning(ctx, cl, rcBackup, "backup", "")
			return p != nil && backup != nil
		})
		if p.GetNodeId() == spare || backup.GetNodeId() == spare || p.GetNodeId() == backup.GetNodeId() {
			b.Fatalf("layout before the kill: primary on %s, backup on %s, spare %s", p.GetNodeId(), backup.GetNodeId(), spare)
		}
		dead := c.Worker(p.GetNodeId())

		b.StartTimer()
		t0 := time.Now()
		if kill == "silent" {
			dead.Link().Cut(testcluster.CutSilent)
		}
		// The node's death takes the agent's shutdown (up to its 2 s
		// grace while silent): watched meanwhile.
		killed := make(chan error, 1)
		go func() { killed <- dead.Kill() }()
		var s rcSample
		var moved *norsk.Instance
		rcWait(b, "the primary running again elsewhere", 5*time.Minute, func() bool {
			if s.down == 0 && !rcConnected(ctx, cl, dead.Name) {
				s.down = time.Since(t0)
			}
			moved = rcRunning(ctx, cl, rcPrimary, "primary", dead.Name)
			return moved != nil
		})
		s.recovery = time.Since(t0)
		b.StopTimer()
		if err := <-killed; err != nil {
			b.Fatal(err)
		}

		if moved.GetNodeId() != spare {
			b.Errorf("the primary recovered on %s, not on the spare %s (placement %v)", moved.GetNodeId(), spare, moved.GetPlacement())
		}
		jh, err := cl.JobById(ctx, rcPrimary)
		if err != nil {
			b.Fatal(err)
		}
		s.lost = rcEntryAt(jh, t0, func(e *norsk.JobHistoryEntry) bool {
			st := e.GetStopping()
			return st != nil && st.GetInstance().GetFencingToken() == p.GetFencingToken() && st.GetReason() == norsk.StoppingReasonNodeStopped
		})
		s.start = rcEntryAt(jh, t0, func(e *norsk.JobHistoryEntry) bool {
			return e.GetProvisioned().GetInstance().GetFencingToken() == moved.GetFencingToken()
		})
		s.running = rcEntryAt(jh, t0, func(e *norsk.JobHistoryEntry) bool {
			return e.GetRunning().GetInstance().GetFencingToken() == moved.GetFencingToken()
		})
		if s.down == 0 {
			s.down = s.recovery // not seen down before the recovery (polling)
		}
		samples = append(samples, s)
		c.Close()
	}
	rcReport(b, samples)
}

// rcReport reports the samples' figures in seconds.
func rcReport(b *testing.B, samples []rcSample) {
	pick := func(f func(rcSample) time.Duration) []time.Duration {
		out := make([]time.Duration, 0, len(samples))
		for _, s := range samples {
			out = append(out, f(s))
		}
		slices.Sort(out)
		return out
	}
	sec := func(d time.Duration) float64 { return d.Seconds() }
	rec := pick(func(s rcSample) time.Duration { return s.recovery })
	b.ReportMetric(sec(percentile(rec, 50)), "recovery-p50-s")
	b.ReportMetric(sec(rec[len(rec)-1]), "recovery-max-s")
	b.ReportMetric(sec(percentile(pick(func(s rcSample) time.Duration { return s.down }), 50)), "down-s")
	b.ReportMetric(sec(percentile(pick(func(s rcSample) time.Duration { return s.lost }), 50)), "lost-s")
	b.ReportMetric(sec(percentile(pick(func(s rcSample) time.Duration { return s.start }), 50)), "start-s")
	b.ReportMetric(sec(percentile(pick(func(s rcSample) time.Duration { return s.running }), 50)), "running-s")
}

// rcResilientBundle is a one-job bundle of the test program with a primary
// and a backup that may not share a node.
func rcResilientBundle(b *testing.B) *norsk.Bundle {
	return &norsk.Bundle{
		BundleId: rcBundle,
		Jobs: []*norsk.BundleJobSpec{{
			JobName:      "channel",
			Requirements: &norsk.JobRequirements{RequiredCapacity: 0.25},
			Job: &norsk.Job{Services: []*norsk.Service{{
				Name:    "main",
				Command: []string{testcluster.TestProg(b)},
			}}},
		}},
		ResiliencePolicy: &norsk.ResiliencePolicy{SameNode: norsk.AntiAffinityForbid},
	}
}

// rcRunning is the job's instance in role if it is RUNNING on a node other
// than notOn (nil otherwise, or if the call fails).
func rcRunning(ctx context.Context, cl *norsk.Manager, jobID, role, notOn string) *norsk.Instance {
	jh, err := cl.JobById(ctx, jobID)
	if err != nil {
		return nil
	}
	for _, in := range jh.GetInstances() {
		if in.GetRole() == role && in.GetPhase() == norsk.InstancePhaseRunning && in.GetNodeId() != notOn {
			return in
		}
	}
	return nil
}

// rcNode is the node named name as ListNodes shows it (nil if absent or the
// call fails).
func rcNode(ctx context.Context, cl *norsk.Manager, name string) *norsk.Node {
	nodes, err := cl.ListNodes(ctx)
	if err != nil {
		return nil
	}
	for _, n := range nodes {
		if n.GetNodeId() == name {
			return n
		}
	}
	return nil
}

// rcConnected reports whether the Manager shows the node's stream up (true
// when it cannot tell).
func rcConnected(ctx context.Context, cl *norsk.Manager, name string) bool {
	n := rcNode(ctx, cl, name)
	return n == nil || n.GetConnected()
}

// rcEntryAt is the time from t0 to the newest history entry match holds of
// (0 if none).
func rcEntryAt(jh *norsk.JobWithHistory, t0 time.Time, match func(*norsk.JobHistoryEntry) bool) time.Duration {
	for _, e := range jh.GetHistory() {
		if match(e) {
			return e.GetTimestamp().AsTime().Sub(t0)
		}
	}
	return 0
}

// rcWait polls cond every 10 ms until it holds, failing the benchmark
// after timeout.
func rcWait(b *testing.B, what string, timeout time.Duration, cond func() bool) {
	b.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			b.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
