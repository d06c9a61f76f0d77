package automanager

import (
	"context"
	"testing"
	"time"

	"pgregory.net/rapid"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
)

// allowed are the phase machine's transitions (seed 004), by strategy.
var allowed = map[managerv1.MigrationPhase][]managerv1.MigrationPhase{
	phProposing:          {phPlacing, phAborted},
	phPlacing:            {phLaunching, phAborted},
	phLaunching:          {phSettingState, phStoppingSource, phAborted},
	phSettingState:       {phAwaitingReady, phAborted, phDone},
	phAwaitingReady:      {phAwaitingSourceStop, phAborted, phDone},
	phAwaitingSourceStop: {phApplying, phAborted, phDone},
	phApplying:           {phStoppingSource, phAborted, phDone},
	phStoppingSource:     {phDone, phStartingTarget, phAborted},
	phStartingTarget:     {phDone, phAborted},
}

// handoverOnly are the phases only a handover passes through.
var handoverOnly = map[managerv1.MigrationPhase]bool{
	phProposing: true, phSettingState: true, phAwaitingReady: true, phAwaitingSourceStop: true, phApplying: true,
}

// Whatever the workers, the jobs, the operator and the clock do, and in
// whatever order, a migration's phases follow the machine: no phase is
// skipped, a strategy's phases only, the point of no return is never
// undone, and done or aborted is final.
func TestSagaPhaseMachine(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(rt *rapid.T) {
		h := newSagaHarness(t, Policy{})
		strategy := rapid.SampledFrom([]managerv1.MigrationStrategy{stratStopThenStart, stratOverlap, stratHandover}).Draw(rt, "strategy")
		ch := h.migrate(MigrateOptions{Strategy: strategy})
		h.sync()
		all, _ := h.api.ListMigrations(h.ctx, "")
		if len(all) != 1 {
			return // refused (nothing recorded): nothing to check
		}
		id := all[0].GetMigrationId()
		tr := all[0].GetTargetRole()
		roles := []string{"primary", tr, "primary@00000000"}
		ids := []string{id, "stale-id"}
		reasons := []managerv1.StoppingReason{
			managerv1.StoppingReason_STOPPING_REASON_JOB_FAILED, managerv1.StoppingReason_STOPPING_REASON_NODE_STOPPED,
			managerv1.StoppingReason_STOPPING_REASON_USER_REQUESTED,
		}
		steps := rapid.IntRange(1, 25).Draw(rt, "steps")
		for range steps {
			role := rapid.SampledFrom(roles).Draw(rt, "role")
			mid := rapid.SampledFrom(ids).Draw(rt, "id")
			node := h.api.stored(id).GetTargetNodeId()
			if role == "primary" {
				node = "a"
			}
			switch rapid.IntRange(0, 12).Draw(rt, "input") {
			case 0:
				h.history("prepared", role, node, 0, "")
			case 1:
				h.history("running", role, node, 0, "")
			case 2:
				h.history("stopped", role, node, 0, "")
			case 3:
				h.history("stopping", role, node, rapid.SampledFrom(reasons).Draw(rt, "reason"), rapid.SampledFrom(ids).Draw(rt, "stopId"))
			case 4:
				ev := mev(role, mid, "s")
				if rapid.Bool().Draw(rt, "refuse") {
					ev.Refused = "no"
				}
				h.event(&managerv1.Event{Kind: &managerv1.Event_MigrationState{MigrationState: ev}})
			case 5:
				h.event(&managerv1.Event{Kind: &managerv1.Event_MigrationInitialStateDelivered{MigrationInitialStateDelivered: mev(role, mid, "")}})
			case 6:
				h.event(&managerv1.Event{Kind: &managerv1.Event_MigrationTargetReady{MigrationTargetReady: mev(role, mid, "r")}})
			case 7:
				h.event(&managerv1.Event{Kind: &managerv1.Event_MigrationSourceStoppedOutput{MigrationSourceStoppedOutput: mev(role, mid, "p")}})
			case 8:
				h.event(&managerv1.Event{Kind: &managerv1.Event_MigrationTargetApplied{MigrationTargetApplied: mev(role, mid, `{"applied":[]}`)}})
			case 9:
				h.event(&managerv1.Event{Kind: &managerv1.Event_MigrationAborted{MigrationAborted: mev(role, mid, "")}})
			case 10:
				_ = h.s.CancelMigration(h.ctx, id, "operator")
			case 11:
				h.advance(time.Duration(rapid.IntRange(1, 130).Draw(rt, "seconds")) * time.Second)
			case 12:
				for _, name := range []string{"StopJob", "StartPreparedJob", "NotifyMigrationCutoverReady", "CutoverReady", "CutoverApply"} {
					h.api.setFail(name, nil)
				}
				if rapid.Bool().Draw(rt, "failCalls") {
					h.api.setFail(rapid.SampledFrom([]string{"StopJob", "StartPreparedJob", "CutoverReady", "CutoverApply"}).Draw(rt, "failing"), context.DeadlineExceeded)
				}
			}
		}
		st := h.api.stored(id)
		hist := st.GetPhaseHistory()
		for i := 1; i < len(hist); i++ {
			from, to := hist[i-1].GetPhase(), hist[i].GetPhase()
			ok := false
			for _, a := range allowed[from] {
				ok = ok || a == to
			}
			if !ok {
				rt.Fatalf("%s: %s → %s is not a transition (history %s)", StrategyName(strategy), PhaseName(from), PhaseName(to), phasesOf(st))
			}
			if terminal(from) {
				rt.Fatalf("a terminal phase moved on: %s", phasesOf(st))
			}
		}
		for _, e := range hist {
			p := e.GetPhase()
			if handoverOnly[p] && strategy != stratHandover {
				rt.Fatalf("%s passed through %s: %s", StrategyName(strategy), PhaseName(p), phasesOf(st))
			}
			if p == phStartingTarget && strategy != stratStopThenStart {
				rt.Fatalf("%s passed through startingTarget: %s", StrategyName(strategy), phasesOf(st))
			}
		}
		if st.GetPhase() != hist[len(hist)-1].GetPhase() {
			rt.Fatalf("phase %s is not the history's last (%s)", PhaseName(st.GetPhase()), phasesOf(st))
		}
		for i, e := range hist {
			if e.GetPhase() == phStoppingSource && !st.GetPastPointOfNoReturn() {
				rt.Fatalf("passed stoppingSource (entry %d) without the point of no return", i)
			}
		}
		select {
		case <-ch:
		default:
			if st.GetPhase() != phProposing && st.GetPhase() != phPlacing {
				rt.Fatalf("MigrateJob still parked in phase %s", PhaseName(st.GetPhase()))
			}
		}
	})
}
