package automanager

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/internal/clock"
	"github.com/norsk-go/norsk-manager/pkg/apierr"
	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

const (
	phRunning = managerv1.InstancePhase_INSTANCE_PHASE_RUNNING
	prepared  = managerv1.InstancePhase_INSTANCE_PHASE_PREPARED
	stopped   = managerv1.InstancePhase_INSTANCE_PHASE_STOPPED
)

// sagaHarness runs a Saga against a fakeAPI with a fake clock: one job
// "ch.channel.0" of a bundle, running as primary on node "a", and nodes
// "b" and "c" (c with a job socket).
type sagaHarness struct {
	t   *testing.T
	api *fakeAPI
	clk *clock.Fake
	s   *Saga
	ctx context.Context
}

func newSagaHarness(t *testing.T, p Policy) *sagaHarness {
	t.Helper()
	api := newFakeAPI()
	job := &managerv1.Job{JobId: "ch.channel.0", Tags: map[string]string{"bundleId": "ch", "replicaIndex": "0", "jobName": "channel"},
		AutoPlacement: &managerv1.AutoPlacement{Requirements: &managerv1.JobRequirements{RequiredCapacity: 0.5}}}
	api.jobs[job.JobId] = &managerv1.JobWithHistory{Job: job}
	api.instance(job.JobId, "primary", "a", phRunning)
	sock := []*managerv1.Capability{{Name: JobSocketCapability, Count: 1}}
	api.nodes = []*managerv1.Node{
		{NodeId: "a", State: nodeOnline, Hardware: &managerv1.Hardware{Vcpus: 4}, Capabilities: sock},
		{NodeId: "b", State: nodeOnline, Hardware: &managerv1.Hardware{Vcpus: 4}},
		{NodeId: "c", State: nodeOnline, Hardware: &managerv1.Hardware{Vcpus: 2}, Capabilities: sock},
	}
	clk := clock.NewFake(t0)
	s := newSaga(api, clk, slog.New(slog.DiscardHandler), p, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); s.run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return &sagaHarness{t: t, api: api, clk: clk, s: s, ctx: ctx}
}

// migrate starts a migration and returns its answer channel.
func (h *sagaHarness) migrate(opts MigrateOptions) <-chan migrateResult {
	out := make(chan migrateResult, 1)
	// Queued before the call returns, so what the test queues next runs
	// after the migration's start (MigrateJob does the same, then waits).
	if err := h.s.do(h.ctx, func(ctx context.Context) { h.s.begin(ctx, "ch.channel.0", opts, out) }); err != nil {
		h.t.Fatal(err)
	}
	return out
}

func (h *sagaHarness) sync() {
	h.t.Helper()
	if err := h.s.sync(h.ctx); err != nil {
		h.t.Fatal(err)
	}
}

// only is the one migration the saga knows.
func (h *sagaHarness) only() *managerv1.MigrationState {
	h.t.Helper()
	h.sync()
	all, _ := h.api.ListMigrations(h.ctx, "")
	if len(all) != 1 {
		h.t.Fatalf("%d migrations recorded, want 1", len(all))
	}
	return all[0]
}

func (h *sagaHarness) phase() managerv1.MigrationPhase { return h.only().GetPhase() }

func (h *sagaHarness) wantPhase(want managerv1.MigrationPhase) *managerv1.MigrationState {
	h.t.Helper()
	st := h.only()
	if st.GetPhase() != want {
		h.t.Fatalf("phase = %s (abort reason %q), want %s; calls %v", PhaseName(st.GetPhase()), st.GetAbortReason(), PhaseName(want), h.api.callLog())
	}
	return st
}

func (h *sagaHarness) event(ev *managerv1.Event) {
	h.t.Helper()
	if err := h.s.do(h.ctx, func(ctx context.Context) { h.s.onEvent(ctx, ev) }); err != nil {
		h.t.Fatal(err)
	}
	h.sync()
}

