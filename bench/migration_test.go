package bench

// Migration benchmarks: what each strategy does to a live frame stream.
//
//	go test ./bench -run '^$' -bench 'Migration' -benchtime=50x
//
// # BenchmarkMigration/strategy=…
//
// Two in-process workers with job sockets (process runtime), the sample
// media job (examples/sample-media) streaming migrationFrameRate (25) fps
// over UDP to a sink in the benchmark, placed by the AutoManager as a
// one-job bundle. Per iteration (-benchtime=50x: 50 migrations per
// strategy, each of a fresh bundle) the job is migrated to the other worker
// with the strategy and the stream examined at the sink. Arrival times are
// the kernel's receive stamps (testcluster.FrameSink), so the benchmark
// process's own scheduling is not in them. Reported, over the iterations:
//
//	gap-ms         mean of the time between the target's first frame at the
//	               sink and the source's last one before it; one frame
//	               interval (40 ms) is a seamless cut
//	p50-gap-ms, p99-gap-ms, max-gap-ms, min-gap-ms
//	               its distribution (nearest rank: at 50 iterations p99 is
//	               the largest)
//	src-late-ms    mean of how late the source's last frame left against its
//	               slot on the source's own frame clock (estimated from its
//	               frames' send stamps: the least late of its last 50 is
//	               taken as on time)
//	tgt-late-ms, max-tgt-late-ms
//	               how late the target's first frame left against the slot
//	               the source's next frame would have had; only for a
//	               strategy whose target continues the sequence (handover)
//	lost/op, dup/op
//	               frames missing or repeated. For a target that continues
//	               the source's sequence, over the whole stream; for one
//	               that restarts it (overlap, stopThenStart: a fresh
//	               instance starts at 0) within each sender's own sequence,
//	               so the restart is not counted as duplicates
//	restart/op     iterations whose target restarted the sequence (the
//	               downstream sees the numbering jump back)
//	overlap-frames/op, overlap-ms
//	               frames from the source that arrived after the target's
//	               first, and for how long both were on air (mean)
//	silence-ms     mean of the longest time without any frame arriving
//	               during the cutover (from the source's last frame before
//	               the target's first to the target's first after the
//	               source's last): the real output gap a downstream sees,
//	               whatever the numbering; the gap itself unless both were
//	               on air
//	max-silence-ms its worst
//	migration-ms   mean time from MigrateJob to the migration's done
//	completed, aborted
//	               how many migrations the figures are over, and how many
//	               aborted instead (each logged with its reason)
//
// With -test.v each iteration's cut is logged. Figures, never assertions.
//
// The sample job paces the frames either side of the cut at real-time
// priority (its CUTOVER_PRIORITY, default 10) when it may; pass
// -args -migration.cutover-priority=0 to measure it waiting awake instead,
// as it does where it may not (no CAP_SYS_NICE).

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/norsk-go/norsk-manager/examples/sample-media/frames"
	"github.com/norsk-go/norsk-manager/internal/testcluster"
	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

// migrationFrameRate is the sample job's frame rate in BenchmarkMigration.
const migrationFrameRate = 25

var migrationPriority = flag.String("migration.cutover-priority", "",
	"BenchmarkMigration: the sample job's CUTOVER_PRIORITY (empty: its default)")

func buildSampleMedia(b *testing.B) string {
	b.Helper()
	out := filepath.Join(b.TempDir(), "sample-media")
	cmd := exec.Command("go", "build", "-o", out, "github.com/norsk-go/norsk-manager/examples/sample-media")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if msg, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("build the sample media job: %v\n%s", err, msg)
	}
	return out
}

// cutStats is what one migration did to the stream at the sink.
type cutStats struct {
	gap, silence     time.Duration
	srcLate, tgtLate time.Duration
	continued        bool // the target went on with the source's sequence
	lost, dup        uint64
	overlap          int
	overlapDur       time.Duration // both on air
}

