package automanager

import (
	"context"
	"fmt"
	"strings"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/pkg/placement"
)

// placeTarget chooses the migration target's node with the placement every
// job takes: the job's requirements, pools, resilience against its other
// replicas, hot spares — with the source's node excluded (and the nodes
// that are not online, or are draining, unavailable in the placement
// state), a named target pinned, and, for
// a handover, the job socket required. It answers the node, the
// placement's summary and the soft rules the node breaks, or "" and why
// nothing fits. A repair's target must break less than the source's node
// does (placement.Severity), or there is nothing to repair it with. Under
// an AutoManager it places on the mirror's kept state (keptTargets);
// otherwise, or when that cannot answer, on a State built from a read of
// the whole state.
func (s *Saga) placeTarget(ctx context.Context, m *migration) (node, summary, why string, degr []*managerv1.PlacementRefusal) {
	if s.kept != nil {
		if node, summary, why, degr, ok := s.kept.placeTarget(m.st); ok {
			return node, summary, why, degr
		}
	}
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	v, err := readView(cctx, s.api)
	if err != nil {
		return "", "", "cannot read the cluster: " + err.Error(), nil
	}
	st := m.st
	var jh *managerv1.JobWithHistory
	for _, j := range v.Jobs {
		if j.GetJob().GetJobId() == st.GetSourceJobId() {
			jh = j
		}
	}
	if jh == nil {
		return "", "", "the job is gone", nil
	}
	var bundle *managerv1.Bundle
	for _, b := range v.Bundles {
		if b.GetBundleId() == jh.GetJob().GetTags()[placement.TagBundleID] {
			bundle = b
		}
	}
	cfg := s.policy.Placement // the job socket a presence capability (Policy.defaults)
	nodes, _, known := placementNodes(v.Nodes)
	if pin := st.GetRequestedTargetNodeId(); pin != "" && !known[pin] {
		return "", "", placement.ReasonNoCapacity + pinnedWhy(pin, "no such node"), nil
	}
	ps, err := placement.NewState(cfg, nodes, liveAllocations(cfg, v, reachableOf(v.Nodes)))
	if err != nil {
		return "", "", err.Error(), nil
	}
	return placeTargetOn(ps, targetInput{cfg: cfg, st: st, job: jh.GetJob(), bundle: bundle, nodes: v.Nodes})
}

// targetInput is what a migration target's placement reads besides the
// placement state.
type targetInput struct {
	cfg    placement.Config
	st     *managerv1.MigrationState
	job    *managerv1.Job
	bundle *managerv1.Bundle
	// nodes are every node (whether another advertises the job socket);
	// exclude are nodes the state holds that no target may take (elastic
	// nodes still starting, which a kept state counts as promised room).
	nodes   []*managerv1.Node
	exclude map[string]string
}

// placeTargetOn places the target on ps, which holds every live allocation
// (the source's included) and marks the nodes that are not online or drain
// unavailable; it places without committing.
func placeTargetOn(ps *placement.State, in targetInput) (node, summary, why string, degr []*managerv1.PlacementRefusal) {
	st := in.st
	req := placement.RequestForJob(in.cfg, in.job, in.bundle, st.GetTargetRole())
	req.PinNode = st.GetRequestedTargetNodeId()
	req.OverrideReservation = st.GetOverrideReservation()
	// A migration target takes a warm spare first, as a recovery does
	// (warm for the job's template before any other spare).
	req.Recovery = true
	req.Explain = req.PinNode != ""
	req.Exclude = map[string]string{st.GetSourceNodeId(): "the job's current node (the migration's source)"}
	for id, why := range in.exclude {
		if _, ok := req.Exclude[id]; !ok {
			req.Exclude[id] = why
		}
	}
	if st.GetStrategy() == stratHandover {
		req.Requirements.Capabilities = append(append([]placement.Capability(nil), req.Requirements.Capabilities...),
			placement.Capability{Name: JobSocketCapability, Count: 1})
	}
	res, err := ps.Place(req)
	if err != nil {
		return "", "", err.Error(), nil
	}
	if res.NodeID != "" {
		for _, dg := range res.Degradations {
			degr = append(degr, &managerv1.PlacementRefusal{Rule: string(dg.Rule), Reason: dg.Reason})
		}
		if st.GetRepair() {
			// The source's node is known to the state (it holds the
			// source): what it breaks now, against what the target would.
			if cur, err := ps.Breaches(req, st.GetSourceNodeId()); err == nil && placement.Severity(res.Degradations) >= placement.Severity(cur) {
				return "", "", fmt.Sprintf("node %s would not improve on the anti-affinity of %s (it breaks %s, %s breaks %s): nothing to repair with",
					res.NodeID, st.GetSourceNodeId(), ruleList(res.Degradations), st.GetSourceNodeId(), ruleList(cur)), nil
			}
		}
		return res.NodeID, res.Summary(), "", degr
	}
	why = res.Summary()
	if st.GetStrategy() == stratHandover && !anyOtherAdvertises(in.nodes, JobSocketCapability, st.GetSourceNodeId()) {
		why = fmt.Sprintf("no other node advertises %s, which the handover strategy needs (the worker's job socket: start it with --job-socket); %s", JobSocketCapability, why)
	}
	if req.PinNode != "" && res.Explanation != nil {
		for _, nv := range res.Explanation.Nodes {
			if nv.NodeID != req.PinNode {
				continue
			}
			var rs []string
			for _, r := range nv.Refusals {
				rs = append(rs, string(r.Rule)+": "+r.Reason)
			}
			why += pinnedWhy(req.PinNode, strings.Join(rs, "; "))
		}
	}
	return "", "", why, nil
}