// history feeds a job-history entry of instance role (kind: prepared,
// running, stopped, or stopping with reason).
func (h *sagaHarness) history(kind, role, node string, reason managerv1.StoppingReason, migrationID string) {
	ref := &managerv1.InstanceRef{Role: role, NodeId: node}
	var e *managerv1.JobHistoryEntry
	switch kind {
	case "prepared":
		e = &managerv1.JobHistoryEntry{Event: &managerv1.JobHistoryEntry_Prepared{Prepared: &managerv1.InstancePrepared{Instance: ref}}}
	case "running":
		e = &managerv1.JobHistoryEntry{Event: &managerv1.JobHistoryEntry_Running{Running: &managerv1.InstanceRunning{Instance: ref}}}
	case "stopped":
		e = &managerv1.JobHistoryEntry{Event: &managerv1.JobHistoryEntry_Stopped{Stopped: &managerv1.InstanceStopped{Instance: ref}}}
	case "stopping":
		e = &managerv1.JobHistoryEntry{Event: &managerv1.JobHistoryEntry_Stopping{Stopping: &managerv1.InstanceStopping{Instance: ref, Reason: reason, AdditionalReason: "exit 1", MigrationId: migrationID}}}
	}
	h.event(&managerv1.Event{Kind: &managerv1.Event_JobUpdated{JobUpdated: &managerv1.JobEvent{
		Job: &managerv1.JobWithHistory{Job: &managerv1.Job{JobId: "ch.channel.0"}}, Entry: e,
	}}})
}

func mev(role, id string, payload string) *managerv1.MigrationEvent {
	return &managerv1.MigrationEvent{JobKey: &managerv1.JobKey{JobId: "ch.channel.0", Role: role}, MigrationId: id, Payload: []byte(payload)}
}

func (h *sagaHarness) advance(d time.Duration) {
	h.clk.Advance(d)
	h.sync()
}

// calledExactly: the call log holds exactly this call. A source instance
// ("…/primary@a") needs it: a target's role is "primary@" and eight hex
// digits, which begins with "a" one time in sixteen.
func (h *sagaHarness) calledExactly(call string) bool {
	return slices.Contains(h.api.callLog(), call)
}

func (h *sagaHarness) called(prefix string) bool {
	return slices.ContainsFunc(h.api.callLog(), func(c string) bool { return strings.HasPrefix(c, prefix) })
}

// phasesOf lists a record's phase history by name.
func phasesOf(st *managerv1.MigrationState) string {
	var out []string
	for _, e := range st.GetPhaseHistory() {
		out = append(out, PhaseName(e.GetPhase()))
	}
	return strings.Join(out, " ")
}

func result(t *testing.T, ch <-chan migrateResult) migrateResult {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("MigrateJob did not answer")
	}
	return migrateResult{}
}

// The three strategies, each from start to done.
func TestSagaHappyPaths(t *testing.T) {
	t.Parallel()
	t.Run("stopThenStart", func(t *testing.T) {
		h := newSagaHarness(t, Policy{})
		r := result(t, h.migrate(MigrateOptions{TargetNodeID: "b"}))
		if r.err != nil || r.st.GetPhase() != phLaunching || r.st.GetTargetNodeId() != "b" {
			t.Fatalf("migrate = %v, %v; want launching on b", r.st, r.err)
		}
		tr := r.st.GetTargetRole()
		if !strings.HasPrefix(tr, "primary@") || len(tr) != len("primary@")+8 {
			t.Fatalf("target role %q, want primary@<8 hex>", tr)
		}
		h.history("prepared", tr, "b", 0, "")
		st := h.wantPhase(phStoppingSource)
		if !st.GetPastPointOfNoReturn() || !h.calledExactly("StopJob ch.channel.0/primary@a") {
			t.Fatalf("source not stopped at the point of no return: %v %v", st, h.api.callLog())
		}
		h.history("stopped", "primary", "a", 0, "")
		h.wantPhase(phStartingTarget)
		if !h.called("StartPreparedJob ch.channel.0/" + tr + "@b") {
			t.Fatalf("prepared target not started: %v", h.api.callLog())
		}
		h.history("running", tr, "b", 0, "")
		st = h.wantPhase(phDone)
		if got := phasesOf(st); got != "placing launching stoppingSource startingTarget done" {
			t.Errorf("phases = %s", got)
		}
	})
	t.Run("overlap", func(t *testing.T) {
		h := newSagaHarness(t, Policy{})
		r := result(t, h.migrate(MigrateOptions{Strategy: stratOverlap}))
		if r.err != nil {
			t.Fatal(r.err)
		}
		if r.st.GetTargetNodeId() == "a" {
			t.Fatal("target placed on the source's node")
		}
		h.history("running", r.st.GetTargetRole(), r.st.GetTargetNodeId(), 0, "")
		h.wantPhase(phStoppingSource)
		h.history("stopped", "primary", "a", 0, "")
		st := h.wantPhase(phDone)
		if got := phasesOf(st); got != "placing launching stoppingSource done" {
			t.Errorf("phases = %s", got)
		}
	})
	t.Run("handover", func(t *testing.T) {
		h := newSagaHarness(t, Policy{})
		ch := h.migrate(MigrateOptions{Strategy: stratHandover})
		h.sync()
		st := h.wantPhase(phProposing)
		id := st.GetMigrationId()
		if !h.called("GetState primary") {
			t.Fatalf("source not asked for its state: %v", h.api.callLog())
		}
		h.event(&managerv1.Event{Kind: &managerv1.Event_MigrationState{MigrationState: mev("primary", id, `{"nextSeq":10}`)}})
		r := result(t, ch)
		if r.err != nil || r.st.GetTargetNodeId() != "c" || string(r.st.GetInitialState()) != `{"nextSeq":10}` {
			t.Fatalf("migrate = %v, %v; want the target on c (the only other node with a job socket) carrying the state", r.st, r.err)
		}
		tr := r.st.GetTargetRole()
		h.history("running", tr, "c", 0, "")
		h.wantPhase(phSettingState)
		h.event(&managerv1.Event{Kind: &managerv1.Event_MigrationInitialStateDelivered{MigrationInitialStateDelivered: mev(tr, id, "")}})
		h.wantPhase(phAwaitingReady)
		h.event(&managerv1.Event{Kind: &managerv1.Event_MigrationTargetReady{MigrationTargetReady: mev(tr, id, "ready")}})
		h.wantPhase(phAwaitingSourceStop)
		if !h.called("CutoverReady primary ready") {
			t.Fatalf("source not told the target is ready: %v", h.api.callLog())
		}
		h.event(&managerv1.Event{Kind: &managerv1.Event_MigrationSourceStoppedOutput{MigrationSourceStoppedOutput: mev("primary", id, "at-42")}})
		h.wantPhase(phApplying)
		if !h.called("CutoverApply " + tr + " at-42") {
			t.Fatalf("target not told where to start: %v", h.api.callLog())
		}
		h.event(&managerv1.Event{Kind: &managerv1.Event_MigrationTargetApplied{MigrationTargetApplied: mev(tr, id,
			`{"applied":["frames"],"failed":[{"id":"captions","reason":"no decoder"}],"skewMs":3}`)}})
		st = h.wantPhase(phStoppingSource)
		if sum := st.GetApplySummary(); len(sum.GetApplied()) != 1 || sum.GetFailed()[0].GetId() != "captions" || sum.GetSkewMs() != 3 {
			t.Errorf("apply summary = %v", sum)
		}
		h.history("stopped", "primary", "a", 0, "")
		st = h.wantPhase(phDone)
		if got := phasesOf(st); got != "proposing placing launching settingStateOnTarget awaitingTargetReady awaitingSourceStop applying stoppingSource done" {
			t.Errorf("phases = %s", got)
		}
	})
}

