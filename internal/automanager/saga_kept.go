package automanager

import (
	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/pkg/placement"
)

// targetPlacer places migration targets on a placement state someone
// keeps across placements, so that a target costs what it places rather
// than a read of the whole state and a State built from it. Both methods
// are called from the saga's goroutine.
type targetPlacer interface {
	// placeTarget places st's target as Saga.placeTarget does; ok is false
	// when it cannot (nothing kept yet, or the job or a pinned node not
	// known to it, or a pinned node still starting): the saga then reads
	// the state and places on a State of its own.
	placeTarget(st *managerv1.MigrationState) (node, summary, why string, degr []*managerv1.PlacementRefusal, ok bool)
	// started notes that st's target was bound on its node, so that the
	// room it takes is counted before the store's record of it is read
	// back.
	started(st *managerv1.MigrationState)
}

// keptTargets places migration targets on the AutoManager's mirror: its
// placement state, kept across passes (decision 0068), with the mirror's
// jobs, bundles and nodes. It holds mirrorMu while it reads them; Run's
// goroutine lets go of it whenever it waits on the saga (decide), so the
// two never wait on each other. The mirror lags the store by the events
// not yet read — the same view the passes place on — and a target the
// saga starts is noted in it at once (started), so the next target does
// not count on its room.
type keptTargets struct{ a *AutoManager }

func (k keptTargets) placeTarget(st *managerv1.MigrationState) (node, summary, why string, degr []*managerv1.PlacementRefusal, ok bool) {
	k.a.mirrorMu.Lock()
	defer k.a.mirrorMu.Unlock()
	m := k.a.mirror
	if !m.loaded {
		return "", "", "", nil, false
	}
	jh := m.jobs[st.GetSourceJobId()]
	if jh == nil {
		return "", "", "", nil, false // created since the mirror's last read: the saga reads it
	}
	starting := map[string]string{}
	for _, n := range m.nodeList {
		// Promised room to a pass, but a target is bound at once, and
		// only an online node takes a binding.
		if n.GetState() == nodeStarting && n.GetElastic() {
			starting[n.GetNodeId()] = placement.UnavailableReason(n)
		}
	}
	if pin := st.GetRequestedTargetNodeId(); pin != "" && (m.nodes[pin] == nil || starting[pin] != "") {
		return "", "", "", nil, false
	}
	ps := m.placement()
	if ps == nil {
		return "", "", "", nil, false
	}
	job := jh.GetJob()
	node, summary, why, degr = placeTargetOn(ps, targetInput{cfg: m.cfg, st: st, job: job,
		bundle: m.bundles[job.GetTags()[placement.TagBundleID]], nodes: m.nodeList, exclude: starting})
	return node, summary, why, degr, true
}

func (k keptTargets) started(st *managerv1.MigrationState) {
	k.a.mirrorMu.Lock()
	defer k.a.mirrorMu.Unlock()
	k.a.mirror.reserve(st.GetSourceJobId(), st.GetTargetRole(), st.GetTargetNodeId())
}
