package placement

import (
	"strings"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
)

// JobInstance is a job's instance as placement counts it: the instance and
// the job it runs (for its requirements).
type JobInstance struct {
	Instance *managerv1.Instance
	Job      *managerv1.Job
	// Bundle is the job's bundle (nil when it has none).
	Bundle *managerv1.Bundle
}

// AllocationOf is the allocation a bound instance holds on its node.
func AllocationOf(cfg Config, ji JobInstance) Allocation {
	return AllocationForJob(cfg, ji.Instance, ji.Job, ji.Bundle)
}

// ExplainJob places instance role of job against nodes now, explained: the
// nodes that are not online are excluded (saying their state; Node.Unavailable), and every
// live instance but this one's own binding holds its allocation. It is
// what ExplainPlacement answers (the Manager and the SDK's fake alike).
func ExplainJob(cfg Config, nodes []*managerv1.Node, live []JobInstance, job *managerv1.Job, role, pool string) (*managerv1.ExplainPlacementResponse, error) {
	return ExplainBundleJob(cfg, nodes, live, job, nil, role, pool)
}

// ExplainBundleJob is ExplainJob for a job of bundle b (nil: none), placed
// with the bundle's rules (RequestForJob); a non-empty pool overrides the
// bundle's.
func ExplainBundleJob(cfg Config, nodes []*managerv1.Node, live []JobInstance, job *managerv1.Job, b *managerv1.Bundle, role, pool string) (*managerv1.ExplainPlacementResponse, error) {
	req := RequestForJob(cfg, job, b, role)
	if pool != "" {
		req.Pool = pool
	}
	req.Explain = true
	view := make([]Node, 0, len(nodes))
	for _, n := range nodes {
		pn := NodeFromProto(n)
		pn.Unavailable = UnavailableReason(n)
		view = append(view, pn)
	}
	var allocs []Allocation
	for _, ji := range live {
		if ji.Instance.GetJobId() == job.GetJobId() && ji.Instance.GetRole() == role {
			continue
		}
		allocs = append(allocs, AllocationOf(cfg, ji))
	}
	res, err := Place(cfg, view, allocs, req)
	if err != nil {
		return nil, err
	}
	return ResponseOf(res), nil
}

// UnavailableReason is why no placement may use node n (Node.Unavailable):
// "the node is <state>" when it is not online, "the node is draining"
// when it drains, "" when it takes work.
func UnavailableReason(n *managerv1.Node) string {
	if st := n.GetState(); st != managerv1.NodeState_NODE_STATE_ONLINE {
		return "the node is " + strings.ToLower(strings.TrimPrefix(st.String(), "NODE_STATE_"))
	}
	if n.GetDraining() {
		return "the node is draining"
	}
	return ""
}

// ResponseOf is a Result as the API answers it.
func ResponseOf(res Result) *managerv1.ExplainPlacementResponse {
	out := &managerv1.ExplainPlacementResponse{NodeId: res.NodeID, Summary: res.Summary()}
	for _, d := range res.Degradations {
		out.Degradations = append(out.Degradations, &managerv1.PlacementRefusal{Rule: string(d.Rule), Reason: d.Reason})
	}
	if res.Explanation != nil {
		for _, v := range res.Explanation.Nodes {
			nv := &managerv1.PlacementNodeVerdict{NodeId: v.NodeID, Chosen: v.Chosen, Tier: int32(v.Tier), Notes: v.Notes}
			for _, r := range v.Refusals {
				nv.Refusals = append(nv.Refusals, &managerv1.PlacementRefusal{Rule: string(r.Rule), Reason: r.Reason})
			}
			out.Nodes = append(out.Nodes, nv)
		}
	}
	return out
}