// Refusals that record nothing: the job must be a running, placed job not
// already migrating, and the target not its node.
func TestSagaRefusals(t *testing.T) {
	t.Parallel()
	h := newSagaHarness(t, Policy{})
	for name, tc := range map[string]struct {
		edit func()
		opts MigrateOptions
		code apierr.Code
		want string
	}{
		"target is the source": {opts: MigrateOptions{TargetNodeID: "a"}, code: apierr.FailedPrecondition, want: "already runs"},
		"not placed": {edit: func() { h.api.jobs["ch.channel.0"].Job.Tags = nil; h.api.jobs["ch.channel.0"].Job.AutoPlacement = nil },
			code: apierr.FailedPrecondition, want: "not an AutoManager-placed job"},
		"not running": {edit: func() { h.api.instance("ch.channel.0", "primary", "a", prepared) }, code: apierr.FailedPrecondition, want: "only a running instance migrates"},
		"no instance": {edit: func() { h.api.jobs["ch.channel.0"].Instances = nil }, code: apierr.FailedPrecondition, want: "not bound to a node"},
	} {
		t.Run(name, func(t *testing.T) {
			saved := proto_clone(h.api.jobs["ch.channel.0"])
			defer func() { h.api.jobs["ch.channel.0"] = saved }()
			if tc.edit != nil {
				tc.edit()
			}
			r := result(t, h.migrate(tc.opts))
			if !apierr.Is(r.err, tc.code) || !strings.Contains(r.err.Error(), tc.want) {
				t.Fatalf("err = %v, want %s saying %q", r.err, tc.code, tc.want)
			}
			if all, _ := h.api.ListMigrations(h.ctx, ""); len(all) != 0 {
				t.Fatalf("a refused migration was recorded: %v", all)
			}
		})
	}
	t.Run("unknown job", func(t *testing.T) {
		_, err := h.s.MigrateJob(h.ctx, "nope", MigrateOptions{})
		if !apierr.Is(err, apierr.NotFound) {
			t.Fatalf("err = %v, want NOT_FOUND", err)
		}
	})
	t.Run("already migrating", func(t *testing.T) {
		r := result(t, h.migrate(MigrateOptions{}))
		if r.err != nil {
			t.Fatal(r.err)
		}
		r2 := result(t, h.migrate(MigrateOptions{}))
		if !apierr.Is(r2.err, apierr.FailedPrecondition) || !strings.Contains(r2.err.Error(), "already in flight") {
			t.Fatalf("second migrate: %v, want FAILED_PRECONDITION already in flight", r2.err)
		}
	})
}