// placementNodes converts the nodes, in their order, those placement must
// skip (not online, or draining) marked unavailable with why — once for
// the state, never copied into each request — and answers those reasons
// by id and the known ids.
func placementNodes(nodes []*managerv1.Node) ([]placement.Node, map[string]string, map[string]bool) {
	view := make([]placement.Node, 0, len(nodes))
	unavailable := map[string]string{}
	known := make(map[string]bool, len(nodes))
	for _, n := range nodes {
		pn := placementNode(n)
		if pn.Unavailable != "" {
			unavailable[pn.ID] = pn.Unavailable
		}
		view = append(view, pn)
		known[n.GetNodeId()] = true
	}
	return view, unavailable, known
}

// placementNode is node n as placement sees it: unavailable, saying why,
// when it is not online or drains.
func placementNode(n *managerv1.Node) placement.Node {
	pn := placement.NodeFromProto(n)
	pn.Unavailable = placement.UnavailableReason(n)
	return pn
}

// reachableOf says whether a node's worker may still run what it holds.
func reachableOf(nodes []*managerv1.Node) func(string) bool {
	byID := make(map[string]*managerv1.Node, len(nodes))
	for _, n := range nodes {
		byID[n.GetNodeId()] = n
	}
	return func(id string) bool {
		n := byID[id]
		return n != nil && (n.GetState() == nodeOnline || n.GetState() == nodeStopping)
	}
}

// liveAllocations are what every instance that has not stopped, where a
// worker may run it, holds on its node.
func liveAllocations(cfg placement.Config, v View, reachable func(string) bool) []placement.Allocation {
	bundles := make(map[string]*managerv1.Bundle, len(v.Bundles))
	for _, b := range v.Bundles {
		bundles[b.GetBundleId()] = b
	}
	var live []placement.Allocation
	for _, jh := range v.Jobs {
		job := jh.GetJob()
		bundle := bundles[job.GetTags()[placement.TagBundleID]]
		for _, in := range jh.GetInstances() {
			if in.GetPhase() != phaseStopped && reachable(in.GetNodeId()) {
				live = append(live, placement.AllocationForJob(cfg, in, job, bundle))
			}
		}
	}
	return live
}

func anyOtherAdvertises(nodes []*managerv1.Node, capability, except string) bool {
	for _, n := range nodes {
		if n.GetNodeId() == except || n.GetState() != nodeOnline {
			continue
		}
		for _, c := range n.GetCapabilities() {
			if c.GetName() == capability && c.GetCount() > 0 {
				return true
			}
		}
	}
	return false
}

// ruleList names the rules of ds ("nothing" for none).
func ruleList(ds []placement.Degradation) string {
	if len(ds) == 0 {
		return "nothing"
	}
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = string(d.Rule)
	}
	return strings.Join(out, ", ")
}
