package sim

import (
	"fmt"
	"io"
	"time"
)

// Nomad's published scheduler figures: C1M placed 1,000,000 containers on
// 5,000 hosts in under 5 minutes with 5 servers (≈ 3,750 placements/s as
// issue 17 counts it), C2M 2,000,000 on 6,100 hosts at ≈ 1,500/s.
const (
	nomadC1MRate = 3750.0
	nomadC2MRate = 1500.0
)

// PlacementsPerSecond is the jobs placed and reported running per second
// of the whole run (zero when it did not finish).
func (r *Result) PlacementsPerSecond() float64 {
	if r.Placed <= 0 || r.Running < int64(r.Options.Jobs) {
		return 0
	}
	return float64(r.Options.Jobs) / r.Placed.Seconds()
}

// HeapPerNode is the primary's heap growth per node, in bytes.
func (r *Result) HeapPerNode() float64 {
	if r.Options.Nodes == 0 {
		return 0
	}
	return (float64(r.HeapNodes) - float64(r.HeapBase)) / float64(r.Options.Nodes)
}

// HeapPerJob is the heap growth per job of a primary with every node
// online: the final primary's heap at the end less the first primary's
// before any job (after a failover they are two processes in the same
// role, each holding every node's stream), in bytes.
func (r *Result) HeapPerJob() float64 {
	if r.Options.Jobs == 0 || r.HeapEnd == 0 || r.HeapNodes == 0 {
		return 0
	}
	return (float64(r.HeapEnd) - float64(r.HeapNodes)) / float64(r.Options.Jobs)
}

// CPUPerHeartbeat is the primary's CPU time per heartbeat of the idle
// fleet: everything the primary did in the window divided by the
// heartbeats sent in it (an upper bound: idle work that is not the
// heartbeats' is in it too).
func (r *Result) CPUPerHeartbeat() time.Duration {
	if r.IdleHeartbeats == 0 {
		return 0
	}
	return r.IdleCPU / time.Duration(r.IdleHeartbeats)
}

// OK reports whether nothing was lost and nothing started twice: every
// instance runs, each was started exactly once, and every subscriber saw
// every job's running entry.
func (r *Result) OK() bool {
	if r.Running != int64(r.Options.Jobs) || r.Starts.Instances != r.Options.Jobs || len(r.Starts.Twice) != 0 {
		return false
	}
	for _, s := range r.Subscribers {
		if s.RunningSeen != r.Options.Jobs {
			return false
		}
	}
	return true
}

// Write prints the result as a report.
func (r *Result) Write(w io.Writer) {
	o := r.Options
	p := func(format string, args ...any) { _, _ = fmt.Fprintf(w, format+"\n", args...) }
	p("norsk-sim: %d nodes, %d jobs in %d bundles of %d, %d subscribers, failover %v", o.Nodes, o.Jobs, r.Bundles, o.JobsPerBundle, o.Subscribers, o.Failover)
	shared := ""
	if r.Shared {
		shared = " (the whole test process, not the member alone)"
	}
	p("primary %s, final primary %s", r.Primary, r.FinalPrimary)
	p("registration: %d nodes online in %s", o.Nodes, r.Register.Round(time.Millisecond))
	p("memory per node on the primary: %.1f KiB (heap %s → %s)%s", r.HeapPerNode()/1024, mib(r.HeapBase), mib(r.HeapNodes), shared)
	p("memory per job on the primary: %.1f KiB (heap with every node %s → %s at the end on %s; it had %s as a follower before the jobs)%s",
		r.HeapPerJob()/1024, mib(r.HeapNodes), mib(r.HeapEnd), r.FinalPrimary, mib(r.HeapFinalBase), shared)
	hbRate := float64(r.IdleHeartbeats) / r.IdleWindow.Seconds()
	p("CPU per heartbeat on the primary: %s (%s CPU over %s, %d heartbeats = %.0f/s; %.0f%% of one core)%s",
		r.CPUPerHeartbeat().Round(100*time.Nanosecond), r.IdleCPU.Round(time.Millisecond), r.IdleWindow.Round(time.Millisecond),
		r.IdleHeartbeats, hbRate, 100*r.IdleCPU.Seconds()/r.IdleWindow.Seconds(), shared)
	rate := r.PlacementsPerSecond()
	p("jobs: %d from the first CreateBundle to every instance running on the fleet in %s = %.0f placements/s (CreateBundle retries %d)",
		o.Jobs, r.Placed.Round(time.Millisecond), rate, r.CreateRetries)
	if r.Seen > 0 {
		p("      … and to every subscriber having seen every job's running entry: %s", r.Seen.Round(time.Millisecond))
	}
	if rate > 0 {
		p("      vs Nomad C1M ≈ %.0f/s (5 dedicated servers): %.2f×; vs C2M ≈ %.0f/s: %.2f×", nomadC1MRate, rate/nomadC1MRate, nomadC2MRate, rate/nomadC2MRate)
	}
	if o.Failover {
		p("failover: primary taken away at %s; a new primary after %s; every node streaming with it after %s",
			r.FailoverAt.Round(time.Millisecond), r.FailoverNewP.Round(time.Millisecond), r.FailoverStream.Round(time.Millisecond))
	}
	p("starts: %d instances started, %d starts, %d started more than once; %d running at the end", r.Starts.Instances, r.Starts.Total, len(r.Starts.Twice), r.Running)
	for i, t := range r.Starts.Twice {
		if i == 10 {
			p("  … %d more", len(r.Starts.Twice)-10)
			break
		}
		p("  twice: %s tokens %v nodes %v", t.Instance, t.Tokens, t.Nodes)
	}
	if len(r.Subscribers) > 0 {
		var lag histogram
		minEv, maxEv, complete, resumes, resyncs := r.Subscribers[0].Events, r.Subscribers[0].Events, 0, 0, 0
		for _, s := range r.Subscribers {
			lag.merge(s.Lag)
			minEv, maxEv = min(minEv, s.Events), max(maxEv, s.Events)
			if s.RunningSeen == o.Jobs {
				complete++
			}
			resumes += s.Resumes
			resyncs += s.Resyncs
		}
		p("event stream: %d subscribers, %d–%d events each, %d of them saw every job running, %d resumes after a member went away, %d resyncs (fell out of the buffer)",
			len(r.Subscribers), minEv, maxEv, complete, resumes, resyncs)
		p("      lag (receipt − commit time): mean %s, p50 %s, p99 %s, max %s over %d deliveries",
			lag.mean().Round(100*time.Microsecond), lag.quantile(0.5).Round(100*time.Microsecond), lag.quantile(0.99).Round(100*time.Microsecond),
			lag.max.Round(100*time.Microsecond), lag.n)
	}
	writeEventWindow(p, r.Manager)
	writeAutoManager(p, r.AutoManager)
	verdict := "OK: nothing lost, nothing started twice"
	if !r.OK() {
		verdict = "NOT OK: see the counts above"
	}
	p("%s", verdict)
}

func mib(b uint64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }
