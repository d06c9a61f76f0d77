package tests

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/norsk-go/norsk-manager/examples/exampletest"
	"github.com/norsk-go/norsk-manager/internal/cli"
	"github.com/norsk-go/norsk-manager/internal/runtime/runtimetest"
	"github.com/norsk-go/norsk-manager/internal/testcluster"
	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

var (
	sampleOnce sync.Once
	samplePath string
	sampleErr  error
)

// sampleMedia builds the sample media job once per test binary.
func sampleMedia(t testing.TB) string {
	t.Helper()
	sampleOnce.Do(func() {
		dir, err := os.MkdirTemp("", "norsk-sample-media-")
		if err != nil {
			sampleErr = err
			return
		}
		samplePath = filepath.Join(dir, "sample-media")
		// exampletest.Build wants a per-test directory; build into ours.
		sampleErr = buildInto(samplePath, exampletest.SampleMediaPackage)
	})
	if sampleErr != nil {
		t.Fatalf("build the sample media job: %v", sampleErr)
	}
	return samplePath
}

// buildInto builds the program at import path pkg (static) into out.
func buildInto(out, pkg string) error {
	cmd := exec.Command("go", "build", "-o", out, pkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if msg, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %v\n%s", pkg, err, msg)
	}
	return nil
}

// mediaBundle is a one-job bundle (no backup) of the sample media job
// streaming to sink at 25 fps.
func mediaBundle(id, sink string, prog string) *norsk.Bundle {
	return &norsk.Bundle{BundleId: id, Jobs: []*norsk.BundleJobSpec{{
		JobName:      "channel",
		Requirements: &norsk.JobRequirements{RequiredCapacity: 0.1},
		Job: &norsk.Job{Services: []*norsk.Service{{
			Name: "media", Command: []string{prog},
			Env: map[string]string{"SINK": sink, "FRAME_RATE": "25"},
		}}},
	}}}
}

