package automanager

import (
	"reflect"

	"github.com/norsk-go/norsk-manager/pkg/placement"
)

// The mirror's placement state: the fleet as a pass places on it, kept
// across passes so that a pass costs what it plans, not what the fleet
// holds. Building it reads every node and every live allocation (at
// 100,000 jobs on 10,000 nodes, hundreds of milliseconds and hundreds of
// megabytes), which is what every pass used to do; kept, a job whose
// instances change costs a Remove and a Commit per instance.
//
// It is exactly passNodes of the mirror's nodes, with what every instance
// that has not stopped holds on a reachable node (the allocations index):
// reallocate updates it as a job's instances change; a node added, removed
// or changed in anything placement reads (reachability included) drops
// it, and the next pass builds it again. Like the rest of the mirror it is
// read and changed under AutoManager.mirrorMu: by Run's goroutine, and by
// the saga's to place a migration's target (keptTargets).

// placement returns the placement state, building it if it was dropped;
// nil if it cannot be built (Plan then builds its own, and reports why
// nothing could be placed).
func (m *mirror) placement() *placement.State {
	if m.place != nil {
		return m.place
	}
	view, _, _ := passNodes(m.nodeList, m.placeList)
	st, err := placement.NewState(m.cfg, view, m.liveAllocations(m.reachable, nil))
	if err != nil {
		return nil
	}
	m.place = st
	return st
}

// replace moves what job id holds in the placement state from prev to next
// (its allocations before and after, on any node): those on unreachable
// nodes are not in it. A commit the state refuses drops it.
func (m *mirror) replace(id string, prev, next []placement.Allocation) {
	st := m.place
	if st == nil {
		return
	}
	for _, a := range prev {
		if m.reachable(a.NodeID) {
			st.Remove(id, a.Role)
		}
	}
	for _, a := range next {
		if m.reachable(a.NodeID) {
			if err := st.Commit(a); err != nil {
				m.place = nil
				return
			}
		}
	}
}

// samePlacementNode reports whether placement sees two versions of a node
// alike (the images it holds count: nodeChanged does not read them).
func samePlacementNode(a, b placement.Node) bool {
	return reflect.DeepEqual(a, b)
}
