package bench

// Migration benchmarks: what each strategy does to a live frame stream.
//
//	go test ./bench -run '^$' -bench 'Migration' -benchtime=3x
//
// # BenchmarkMigration/strategy=…
//
// Two in-process workers with job sockets (process runtime), the sample
// media job (examples/sample-media) streaming 25 fps over UDP to a sink
// in the benchmark, placed by the AutoManager as a one-job bundle. Per
// iteration the job is migrated to the other worker with the strategy and
// the stream examined: gap-ms is the time between the last frame the sink
// received from the source and the first from the target (negative: both
// were on air that long), lost and dup the frames missing or duplicated
// over the stream (frames.Checker), migration-ms the time from MigrateJob
// to the migration's done. Reported as the mean over iterations, with the
// worst gap (max-gap-ms). Figures, never assertions.

import (
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/norsk-go/norsk-manager/internal/testcluster"
	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

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

func BenchmarkMigration(b *testing.B) {
	prog := buildSampleMedia(b)
	for _, s := range []norsk.MigrationStrategy{norsk.StrategyHandover, norsk.StrategyOverlap, norsk.StrategyStopThenStart} {
		b.Run("strategy="+s.String()[len("MIGRATION_STRATEGY_"):], func(b *testing.B) {
			c := testcluster.New(b, testcluster.Options{Workers: 2, JobSocket: true})
			cl := c.Client()
			ctx := context.Background()
			var gaps, took []float64
			var lost, dup uint64
			for i := 0; b.Loop(); i++ {
				b.StopTimer()
				sink := testcluster.NewFrameSink(b)
				id := fmt.Sprintf("mig%d", i)
				if _, err := cl.CreateBundle(ctx, &norsk.Bundle{BundleId: id, Jobs: []*norsk.BundleJobSpec{{
					JobName: "channel", Requirements: &norsk.JobRequirements{RequiredCapacity: 0.1},
					Job: &norsk.Job{Services: []*norsk.Service{{Name: "media", Command: []string{prog},
						Env: map[string]string{"SINK": sink.URL(), "FRAME_RATE": "25"}}}},
				}}}); err != nil {
					b.Fatal(err)
				}
				src := c.WaitPhase(id+".channel.0", "primary", norsk.InstancePhaseRunning)
				wctx, cancel := context.WithTimeout(ctx, time.Minute)
				if err := sink.WaitFrom(wctx, src.GetNodeId(), 25); err != nil {
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
				took = append(took, float64(time.Since(start).Milliseconds()))
				b.StopTimer()
				if st.GetPhase() != norsk.PhaseDone {
					b.Fatalf("migration aborted: %s", st.GetAbortReason())
				}
				if err := sink.WaitFrom(wctx, st.GetTargetNodeId(), 25); err != nil {
					b.Fatal(err)
				}
				cancel()
				cut, err := sink.CutoverFrom(src.GetNodeId(), st.GetTargetNodeId())
				if err != nil {
					b.Fatal(err)
				}
				gaps = append(gaps, float64(cut.Gap.Microseconds())/1000)
				lost += cut.Missing
				dup += cut.Duplicates
				if err := cl.DeleteBundle(ctx, id); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			mean := func(xs []float64) float64 {
				t := 0.0
				for _, x := range xs {
					t += x
				}
				return t / float64(len(xs))
			}
			worst := math.Inf(-1)
			for _, g := range gaps {
				worst = max(worst, g)
			}
			b.ReportMetric(mean(gaps), "gap-ms")
			b.ReportMetric(worst, "max-gap-ms")
			b.ReportMetric(float64(lost)/float64(len(gaps)), "lost/op")
			b.ReportMetric(float64(dup)/float64(len(gaps)), "dup/op")
			b.ReportMetric(mean(took), "migration-ms")
		})
	}
}