// followMigration polls a migration until it is done or aborted.
func followMigration(t *testing.T, cl *norsk.Manager, id string) *norsk.MigrationState {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		st, err := cl.GetMigration(ctx(t), id)
		if err != nil {
			t.Fatal(err)
		}
		if st.GetPhase() == norsk.PhaseDone || st.GetPhase() == norsk.PhaseAborted {
			return st
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("migration %s did not end within a minute", id)
	return nil
}

// migrateSample runs the sample job on one of two workers (with job
// sockets), streams it to a sink, migrates it with strategy and returns
// what the cutover did to the stream.
func migrateSample(t *testing.T, strategy norsk.MigrationStrategy) (testcluster.Cutover, *norsk.MigrationState) {
	c := testcluster.New(t, testcluster.Options{Workers: 2, JobSocket: true})
	cl, x := c.Client(), ctx(t)
	sink := testcluster.NewFrameSink(t)
	if _, err := cl.CreateBundle(x, mediaBundle("live", sink.URL(), sampleMedia(t))); err != nil {
		t.Fatal(err)
	}
	src := running(c, "live.channel.0", "primary")
	if err := sink.WaitFrom(x, src.GetNodeId(), 25); err != nil {
		t.Fatalf("before the migration: %v", err)
	}
	st, err := cl.MigrateJob(x, "live.channel.0", norsk.MigrateOptions{Strategy: strategy})
	if err != nil {
		t.Fatalf("migrate: %v", err)
	}
	st = followMigration(t, cl, st.GetMigrationId())
	if st.GetPhase() != norsk.PhaseDone {
		t.Fatalf("migration aborted: %s (phases %v)", st.GetAbortReason(), st.GetPhaseHistory())
	}
	if err := sink.WaitFrom(x, st.GetTargetNodeId(), 25); err != nil {
		t.Fatalf("after the migration: %v", err)
	}
	cut, err := sink.CutoverFrom(src.GetNodeId(), st.GetTargetNodeId())
	if err != nil {
		t.Fatal(err)
	}
	// The job now runs on the target, under the target's key, told its slot.
	jh := c.Job("live.channel.0")
	in := testcluster.Instance(jh, st.GetTargetRole())
	if in == nil || in.GetPhase() != norsk.InstancePhaseRunning || in.GetRuntimeRole() != "primary" || in.GetNodeId() != st.GetTargetNodeId() {
		t.Fatalf("target instance %v: want running on %s as slot primary", in, st.GetTargetNodeId())
	}
	if old := testcluster.Instance(jh, "primary"); old.GetPhase() != norsk.InstancePhaseStopped {
		t.Fatalf("source instance %v: want stopped", old)
	}
	t.Logf("%s: gap %s (last from source seq %d, first from target seq %d), overlap %d frames, missing %d, duplicates %d; migration took %s",
		strings.TrimPrefix(strategy.String(), "MIGRATION_STRATEGY_"), cut.Gap, cut.LastFromSource.Seq, cut.FirstFromTarget.Seq, cut.Overlap,
		cut.Missing, cut.Duplicates, st.GetUpdatedAt().AsTime().Sub(st.GetStartedAt().AsTime()))
	return cut, st
}

// A handover moves the sample job between two workers with an unbroken
// frame sequence: the target starts exactly where the source stopped.
func TestHandoverKeepsEveryFrameOnce(t *testing.T) {
	t.Parallel()
	cut, st := migrateSample(t, norsk.StrategyHandover)
	if cut.Missing != 0 || cut.Duplicates != 0 {
		t.Fatalf("handover lost %d and duplicated %d frames: %s", cut.Missing, cut.Duplicates, cut.Report)
	}
	if cut.FirstFromTarget.Seq != cut.LastFromSource.Seq+1 {
		t.Fatalf("the target started at seq %d, the source stopped after %d", cut.FirstFromTarget.Seq, cut.LastFromSource.Seq)
	}
	want := "proposing placing launching settingStateOnTarget awaitingTargetReady awaitingSourceStop applying stoppingSource done"
	var got []string
	for _, e := range st.GetPhaseHistory() {
		got = append(got, strings.ToLower(e.GetPhase().String()[len("MIGRATION_PHASE_"):]))
	}
	if g := strings.ReplaceAll(strings.Join(got, " "), "_", ""); g != strings.ToLower(want) {
		t.Errorf("phases %s, want %s", g, want)
	}
}

// The other strategies move the job too; their cutover is measured, not
// asserted (a stop-then-start has a gap, an overlap both on air).
func TestOverlapAndStopThenStartMove(t *testing.T) {
	t.Parallel()
	for _, s := range []norsk.MigrationStrategy{norsk.StrategyOverlap, norsk.StrategyStopThenStart} {
		t.Run(s.String(), func(t *testing.T) { migrateSample(t, s) })
	}
}

// Bad requests are refused, saying why, and leave nothing behind.
func TestMigrateRefusals(t *testing.T) {
	t.Parallel()
	c := testcluster.New(t, testcluster.Options{Workers: 2})
	cl, x := c.Client(), ctx(t)
	sink := testcluster.NewFrameSink(t)
	if _, err := cl.CreateBundle(x, mediaBundle("live", sink.URL(), sampleMedia(t))); err != nil {
		t.Fatal(err)
	}
	src := running(c, "live.channel.0", "primary")
	if _, err := cl.CreateJob(x, progJob(t, "manual", runtimetest.Behaviour{}, nil)); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		job  string
		opts norsk.MigrateOptions
		want error
		says string
	}{
		"unknown job":             {"nope", norsk.MigrateOptions{}, norsk.ErrNotFound, "nope"},
		"not placed":              {"manual", norsk.MigrateOptions{}, norsk.ErrFailedPrecondition, "not an AutoManager-placed job"},
		"target is the source":    {"live.channel.0", norsk.MigrateOptions{TargetNodeID: src.GetNodeId()}, norsk.ErrFailedPrecondition, "already runs"},
		"handover without socket": {"live.channel.0", norsk.MigrateOptions{Strategy: norsk.StrategyHandover}, norsk.ErrAborted, ""},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := cl.MigrateJob(x, tc.job, tc.opts)
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("err = %v, want %v saying %q", err, tc.want, tc.says)
			}
		})
	}
	// The Manager's relays say why they cannot reach a job.
	if err := cl.NotifyMigrationGetState(x, &norsk.JobKey{JobId: "live.channel.0", Role: "backup"}, "m-1"); !errors.Is(err, norsk.ErrNotFound) {
		t.Errorf("get-state of a missing instance: %v, want NOT_FOUND", err)
	}
	if err := cl.NotifyMigrationGetState(x, &norsk.JobKey{JobId: "live.channel.0", Role: "primary"}, "m-1"); !errors.Is(err, norsk.ErrFailedPrecondition) || !strings.Contains(err.Error(), "job socket") {
		t.Errorf("get-state on a worker without job sockets: %v, want FAILED_PRECONDITION about the job socket", err)
	}
	if err := cl.NotifyMigrationCutoverApply(x, &norsk.JobKey{JobId: "live.channel.0"}, "m-1", nil); !errors.Is(err, norsk.ErrInvalidArgument) {
		t.Errorf("a key without a role: %v, want INVALID_ARGUMENT", err)
	}
	if err := cl.CancelMigration(x, "no-such-migration", "why"); !errors.Is(err, norsk.ErrNotFound) {
		t.Errorf("abort of an unknown migration: %v, want NOT_FOUND", err)
	}
	// Nothing is left in flight or half-started.
	if _, err := cl.MigrationForJob(x, "live.channel.0"); !errors.Is(err, norsk.ErrNotFound) {
		t.Errorf("a migration is left in flight: %v", err)
	}
	jh := c.Job("live.channel.0")
	for _, in := range jh.GetInstances() {
		if in.GetRole() != "primary" && in.GetPhase() != norsk.InstancePhaseStopped {
			t.Errorf("a target was left: %v", in)
		}
	}
}

