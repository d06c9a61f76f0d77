package state_test

import (
	"fmt"
	"testing"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/internal/store/state"
)

// The counts follow every write (a refused one changes nothing) and a
// restore counts the same as the writes did.
func TestCountsFollowWrites(t *testing.T) {
	f := newFixture(t)
	f.onlineNode("a")
	f.onlineNode("b")
	f.createJob("j1")
	f.createJob("j2")
	tok := f.running("j1", "primary", "a")
	for _, n := range []uint32{2, 3, 3} { // the worker restarted a service twice, then once more
		f.must(cReports("a", &managerv1.InstanceReport{JobId: "j1", Role: "primary", FencingToken: tok, Phase: managerv1.InstancePhase_INSTANCE_PHASE_RUNNING, Restarts: n}))
	}
	f.bind("j2", "primary", "b")
	f.must(&storev1.Command{Cmd: &storev1.Command_SetNodeDraining{SetNodeDraining: &storev1.SetNodeDraining{NodeId: "b", Draining: true}}})
	f.apply(&storev1.Command{Cmd: &storev1.Command_SetNodeDraining{SetNodeDraining: &storev1.SetNodeDraining{NodeId: "zz", Draining: true}}})
	check := func(c state.Counts, where string) {
		t.Helper()
		if c.ServiceRestarts != 3 || c.InstancesByPhase[managerv1.InstancePhase_INSTANCE_PHASE_RUNNING] != 1 || c.NodesByState[managerv1.NodeState_NODE_STATE_ONLINE] != 2 || c.NodesDraining != 1 {
			t.Fatalf("%s: counts %+v", where, c)
		}
		total := 0
		for _, n := range c.InstancesByPhase {
			total += n
		}
		if total != 2 {
			t.Fatalf("%s: %d instances counted, want 2 (%+v)", where, total, c.InstancesByPhase)
		}
	}
	check(f.s.Counts(), "after the writes")
	restored := restoreInto(t, f.snap())
	check(restored.Counts(), "after a restore")
}

// Reading the counts (what a metrics scrape does) costs the same whatever
// the store holds: b.N reads over a store of n running instances.
func BenchmarkCounts(b *testing.B) {
	for _, n := range []int{10, 1000} {
		b.Run(fmt.Sprintf("instances=%d", n), func(b *testing.B) {
			f := newFixture(b)
			f.onlineNode("a")
			for i := range n {
				id := fmt.Sprintf("j%d", i)
				f.createJob(id)
				f.running(id, "primary", "a")
			}
			b.ResetTimer()
			for range b.N {
				if f.s.Counts().InstancesByPhase[managerv1.InstancePhase_INSTANCE_PHASE_RUNNING] != n {
					b.Fatal("miscounted")
				}
			}
		})
	}
}