// A migration that cannot place its target aborts; a handover source that
// answered the propose is unlocked by the abort, a stopThenStart source
// (never asked anything) is not disturbed.
func TestSagaPlacementFailure(t *testing.T) {
	t.Parallel()
	t.Run("stopThenStart pinned to a node that cannot take it", func(t *testing.T) {
		h := newSagaHarness(t, Policy{})
		h.api.nodes[1].Hardware.Vcpus = 0
		r := result(t, h.migrate(MigrateOptions{TargetNodeID: "b"}))
		if !apierr.Is(r.err, apierr.Aborted) || !strings.Contains(r.err.Error(), "the named target b was rejected: capacity") {
			t.Fatalf("err = %v, want ABORTED naming b's capacity refusal", r.err)
		}
		h.wantPhase(phAborted)
		if h.called("AbortMigration") || h.called("StopJob") || h.called("StartJob") {
			t.Errorf("a silent placing phase touched the wire: %v", h.api.callLog())
		}
	})
	t.Run("unknown pinned node", func(t *testing.T) {
		h := newSagaHarness(t, Policy{})
		r := result(t, h.migrate(MigrateOptions{TargetNodeID: "zz"}))
		if !apierr.Is(r.err, apierr.Aborted) || !strings.Contains(r.err.Error(), "zz was rejected: no such node") {
			t.Fatalf("err = %v", r.err)
		}
	})
	t.Run("handover with no other job socket", func(t *testing.T) {
		h := newSagaHarness(t, Policy{})
		h.api.nodes[2].Capabilities = nil
		ch := h.migrate(MigrateOptions{Strategy: stratHandover})
		h.sync()
		id := h.only().GetMigrationId()
		h.event(&managerv1.Event{Kind: &managerv1.Event_MigrationState{MigrationState: mev("primary", id, "s")}})
		r := result(t, ch)
		if !apierr.Is(r.err, apierr.Aborted) || !strings.Contains(r.err.Error(), "no other node advertises jobSocket") {
			t.Fatalf("err = %v", r.err)
		}
		if !h.called("AbortMigration primary") {
			t.Errorf("the locked source was not unlocked: %v", h.api.callLog())
		}
	})
}

// The source refuses the handover: the migration ends with nothing
// placed, and the source is still told to unlock.
func TestSagaProposeRefused(t *testing.T) {
	t.Parallel()
	h := newSagaHarness(t, Policy{})
	ch := h.migrate(MigrateOptions{Strategy: stratHandover})
	h.sync()
	id := h.only().GetMigrationId()
	ev := mev("primary", id, "")
	ev.Refused = "no state to hand over"
	h.event(&managerv1.Event{Kind: &managerv1.Event_MigrationState{MigrationState: ev}})
	r := result(t, ch)
	if !apierr.Is(r.err, apierr.Aborted) || !strings.Contains(r.err.Error(), "source refused the handover: no state to hand over") {
		t.Fatalf("err = %v", r.err)
	}
	if h.called("StartJob") || !h.called("AbortMigration") {
		t.Errorf("calls = %v: want no target and an abort", h.api.callLog())
	}
}

// A refused target start aborts.
func TestSagaDispatchFailure(t *testing.T) {
	t.Parallel()
	h := newSagaHarness(t, Policy{})
	h.api.setFail("StartJob", errors.New("node b is lost"))
	r := result(t, h.migrate(MigrateOptions{TargetNodeID: "b"}))
	if !apierr.Is(r.err, apierr.Aborted) || !strings.Contains(r.err.Error(), "target startJob dispatch failed") {
		t.Fatalf("err = %v", r.err)
	}
	if h.called("AbortMigration") || !h.called("StopJob ch.channel.0/primary@") {
		t.Errorf("calls = %v: want the target's key stopped, and no wire abort (nothing reached a worker)", h.api.callLog())
	}
}

