package sim_test

import (
	"context"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/norsk-go/norsk-manager/internal/sim"
	"github.com/norsk-go/norsk-manager/internal/testcluster"
)

// inProcess is a three-member testcluster as a sim.Cluster. Its figures
// are the whole test process's; Kill stops the member cleanly and does not
// bring it back (two members keep the quorum).
type inProcess struct{ c *testcluster.Cluster }

func (p inProcess) Members() []sim.Member {
	var out []sim.Member
	for _, m := range p.c.Members {
		if !m.Witness {
			out = append(out, sim.Member{Name: m.Name, URL: m.URL()})
		}
	}
	return out
}

func (p inProcess) Token() string { return p.c.Token() }

func (p inProcess) Stats(context.Context, string) (sim.ProcessStats, error) {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	cpu := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	return sim.ProcessStats{HeapBytes: ms.HeapAlloc, CPU: cpu, Goroutines: runtime.NumGoroutine(), Shared: true}, nil
}

func (p inProcess) Kill(_ context.Context, member string, _ <-chan struct{}) error {
	p.c.Member(member).Stop()
	return nil
}

// TestSmoke runs a small scenario end to end against a real three-member
// cluster: 50 simulated nodes (20 with -short or the race detector), 200
// jobs in bundles (60), 5 subscribers, and the primary taken away half way.
// Every instance must run, each started exactly once, and every subscriber
// must see every job running.
func TestSmoke(t *testing.T) {
	nodes, jobs := 50, int64(200)
	if testing.Short() || raceEnabled { // the same paths, fewer of them
		nodes, jobs = 20, 60
	}
	c := testcluster.New(t, testcluster.Options{Members: 3})
	// A bound on a hung run, not a timing check.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	res, err := sim.Run(ctx, inProcess{c}, sim.Options{
		Nodes: nodes, Jobs: int(jobs), JobsPerBundle: 10, Subscribers: 5,
		Failover: true, IdleWindow: 500 * time.Millisecond, Parallel: 8,
		Fleet: sim.Config{StartDelay: 5 * time.Millisecond},
	})
	var report strings.Builder
	if res != nil {
		res.Write(&report)
	}
	t.Log("\n" + report.String())
	if err != nil {
		t.Fatal(err)
	}
	if res.Running != jobs {
		t.Errorf("%d instances running at the end, want %d", res.Running, jobs)
	}
	if int64(res.Starts.Instances) != jobs || int64(res.Starts.Total) != jobs {
		t.Errorf("%d instances started in %d starts, want %d in %d", res.Starts.Instances, res.Starts.Total, jobs, jobs)
	}
	for _, r := range res.Starts.Twice {
		t.Errorf("instance %s started %d times: tokens %v on nodes %v", r.Instance, len(r.Tokens), r.Tokens, r.Nodes)
	}
	for i, s := range res.Subscribers {
		if int64(s.RunningSeen) != jobs {
			t.Errorf("subscriber %d saw %d jobs running, want %d", i, s.RunningSeen, jobs)
		}
	}
	if res.FinalPrimary == res.Primary {
		t.Errorf("the primary is still %s after the failover", res.Primary)
	}
}
