package automanager

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/internal/clock"
)

// repairHarness is an AutoManager (its saga running) over a fakeAPI with a
// fake clock: bundle "news" (sameNode FORBID) whose primary and backup
// both run on node a, and node b online and empty.
type repairHarness struct {
	t   *testing.T
	api *fakeAPI
	clk *clock.Fake
	am  *AutoManager
	reg *prometheus.Registry
	ctx context.Context
}

// metric is the value of the AutoManager's metric name (a gauge or a
// counter without labels).
func (h *repairHarness) metric(name string) float64 {
	h.t.Helper()
	mfs, err := h.reg.Gather()
	if err != nil {
		h.t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			m := mf.GetMetric()[0]
			return m.GetGauge().GetValue() + m.GetCounter().GetValue()
		}
	}
	h.t.Fatalf("no metric %s", name)
	return 0
}

func newRepairHarness(t *testing.T, p Policy) *repairHarness {
	t.Helper()
	api := newFakeAPI()
	b := bundle("news", true)
	api.bundles = []*managerv1.Bundle{b}
	for _, jh := range jobsOf(b) {
		api.jobs[jh.GetJob().GetJobId()] = jh
	}
	for job, role := range map[string]string{"news.channel.0": "primary", "news.channel.1": "backup"} {
		api.instance(job, role, "a", phRunning).JobHash = 10
	}
	api.nodes = []*managerv1.Node{node("a"), node("b")}
	clk := clock.NewFake(t0)
	reg := prometheus.NewRegistry()
	am := New(Config{API: api, Clock: clk, Policy: p, Logger: slog.New(slog.DiscardHandler), Metrics: NewMetrics(reg)})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); am.saga.run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return &repairHarness{t: t, api: api, clk: clk, am: am, reg: reg, ctx: ctx}
}

func (h *repairHarness) pass() time.Time {
	h.t.Helper()
	next, err := h.am.Pass(h.ctx)
	if err != nil {
		h.t.Fatalf("pass: %v", err)
	}
	if err := h.am.saga.sync(h.ctx); err != nil {
		h.t.Fatal(err)
	}
	return next
}

// history feeds the saga a history entry of the backup's job, as the
// event stream would.
func (h *repairHarness) history(kind string, in *managerv1.Instance, reason managerv1.StoppingReason) {
	h.t.Helper()
	ref := &managerv1.InstanceRef{Role: in.GetRole(), NodeId: in.GetNodeId(), FencingToken: in.GetFencingToken()}
	var e *managerv1.JobHistoryEntry
	switch kind {
	case "running":
		e = &managerv1.JobHistoryEntry{Event: &managerv1.JobHistoryEntry_Running{Running: &managerv1.InstanceRunning{Instance: ref}}}
	case "stopping":
		e = &managerv1.JobHistoryEntry{Event: &managerv1.JobHistoryEntry_Stopping{Stopping: &managerv1.InstanceStopping{Instance: ref, Reason: reason}}}
	case "stopped":
		e = &managerv1.JobHistoryEntry{Event: &managerv1.JobHistoryEntry_Stopped{Stopped: &managerv1.InstanceStopped{Instance: ref}}}
	}
	if err := h.am.saga.do(h.ctx, func(ctx context.Context) { h.am.saga.onHistory(ctx, in.GetJobId(), e) }); err != nil {
		h.t.Fatal(err)
	}
	if err := h.am.saga.sync(h.ctx); err != nil {
		h.t.Fatal(err)
	}
}

func (h *repairHarness) migrations() []*managerv1.MigrationState {
	all, _ := h.api.ListMigrations(h.ctx, "")
	return all
}

// stops are the StopJob calls made so far.
func (h *repairHarness) stops() []string {
	var out []string
	for _, c := range h.api.callLog() {
		if strings.HasPrefix(c, "StopJob") {
			out = append(out, c)
		}
	}
	return out
}