// Each phase's deadline, with the injected clock.
func TestSagaDeadlines(t *testing.T) {
	t.Parallel()
	d := MigrationDeadlines{}
	d.defaults()
	for _, tc := range []struct {
		name     string
		strategy managerv1.MigrationStrategy
		to       func(h *sagaHarness, id, tr string)
		wait     time.Duration
		want     managerv1.MigrationPhase
		reason   string
	}{
		{"proposing", stratHandover, func(h *sagaHarness, id, tr string) {}, d.Propose, phAborted, "phase timeout: proposing"},
		{"launching", stratOverlap, func(h *sagaHarness, id, tr string) {}, d.Launching, phAborted, "phase timeout: launching"},
		{"settingStateOnTarget", stratHandover, func(h *sagaHarness, id, tr string) { h.history("running", tr, "c", 0, "") }, d.TargetReady, phAborted, "phase timeout: settingStateOnTarget"},
		{"awaitingSourceStop", stratHandover, func(h *sagaHarness, id, tr string) {
			h.event(&managerv1.Event{Kind: &managerv1.Event_MigrationTargetReady{MigrationTargetReady: mev(tr, id, "")}})
		}, d.SourceStop, phAborted, "phase timeout: awaitingSourceStop"},
		{"applying", stratHandover, func(h *sagaHarness, id, tr string) {
			h.event(&managerv1.Event{Kind: &managerv1.Event_MigrationTargetReady{MigrationTargetReady: mev(tr, id, "")}})
			h.event(&managerv1.Event{Kind: &managerv1.Event_MigrationSourceStoppedOutput{MigrationSourceStoppedOutput: mev("primary", id, "")}})
		}, d.Applying, phAborted, "phase timeout: applying"},
		{"stoppingSource proceeds as stopped", stratOverlap, func(h *sagaHarness, id, tr string) {
			h.history("running", tr, h.only().GetTargetNodeId(), 0, "")
		}, d.StoppingSource, phDone, ""},
		{"startingTarget fails forward", stratStopThenStart, func(h *sagaHarness, id, tr string) {
			h.history("prepared", tr, h.only().GetTargetNodeId(), 0, "")
			h.history("stopped", "primary", "a", 0, "")
		}, d.StartingTarget, phAborted, "phase timeout: startingTarget"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newSagaHarness(t, Policy{})
			ch := h.migrate(MigrateOptions{Strategy: tc.strategy})
			h.sync()
			id := h.only().GetMigrationId()
			if tc.strategy == stratHandover && tc.name != "proposing" {
				h.event(&managerv1.Event{Kind: &managerv1.Event_MigrationState{MigrationState: mev("primary", id, "")}})
			}
			tr := h.only().GetTargetRole()
			tc.to(h, id, tr)
			before := h.phase()
			h.advance(tc.wait - time.Millisecond)
			if h.phase() != before {
				t.Fatalf("phase moved to %s before its deadline", PhaseName(h.phase()))
			}
			h.advance(time.Millisecond)
			st := h.wantPhase(tc.want)
			if tc.reason != "" && st.GetAbortReason() != tc.reason {
				t.Errorf("abort reason %q, want %q", st.GetAbortReason(), tc.reason)
			}
			if tc.name == "proposing" {
				if r := result(t, ch); !apierr.Is(r.err, apierr.Aborted) {
					t.Errorf("the parked MigrateJob got %v, want ABORTED", r.err)
				}
			}
		})
	}
}

// An abort before the point of no return rolls back; after it, it is
// refused and the migration fails forward only on its own.
func TestSagaCancel(t *testing.T) {
	t.Parallel()
	h := newSagaHarness(t, Policy{})
	r := result(t, h.migrate(MigrateOptions{Strategy: stratOverlap, TargetNodeID: "b"}))
	if r.err != nil {
		t.Fatal(r.err)
	}
	id := r.st.GetMigrationId()
	if err := h.s.CancelMigration(h.ctx, id, "operator"); err != nil {
		t.Fatal(err)
	}
	st := h.wantPhase(phAborted)
	if st.GetAbortReason() != "operator" || !h.called("AbortMigration primary,"+r.st.GetTargetRole()) || !h.called("StopJob ch.channel.0/"+r.st.GetTargetRole()+"@b") {
		t.Fatalf("abort: %v, calls %v", st, h.api.callLog())
	}
	if h.calledExactly("StopJob ch.channel.0/primary@a") {
		t.Errorf("the source was touched by a clean abort: calls %v", h.api.callLog())
	}
	if err := h.s.CancelMigration(h.ctx, id, "again"); err != nil {
		t.Errorf("abort of an aborted migration: %v, want nothing", err)
	}
	if err := h.s.CancelMigration(h.ctx, "nope", ""); !apierr.Is(err, apierr.NotFound) {
		t.Errorf("abort of an unknown migration: %v, want NOT_FOUND", err)
	}

	h2 := newSagaHarness(t, Policy{})
	r = result(t, h2.migrate(MigrateOptions{Strategy: stratOverlap}))
	h2.history("running", r.st.GetTargetRole(), r.st.GetTargetNodeId(), 0, "")
	h2.wantPhase(phStoppingSource)
	err := h2.s.CancelMigration(h2.ctx, r.st.GetMigrationId(), "too late")
	if !apierr.Is(err, apierr.FailedPrecondition) || !strings.Contains(err.Error(), "point of no return") {
		t.Fatalf("abort past the point of no return: %v", err)
	}
	h2.wantPhase(phStoppingSource)
}