// analyseCut reads the sink's frames around the move from node src to node
// tgt; interval is the frame interval.
func analyseCut(sink *testcluster.FrameSink, src, tgt string, interval time.Duration) (cutStats, error) {
	cut, err := sink.CutoverFrom(src, tgt)
	if err != nil {
		return cutStats{}, err
	}
	fs := sink.Frames()
	last, first := cut.LastFromSource, cut.FirstFromTarget
	s := cutStats{gap: cut.Gap, overlap: cut.Overlap, continued: first.Seq == last.Seq+1}

	// The source's frame clock: the least late of its last 50 frames is
	// taken as on time, which puts frame last.Seq's slot at slot.
	slot := time.Time{}
	for _, f := range fs {
		if f.Node != src || f.Seq > last.Seq || last.Seq-f.Seq > 50 {
			continue
		}
		if at := f.Sent.Add(time.Duration(last.Seq-f.Seq) * interval); slot.IsZero() || at.Before(slot) {
			slot = at
		}
	}
	s.srcLate = last.Sent.Sub(slot)
	if s.continued {
		s.tgtLate = first.Sent.Sub(slot.Add(interval))
	}

	// Lost and duplicated: over the whole stream when the target continued
	// it; within each sender's own numbering when it restarted.
	if s.continued {
		s.lost, s.dup = cut.Missing, cut.Duplicates
	} else {
		var bySender [2]frames.Checker
		for _, f := range fs {
			switch f.Node {
			case src:
				bySender[0].Add(frames.Frame{Seq: f.Seq}, f.At)
			case tgt:
				bySender[1].Add(frames.Frame{Seq: f.Seq}, f.At)
			}
		}
		for i := range bySender {
			r := bySender[i].Report()
			s.lost += r.MissingCount
			s.dup += r.Duplicates
		}
	}

	// The cutover runs from the source's last frame before the target's
	// first to the target's first frame after the source's very last (the
	// same two frames unless both were on air). The longest silence in it,
	// whoever sent the frames, is the output gap a downstream sees.
	from, to := last.At, first.At
	for _, f := range fs {
		if f.Node == src && f.At.After(first.At) {
			s.overlapDur = max(s.overlapDur, f.At.Sub(first.At))
		}
	}
	if s.overlapDur > 0 {
		srcEnd := first.At.Add(s.overlapDur)
		for _, f := range fs {
			if f.Node == tgt && !f.At.Before(srcEnd) {
				to = f.At
				break
			}
		}
	}
	var ats []time.Time
	for _, f := range fs {
		if !f.At.Before(from) && !f.At.After(to) {
			ats = append(ats, f.At)
		}
	}
	slices.SortFunc(ats, func(a, b time.Time) int { return a.Compare(b) })
	for i := 1; i < len(ats); i++ {
		s.silence = max(s.silence, ats[i].Sub(ats[i-1]))
	}
	return s, nil
}