// norsk-ctl node drain moves every job off a node, one line per job and
// a summary, and the node takes no new work.
func TestDrainMovesEveryJob(t *testing.T) {
	t.Parallel()
	c := testcluster.New(t, testcluster.Options{Workers: 2})
	cl, x := c.Client(), ctx(t)
	sink := testcluster.NewFrameSink(t)
	var node string
	for i := range 3 {
		id := fmt.Sprintf("ch%d", i)
		b := mediaBundle(id, sink.URL(), sampleMedia(t))
		if _, err := cl.CreateBundle(x, b); err != nil {
			t.Fatal(err)
		}
		in := running(c, id+".channel.0", "primary")
		if node == "" {
			node = in.GetNodeId()
		}
	}
	// Move whatever did not land on the first node there, so it holds all three.
	for i := range 3 {
		id := fmt.Sprintf("ch%d.channel.0", i)
		if in := testcluster.Instance(c.Job(id), "primary"); in.GetNodeId() != node {
			st, err := cl.MigrateJob(x, id, norsk.MigrateOptions{TargetNodeID: node, Strategy: norsk.StrategyOverlap})
			if err != nil {
				t.Fatal(err)
			}
			followMigration(t, cl, st.GetMigrationId())
		}
	}
	var out, errOut strings.Builder
	code := cli.Main(context.Background(), []string{"--manager-url", c.URL(), "--token", c.Token(), "node", "drain", node, "--deadline", "2m"}, strings.NewReader(""), &out, &errOut)
	if code != 0 {
		t.Fatalf("drain exit %d\n%s\n%s", code, out.String(), errOut.String())
	}
	t.Log(out.String())
	if !strings.Contains(out.String(), "drained") || !strings.Contains(out.String(), "3/3 moved") {
		t.Errorf("summary missing: %s", out.String())
	}
	for i := range 3 {
		jh := c.Job(fmt.Sprintf("ch%d.channel.0", i))
		for _, in := range jh.GetInstances() {
			if in.GetNodeId() == node && in.GetPhase() != norsk.InstancePhaseStopped {
				t.Errorf("%s still runs on the drained node", in.GetJobId())
			}
		}
	}
	if n := c.Node(node); !n.GetDraining() {
		t.Errorf("node %s is not draining", node)
	}
	// New work goes elsewhere.
	if _, err := cl.CreateBundle(x, mediaBundle("late", sink.URL(), sampleMedia(t))); err != nil {
		t.Fatal(err)
	}
	if in := running(c, "late.channel.0", "primary"); in.GetNodeId() == node {
		t.Errorf("a new job was placed on the draining node")
	}
}

// A migration in flight survives the Manager's restart (its AutoManager
// starts again and takes the migration over from the store): held in
// applying by a long cutover lead, the handover completes after the
// restart, and the stream still has every frame once.
func TestMigrationSurvivesManagerRestart(t *testing.T) {
	t.Parallel()
	c := testcluster.New(t, testcluster.Options{Workers: 2, JobSocket: true})
	cl, x := c.Client(), ctx(t)
	sink := testcluster.NewFrameSink(t)
	b := mediaBundle("live", sink.URL(), sampleMedia(t))
	b.Jobs[0].Job.Services[0].Env["CUTOVER_LEAD"] = "4s"
	if _, err := cl.CreateBundle(x, b); err != nil {
		t.Fatal(err)
	}
	src := running(c, "live.channel.0", "primary")
	if err := sink.WaitFrom(x, src.GetNodeId(), 10); err != nil {
		t.Fatal(err)
	}
	st, err := cl.MigrateJob(x, "live.channel.0", norsk.MigrateOptions{Strategy: norsk.StrategyHandover})
	if err != nil {
		t.Fatal(err)
	}
	id := st.GetMigrationId()
	c.Eventually("the migration applying (the source's cut 4 s ahead)", func() bool {
		st, err := cl.GetMigration(x, id)
		return err == nil && st.GetPhase() == norsk.PhaseApplying
	})
	c.RestartManager()
	cl = c.Client()
	st = followMigration(t, cl, id)
	if st.GetPhase() != norsk.PhaseDone {
		t.Fatalf("after the restart the migration ended %s: %s", st.GetPhase(), st.GetAbortReason())
	}
	if err := sink.WaitFrom(x, st.GetTargetNodeId(), 10); err != nil {
		t.Fatal(err)
	}
	cut, err := sink.CutoverFrom(src.GetNodeId(), st.GetTargetNodeId())
	if err != nil {
		t.Fatal(err)
	}
	if cut.Missing != 0 || cut.Duplicates != 0 || cut.FirstFromTarget.Seq != cut.LastFromSource.Seq+1 {
		t.Fatalf("across the restart the stream lost %d and duplicated %d frames (%s)", cut.Missing, cut.Duplicates, cut.Report)
	}
}