// The target lost: before the point of no return a clean abort, after it
// a fail-forward (the target stopped, the job left to recovery).
func TestSagaTargetLost(t *testing.T) {
	t.Parallel()
	h := newSagaHarness(t, Policy{})
	r := result(t, h.migrate(MigrateOptions{Strategy: stratOverlap, TargetNodeID: "b"}))
	h.history("stopping", r.st.GetTargetRole(), "b", managerv1.StoppingReason_STOPPING_REASON_JOB_FAILED, "")
	st := h.wantPhase(phAborted)
	if !strings.HasPrefix(st.GetAbortReason(), "target failed") || st.GetPastPointOfNoReturn() {
		t.Fatalf("before: %v", st)
	}

	h2 := newSagaHarness(t, Policy{})
	r = result(t, h2.migrate(MigrateOptions{TargetNodeID: "b"}))
	tr := r.st.GetTargetRole()
	h2.history("prepared", tr, "b", 0, "")
	h2.history("stopped", "primary", "a", 0, "")
	h2.wantPhase(phStartingTarget)
	h2.history("stopping", tr, "b", managerv1.StoppingReason_STOPPING_REASON_NODE_STOPPED, "")
	st = h2.wantPhase(phAborted)
	if !st.GetPastPointOfNoReturn() || !strings.Contains(st.GetAbortReason(), "target stopped") || !h2.called("StopJob ch.channel.0/"+tr+"@b") {
		t.Fatalf("after: %v; calls %v", st, h2.api.callLog())
	}
}

// The source lost: with the target running the migration completes into
// it; without, it aborts (and recovery re-places the job).
func TestSagaSourceLost(t *testing.T) {
	t.Parallel()
	h := newSagaHarness(t, Policy{})
	ch := h.migrate(MigrateOptions{Strategy: stratHandover})
	h.sync()
	id := h.only().GetMigrationId()
	h.event(&managerv1.Event{Kind: &managerv1.Event_MigrationState{MigrationState: mev("primary", id, "")}})
	r := result(t, ch)
	h.history("running", r.st.GetTargetRole(), "c", 0, "")
	h.history("stopping", "primary", "a", managerv1.StoppingReason_STOPPING_REASON_NODE_STOPPED, "")
	h.wantPhase(phDone)

	h2 := newSagaHarness(t, Policy{})
	r = result(t, h2.migrate(MigrateOptions{Strategy: stratOverlap}))
	h2.history("stopping", "primary", "a", managerv1.StoppingReason_STOPPING_REASON_NODE_STOPPED, "")
	st := h2.wantPhase(phAborted)
	if !strings.Contains(st.GetAbortReason(), "source stopped") || !h2.called("StopJob ch.channel.0/"+r.st.GetTargetRole()) {
		t.Fatalf("%v; calls %v", st, h2.api.callLog())
	}
}

// Handshake events of another migration, and of a job with none, are
// dropped; so are events in a phase they do not belong to.
func TestSagaStaleEvents(t *testing.T) {
	t.Parallel()
	h := newSagaHarness(t, Policy{})
	ch := h.migrate(MigrateOptions{Strategy: stratHandover})
	h.sync()
	id := h.only().GetMigrationId()
	h.event(&managerv1.Event{Kind: &managerv1.Event_MigrationState{MigrationState: mev("primary", "an-older-migration", "")}})
	h.wantPhase(phProposing)
	h.event(&managerv1.Event{Kind: &managerv1.Event_MigrationTargetReady{MigrationTargetReady: mev("x", id, "")}})
	h.wantPhase(phProposing)
	other := mev("primary", id, "")
	other.JobKey.JobId = "another-job"
	h.event(&managerv1.Event{Kind: &managerv1.Event_MigrationState{MigrationState: other}})
	h.wantPhase(phProposing)
	h.event(&managerv1.Event{Kind: &managerv1.Event_MigrationState{MigrationState: mev("primary", id, "")}})
	result(t, ch)
	h.wantPhase(phLaunching)
}