// Issue 12 item 9, through the AutoManager's pass and its saga: a repair
// is a migration of the backup (overlap: its new copy runs before the old
// one is stopped), recorded as a repair with its reason; the primary is
// never stopped; once done the bundle is compliant and nothing more
// moves.
func TestPassRepairMakesBeforeBreaking(t *testing.T) {
	t.Parallel()
	h := newRepairHarness(t, Policy{})
	h.pass()
	migs := h.migrations()
	if len(migs) != 1 {
		t.Fatalf("%d migrations after the pass, want one repair", len(migs))
	}
	m := migs[0]
	if !m.GetRepair() || m.GetStrategy() != stratOverlap || m.GetSourceJobId() != "news.channel.1" || m.GetSourceRole() != "backup" ||
		m.GetRequestedTargetNodeId() != "b" || m.GetTargetNodeId() != "b" || m.GetRequestedBy() != repairRequester ||
		!strings.Contains(m.GetReason(), "antiAffinity.sameNode") || m.GetPhase() != phLaunching {
		t.Fatalf("migration %v, want the backup's overlap repair to b, launching", m)
	}
	if got := h.metric("norsk_automanager_repairs_started_total"); got != 1 {
		t.Errorf("repairs started = %v", got)
	}
	if got := h.metric("norsk_automanager_degraded_instances"); got != 2 {
		t.Errorf("degraded instances = %v, want 2", got)
	}
	tgt := h.api.jobs["news.channel.1"].Instances[1]
	if tgt.GetRole() != m.GetTargetRole() || tgt.GetNodeId() != "b" {
		t.Fatalf("target instance %v", tgt)
	}
	if len(h.stops()) != 0 {
		t.Fatalf("stops %v before the target runs: a repair breaks nothing first", h.stops())
	}

	// Another pass while it is under way starts nothing more.
	h.pass()
	if n := len(h.migrations()); n != 1 {
		t.Fatalf("%d migrations after a second pass, want still one", n)
	}

	// The target runs: only now is the old backup stopped.
	h.api.instance("news.channel.1", tgt.GetRole(), "b", phRunning)
	h.history("running", tgt, 0)
	if got := h.stops(); !slices.Equal(got, []string{"StopJob news.channel.1/backup@a"}) {
		t.Fatalf("stops %v, want the old backup's alone", got)
	}
	src := h.api.instance("news.channel.1", "backup", "a", stopped)
	h.history("stopped", src, 0)
	if m := h.api.stored(m.GetMigrationId()); m.GetPhase() != phDone {
		t.Fatalf("migration %v, want done", m)
	}

	h.clk.Advance(time.Hour)
	h.pass()
	if n := len(h.migrations()); n != 1 {
		t.Errorf("%d migrations once compliant, want the one repair", n)
	}
	if got := h.metric("norsk_automanager_degraded_instances"); got != 0 {
		t.Errorf("degraded instances = %v after the repair, want 0", got)
	}
	for _, s := range h.stops() {
		if strings.Contains(s, "news.channel.0") {
			t.Errorf("the primary was stopped: %v", h.stops())
		}
	}
	for _, c := range h.api.callLog() {
		if strings.HasPrefix(c, "StartJob news.channel.0") {
			t.Errorf("the primary was started again: %s", c)
		}
	}
}

// A repair whose target failed aborts, leaving the backup where it was;
// the next is not tried before the bundle's interval has passed on the
// clock, and the pass says when that is.
func TestPassRepairRetriesAfterTheInterval(t *testing.T) {
	t.Parallel()
	h := newRepairHarness(t, Policy{Repair: RepairPolicy{Interval: 2 * time.Minute}})
	h.pass()
	first := h.migrations()[0]
	tgt := h.api.jobs["news.channel.1"].Instances[1]
	h.history("stopping", tgt, managerv1.StoppingReason_STOPPING_REASON_JOB_FAILED)
	h.api.instance("news.channel.1", tgt.GetRole(), "b", stopped)
	if m := h.api.stored(first.GetMigrationId()); m.GetPhase() != phAborted {
		t.Fatalf("migration %v, want aborted", m)
	}
	if got := h.stops(); len(got) != 1 || !strings.Contains(got[0], "@b") {
		t.Fatalf("stops %v, want the failed target's alone", got)
	}

	h.clk.Advance(30 * time.Second)
	next := h.pass()
	if n := len(h.migrations()); n != 1 {
		t.Fatalf("%d migrations 30 s after an aborted repair, want no retry yet", n)
	}
	if want := t0.Add(2 * time.Minute); !next.Equal(want) {
		t.Errorf("next pass due %v, want %v (the interval's end)", next, want)
	}
	h.clk.Advance(next.Sub(h.clk.Now()))
	h.pass()
	if n := len(h.migrations()); n != 2 {
		t.Fatalf("%d migrations after the interval, want the retry", n)
	}
}

// The saga refuses a repair's target that no longer improves on the
// source's node (the room went to a peer meanwhile): it aborts rather
// than move the backup for nothing.
func TestRepairTargetMustStillImprove(t *testing.T) {
	t.Parallel()
	h := newRepairHarness(t, Policy{})
	// The primary moved to b meanwhile: b is no better for the backup.
	h.api.instance("news.channel.0", "primary", "b", phRunning)
	res := make(chan migrateResult, 1)
	if err := h.am.saga.do(h.ctx, func(ctx context.Context) {
		h.am.saga.begin(ctx, "news.channel.1", MigrateOptions{TargetNodeID: "b", Strategy: stratOverlap, Repair: true, Reason: "test"}, res)
	}); err != nil {
		t.Fatal(err)
	}
	r := <-res
	if r.err == nil || !strings.Contains(r.st.GetAbortReason(), "would not improve") {
		t.Fatalf("migration %v, %v: want it aborted, the target no better", r.st, r.err)
	}
	for _, c := range h.api.callLog() {
		if strings.HasPrefix(c, "StartJob") {
			t.Errorf("a target was started: %s", c)
		}
	}
}