func BenchmarkMigration(b *testing.B) {
	prog := buildSampleMedia(b)
	interval := time.Second / migrationFrameRate
	for _, s := range []norsk.MigrationStrategy{norsk.StrategyHandover, norsk.StrategyOverlap, norsk.StrategyStopThenStart} {
		name := strings.TrimPrefix(s.String(), "MIGRATION_STRATEGY_")
		b.Run("strategy="+name, func(b *testing.B) {
			c := testcluster.New(b, testcluster.Options{Workers: 2, JobSocket: true})
			cl := c.Client()
			ctx := context.Background()
			var cuts []cutStats
			var took []time.Duration
			aborted := 0
			for i := 0; b.Loop(); i++ {
				b.StopTimer()
				sink := testcluster.NewFrameSink(b)
				id := fmt.Sprintf("mig%d", i)
				env := map[string]string{"SINK": sink.URL(), "FRAME_RATE": fmt.Sprint(migrationFrameRate)}
				if *migrationPriority != "" {
					env["CUTOVER_PRIORITY"] = *migrationPriority
				}
				if _, err := cl.CreateBundle(ctx, &norsk.Bundle{BundleId: id, Jobs: []*norsk.BundleJobSpec{{
					JobName: "channel", Requirements: &norsk.JobRequirements{RequiredCapacity: 0.1},
					Job: &norsk.Job{Services: []*norsk.Service{{Name: "media", Command: []string{prog}, Env: env}}},
				}}}); err != nil {
					b.Fatal(err)
				}
				src := c.WaitPhase(id+".channel.0", "primary", norsk.InstancePhaseRunning)
				wctx, cancel := context.WithTimeout(ctx, time.Minute)
				if err := sink.WaitFrom(wctx, src.GetNodeId(), migrationFrameRate); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				start := time.Now()
				st, err := cl.MigrateJob(ctx, id+".channel.0", norsk.MigrateOptions{Strategy: s})
				if err != nil {
					b.Fatal(err)
				}
				for st.GetPhase() != norsk.PhaseDone && st.GetPhase() != norsk.PhaseAborted {
					time.Sleep(5 * time.Millisecond)
					if st, err = cl.GetMigration(ctx, st.GetMigrationId()); err != nil {
						b.Fatal(err)
					}
				}
				elapsed := time.Since(start)
				b.StopTimer()
				if st.GetPhase() != norsk.PhaseDone {
					// Counted and said, not fatal: the figures are over the
					// migrations that completed.
					aborted++
					b.Logf("%s %d: migration aborted: %s", name, i, st.GetAbortReason())
					cancel()
					if err := cl.DeleteBundle(ctx, id); err != nil {
						b.Fatal(err)
					}
					b.StartTimer()
					continue
				}
				took = append(took, elapsed)
				if err := sink.WaitFrom(wctx, st.GetTargetNodeId(), migrationFrameRate); err != nil {
					b.Fatal(err)
				}
				cancel()
				cs, err := analyseCut(sink, src.GetNodeId(), st.GetTargetNodeId(), interval)
				if err != nil {
					b.Fatal(err)
				}
				cuts = append(cuts, cs)
				if testing.Verbose() {
					b.Logf("%s %d: gap %.2f ms silence %.2f ms src-late %.2f ms tgt-late %.2f ms continued %v lost %d dup %d overlap %d",
						name, i, ms(cs.gap), ms(cs.silence), ms(cs.srcLate), ms(cs.tgtLate), cs.continued, cs.lost, cs.dup, cs.overlap)
				}
				if err := cl.DeleteBundle(ctx, id); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			reportCuts(b, cuts, took)
			b.ReportMetric(float64(aborted), "aborted")
			b.ReportMetric(float64(len(cuts)), "completed")
		})
	}
}

// reportCuts reports the iterations' figures (see BenchmarkMigration).
func reportCuts(b *testing.B, cuts []cutStats, took []time.Duration) {
	n := float64(len(cuts))
	if n == 0 {
		return
	}
	var gaps, silences, tgtLates []time.Duration
	var srcLate, migration time.Duration
	var lost, dup, restarts, overlap float64
	var overlapDur time.Duration
	for i, c := range cuts {
		gaps = append(gaps, c.gap)
		silences = append(silences, c.silence)
		srcLate += c.srcLate
		migration += took[i]
		lost += float64(c.lost)
		dup += float64(c.dup)
		overlap += float64(c.overlap)
		overlapDur += c.overlapDur
		if c.continued {
			tgtLates = append(tgtLates, c.tgtLate)
		} else {
			restarts++
		}
	}
	slices.Sort(gaps)
	slices.Sort(silences)
	mean := func(xs []time.Duration) float64 {
		t := 0.0
		for _, x := range xs {
			t += ms(x)
		}
		return t / float64(len(xs))
	}
	b.ReportMetric(mean(gaps), "gap-ms")
	b.ReportMetric(ms(percentile(gaps, 50)), "p50-gap-ms")
	b.ReportMetric(ms(percentile(gaps, 99)), "p99-gap-ms")
	b.ReportMetric(ms(gaps[len(gaps)-1]), "max-gap-ms")
	b.ReportMetric(ms(gaps[0]), "min-gap-ms")
	b.ReportMetric(mean(silences), "silence-ms")
	b.ReportMetric(ms(silences[len(silences)-1]), "max-silence-ms")
	b.ReportMetric(ms(srcLate)/n, "src-late-ms")
	if len(tgtLates) == len(cuts) {
		b.ReportMetric(mean(tgtLates), "tgt-late-ms")
		b.ReportMetric(ms(slices.Max(tgtLates)), "max-tgt-late-ms")
	}
	b.ReportMetric(lost/n, "lost/op")
	b.ReportMetric(dup/n, "dup/op")
	b.ReportMetric(restarts/n, "restart/op")
	b.ReportMetric(overlap/n, "overlap-frames/op")
	b.ReportMetric(ms(overlapDur)/n, "overlap-ms")
	b.ReportMetric(ms(migration)/n, "migration-ms")
}