// A worker-reported abort: before the point of no return it rolls back;
// past it, the target's fails forward and the source's is ignored.
func TestSagaWorkerAbort(t *testing.T) {
	t.Parallel()
	h := newSagaHarness(t, Policy{})
	r := result(t, h.migrate(MigrateOptions{Strategy: stratOverlap}))
	h.event(&managerv1.Event{Kind: &managerv1.Event_MigrationAborted{MigrationAborted: &managerv1.MigrationEvent{
		JobKey: &managerv1.JobKey{JobId: "ch.channel.0", Role: "primary"}, MigrationId: r.st.GetMigrationId(), Reason: "source cannot stop"}}})
	if st := h.wantPhase(phAborted); st.GetAbortReason() != "source cannot stop" {
		t.Fatalf("reason %q", st.GetAbortReason())
	}
}

// A new AutoManager takes over a migration in flight from the store: its
// deadline keeps the clock of the phase it is in, and it carries on.
func TestSagaRebuild(t *testing.T) {
	t.Parallel()
	h := newSagaHarness(t, Policy{})
	r := result(t, h.migrate(MigrateOptions{Strategy: stratOverlap, TargetNodeID: "b"}))
	h.advance(time.Minute) // of launching's 2 minutes

	// A second saga on the same store (the old one's primary term ended).
	s2 := newSaga(h.api, h.clk, slog.New(slog.DiscardHandler), Policy{}, nil)
	resume, err := s2.rebuild(h.ctx)
	if err != nil || resume == 0 {
		t.Fatalf("rebuild: %d, %v", resume, err)
	}
	m := s2.migs[r.st.GetMigrationId()]
	if m == nil || m.deadline != r.st.GetPhaseHistory()[1].GetAt().AsTime().Add(DefaultLaunchingDeadline) {
		t.Fatalf("rebuilt %v, deadline not kept", m)
	}
	ctx, cancel := context.WithCancel(h.ctx)
	defer cancel()
	go s2.run(ctx)
	// The target came up while nobody watched: reconcile sees it running.
	h.api.instance("ch.channel.0", r.st.GetTargetRole(), "b", phRunning)
	if err := s2.do(ctx, s2.reconcile); err != nil {
		t.Fatal(err)
	}
	if err := s2.sync(ctx); err != nil {
		t.Fatal(err)
	}
	if st := h.api.stored(r.st.GetMigrationId()); st.GetPhase() != phStoppingSource {
		t.Fatalf("after takeover: %s", PhaseName(st.GetPhase()))
	}
}

// A migration taken over mid-cutover is told again where it stood: the
// previous AutoManager's notify, or the worker's answer to it, may have
// been lost with the previous primary (TestMigrationSurvivesManagerRestart
// aborted on the applying deadline). A notify that fails while the
// AutoManager stops aborts nothing: the next one takes the migration over.
func TestSagaTakeoverMidCutoverTellsAgain(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		phase managerv1.MigrationPhase
		want  string
	}{
		{"awaitingSourceStop", phAwaitingSourceStop, "CutoverReady primary ready"},
		{"applying", phApplying, "CutoverApply %s at-42"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newSagaHarness(t, Policy{})
			ch := h.migrate(MigrateOptions{Strategy: stratHandover})
			h.sync()
			id := h.wantPhase(phProposing).GetMigrationId()
			h.event(&managerv1.Event{Kind: &managerv1.Event_MigrationState{MigrationState: mev("primary", id, `{}`)}})
			r := result(t, ch)
			tr := r.st.GetTargetRole()
			h.history("running", tr, "c", 0, "")
			h.event(&managerv1.Event{Kind: &managerv1.Event_MigrationTargetReady{MigrationTargetReady: mev(tr, id, "ready")}})
			h.wantPhase(phAwaitingSourceStop)
			if tc.phase == phApplying {
				h.event(&managerv1.Event{Kind: &managerv1.Event_MigrationSourceStoppedOutput{MigrationSourceStoppedOutput: mev("primary", id, "at-42")}})
				h.wantPhase(phApplying)
			}
			want := tc.want
			if strings.Contains(want, "%s") {
				want = fmt.Sprintf(want, tr)
			}
			calls := func() (n int) {
				for _, c := range h.api.callLog() {
					if strings.HasPrefix(c, want) {
						n++
					}
				}
				return n
			}
			if calls() != 1 {
				t.Fatalf("before the takeover: %d × %q in %v", calls(), want, h.api.callLog())
			}

			s2 := newSaga(h.api, h.clk, slog.New(slog.DiscardHandler), Policy{}, nil)
			if _, err := s2.rebuild(h.ctx); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(h.ctx)
			defer cancel()
			go s2.run(ctx)
			h.api.instance("ch.channel.0", "primary", "a", phRunning)
			h.api.instance("ch.channel.0", tr, "c", phRunning)
			if err := s2.do(ctx, s2.reconcile); err != nil {
				t.Fatal(err)
			}
			if err := s2.sync(ctx); err != nil {
				t.Fatal(err)
			}
			if calls() != 2 {
				t.Fatalf("after the takeover: %d × %q in %v", calls(), want, h.api.callLog())
			}
			if st := h.api.stored(id); st.GetPhase() != tc.phase {
				t.Fatalf("after the takeover: %s", PhaseName(st.GetPhase()))
			}
		})
	}
}

// A cutover notify that fails because the AutoManager itself is stopping
// (its Manager closing) aborts nothing.
func TestSagaCutoverCallFailingWhileStoppingAbortsNothing(t *testing.T) {
	t.Parallel()
	h := newSagaHarness(t, Policy{})
	ch := h.migrate(MigrateOptions{Strategy: stratHandover})
	h.sync()
	id := h.wantPhase(phProposing).GetMigrationId()
	h.event(&managerv1.Event{Kind: &managerv1.Event_MigrationState{MigrationState: mev("primary", id, `{}`)}})
	result(t, ch)
	stopped, cancel := context.WithCancel(h.ctx)
	cancel()
	if err := h.s.do(h.ctx, func(context.Context) {
		h.s.cutoverCallFailed(stopped, h.s.migs[id], "notifyMigrationCutoverApply", errors.New("connection refused"))
	}); err != nil {
		t.Fatal(err)
	}
	h.sync()
	if st := h.api.stored(id); terminal(st.GetPhase()) {
		t.Fatalf("aborted while stopping: %s %s", PhaseName(st.GetPhase()), st.GetAbortReason())
	}
	if h.called("AbortMigration") {
		t.Fatalf("the workers were told to abort: %v", h.api.callLog())
	}
}

// A cutover message whose worker is unreachable for a moment (its stream
// down, as after a Manager restart) is told again, not given up on.
func TestSagaCutoverToAnUnreachableWorkerIsToldAgain(t *testing.T) {
	t.Parallel()
	h := newSagaHarness(t, Policy{})
	ch := h.migrate(MigrateOptions{Strategy: stratHandover})
	h.sync()
	id := h.wantPhase(phProposing).GetMigrationId()
	h.event(&managerv1.Event{Kind: &managerv1.Event_MigrationState{MigrationState: mev("primary", id, `{}`)}})
	tr := result(t, ch).st.GetTargetRole()
	h.history("running", tr, "c", 0, "")
	h.event(&managerv1.Event{Kind: &managerv1.Event_MigrationTargetReady{MigrationTargetReady: mev(tr, id, "ready")}})
	h.api.setFail("CutoverApply", fmt.Errorf("node c: %w", norsk.ErrUnavailable))
	h.event(&managerv1.Event{Kind: &managerv1.Event_MigrationSourceStoppedOutput{MigrationSourceStoppedOutput: mev("primary", id, "at-42")}})
	h.wantPhase(phApplying)
	h.api.setFail("CutoverApply", nil)
	h.advance(cutoverResendInterval)
	h.sync()
	n := 0
	for _, c := range h.api.callLog() {
		if strings.HasPrefix(c, "CutoverApply "+tr+" at-42") {
			n++
		}
	}
	if n != 2 || h.phase() != phApplying {
		t.Fatalf("apply told %d times, phase %s: %v", n, PhaseName(h.phase()), h.api.callLog())
	}
}

// The source's node is lost after the source was told to stop: its worker
// will report no stopped, so the migration proceeds at once (done into the
// running target) instead of waiting for the phase's deadline; a lost node
// that is not the source's changes nothing.
func TestSagaSourceNodeLostWhileStopping(t *testing.T) {
	t.Parallel()
	h := newSagaHarness(t, Policy{})
	r := result(t, h.migrate(MigrateOptions{Strategy: stratOverlap}))
	if r.err != nil {
		t.Fatal(r.err)
	}
	h.history("running", r.st.GetTargetRole(), r.st.GetTargetNodeId(), 0, "")
	h.wantPhase(phStoppingSource)
	lost := func(node string) *managerv1.Event {
		return &managerv1.Event{Kind: &managerv1.Event_NodeLost{NodeLost: &managerv1.NodeEvent{Node: &managerv1.Node{NodeId: node}}}}
	}
	h.event(lost("b-not-the-source"))
	h.wantPhase(phStoppingSource)
	h.event(lost("a"))
	h.wantPhase(phDone)
}
