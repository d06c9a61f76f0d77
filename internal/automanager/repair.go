package automanager

import (
	"fmt"
	"sort"
	"strings"
	"time"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/pkg/jobspec"
	"github.com/norsk-go/norsk-manager/pkg/placement"
)

// Repair defaults.
const (
	DefaultRepairMaxInFlight = 2
	DefaultRepairInterval    = time.Minute
)

// RepairPolicy bounds the repairs of degraded anti-affinity: a replica
// placed beside another replica of its bundle, against a FORBID rule,
// because nothing that complied had room, is moved once a node that
// complies better has room.
//
// A repair is a migration of that replica — never of the primary — with
// the overlap strategy: the new copy runs before the old one is stopped
// (make-before-break), so the bundle never has fewer replicas running than
// before. It is rate-limited: at most MaxInFlight repairs are under way at
// once across the fleet, and two repairs of one bundle start at least
// Interval apart (a repair that aborted is not retried at once). The
// limits are read from the store's migration records (MigrationState
// repair), so they hold across a change of primary.
type RepairPolicy struct {
	// Disabled turns repairs off: a degraded replica stays where it is
	// until it moves for another reason.
	Disabled bool
	// MaxInFlight is the most repairs under way at once (default 2).
	MaxInFlight int
	// Interval is the least time between the starts of two repairs of one
	// bundle (default 1 min).
	Interval time.Duration
}

func (r *RepairPolicy) defaults() {
	if r.MaxInFlight <= 0 {
		r.MaxInFlight = DefaultRepairMaxInFlight
	}
	if r.Interval <= 0 {
		r.Interval = DefaultRepairInterval
	}
}

// repairRequester is who a repair migration is recorded as requested by.
const repairRequester = "automanager (repair)"

// forbids reports whether the bundle keeps replicas apart by some FORBID
// rule and has more than one replica.
func forbids(b *managerv1.Bundle) bool {
	p := b.GetResiliencePolicy()
	if p == nil || jobspec.Replicas(b) < 2 {
		return false
	}
	f := managerv1.AntiAffinity_ANTI_AFFINITY_FORBID
	return p.GetSameNode() == f || p.GetSameAz() == f || p.GetSameCloud() == f
}

// mayBreak reports whether some live bundle's running replicas share a
// failure domain one of its FORBID rules keeps them out of — a cheap look
// over the instances, so a pass with nothing to place builds the placement
// state only when a repair may be due. It may say yes where placement
// then finds nothing (it reads instances of any phase), never no where
// placement would find a break.
func mayBreak(bundles []*managerv1.Bundle, jobs map[string]*managerv1.JobWithHistory, nodes []*managerv1.Node) bool {
	var byID map[string]placement.Node
	for _, b := range bundles {
		if b.GetState() != managerv1.BundleState_BUNDLE_STATE_LIVE || !forbids(b) {
			continue
		}
		if byID == nil {
			byID = make(map[string]placement.Node, len(nodes))
			for _, n := range nodes {
				byID[n.GetNodeId()] = placement.NodeFromProto(n)
			}
		}
		pol := b.GetResiliencePolicy()
		f := managerv1.AntiAffinity_ANTI_AFFINITY_FORBID
		type domain struct{ kind, value string }
		seen := map[domain]int{} // domain → the replica seen there
		for r := 0; r < jobspec.Replicas(b); r++ {
			for _, spec := range b.GetJobs() {
				jh := jobs[jobspec.BundleJobID(b.GetBundleId(), spec.GetJobName(), r)]
				for _, in := range jh.GetInstances() {
					if in.GetPhase() == phaseStopped {
						continue
					}
					n := byID[in.GetNodeId()]
					var ds []domain
					if pol.GetSameNode() == f {
						ds = append(ds, domain{"node", in.GetNodeId()})
					}
					if pol.GetSameAz() == f && n.Zone != "" {
						ds = append(ds, domain{"zone", n.Zone})
					}
					if pol.GetSameCloud() == f && n.Cloud != "" {
						ds = append(ds, domain{"cloud", n.Cloud})
					}
					for _, dm := range ds {
						if other, ok := seen[dm]; ok && other != r {
							return true
						}
						seen[dm] = r
					}
				}
			}
		}
	}
	return false
}

// replicaJob is one running replica job of a bundle, and what its node
// breaks.
type replicaJob struct {
	job     *managerv1.Job
	in      *managerv1.Instance
	replica int
	name    string
	req     placement.Request
	breaks  []placement.Degradation
}

// planRepairs counts the running bundle instances whose node breaks a
// FORBID rule of their bundle (Decision.Degraded) and, within the repair
// limits, moves one replica of each such bundle — the highest replica
// index first, never the primary — to a node with room that breaks less
// (placement's own ranking: sameNode before sameAz before sameCloud). A
// bundle is repaired only while every one of its replicas runs where its
// worker answers and nothing else is under way for it (a placement, a
// migration, a rolling restart, a deletion). st holds every live
// allocation and this pass's placements; a repair's target is committed to
// it so that two repairs of a pass never count on the same room; the
// nodes that are not online or drain are unavailable in it. exclude are
// the other nodes no placement may take now (starting).
func planRepairs(d *Decision, st *placement.State, v View, jobs map[string]*managerv1.JobWithHistory, reachable func(string) bool,
	exclude map[string]string, p Policy, now time.Time) {
	inFlight := 0
	last := map[string]time.Time{} // bundle → its latest repair's start
	for _, m := range v.Migrations {
		if !m.GetRepair() {
			continue
		}
		if !terminal(m.GetPhase()) {
			inFlight++
		}
		if jh := jobs[m.GetSourceJobId()]; jh != nil {
			b := jh.GetJob().GetTags()[placement.TagBundleID]
			if at := m.GetStartedAt().AsTime(); at.After(last[b]) {
				last[b] = at
			}
		}
	}
	busy := map[string]bool{} // bundles this decision already acts on
	for _, a := range d.Actions {
		if a.BundleID != "" {
			busy[a.BundleID] = true
		}
	}
	bundles := append([]*managerv1.Bundle(nil), v.Bundles...)
	sort.Slice(bundles, func(i, j int) bool { return bundles[i].GetBundleId() < bundles[j].GetBundleId() })
	for _, b := range bundles {
		if b.GetState() != managerv1.BundleState_BUNDLE_STATE_LIVE || !forbids(b) || busy[b.GetBundleId()] {
			continue
		}
		reps, settled := runningReplicas(b, jobs, v.Migrating, reachable)
		var candidates []*replicaJob
		for _, r := range reps {
			req := placement.RequestForJob(p.Placement, r.job, b, r.in.GetRole())
			ds, err := st.Breaches(req, r.in.GetNodeId())
			if err != nil || len(ds) == 0 {
				continue
			}
			d.Degraded++
			if d.degradedBundles == nil {
				d.degradedBundles = map[string]int{}
			}
			d.degradedBundles[b.GetBundleId()]++
			r.req, r.breaks = req, ds
			if r.replica > 0 {
				candidates = append(candidates, r)
			}
		}
		if !settled || len(candidates) == 0 || p.Repair.Disabled {
			continue
		}
		sort.SliceStable(candidates, func(i, j int) bool {
			if candidates[i].replica != candidates[j].replica {
				return candidates[i].replica > candidates[j].replica
			}
			return candidates[i].name < candidates[j].name
		})
		for _, c := range candidates {
			req := c.req
			req.Role = c.in.GetRole() + "@repair" // the target's allocation while this pass plans
			req.Exclude = make(map[string]string, len(exclude)+1)
			for id, why := range exclude {
				req.Exclude[id] = why
			}
			req.Exclude[c.in.GetNodeId()] = "the replica's current node"
			res, err := st.Place(req)
			if err != nil || res.NodeID == "" || placement.Severity(res.Degradations) >= placement.Severity(c.breaks) {
				continue // nowhere better has room now
			}
			if next := last[b.GetBundleId()].Add(p.Repair.Interval); now.Before(next) {
				d.due(next)
				break
			}
			if inFlight >= p.Repair.MaxInFlight {
				break // a repair ending wakes a pass (its migration's events)
			}
			if err := st.Commit(req.Allocation(res)); err != nil {
				break
			}
			inFlight++
			last[b.GetBundleId()] = now
			d.Actions = append(d.Actions, Action{Kind: ActRepair, JobID: c.job.GetJobId(), Role: c.in.GetRole(), NodeID: res.NodeID,
				BundleID: b.GetBundleId(), Reason: repairReason(c, res)})
			break
		}
	}
}

// runningReplicas are the bundle's replica jobs that run where their
// worker answers, each with its current instance; settled is false when
// one of its managed jobs does not, or has a migration in flight.
func runningReplicas(b *managerv1.Bundle, jobs map[string]*managerv1.JobWithHistory, migrating map[string]bool,
	reachable func(string) bool) (out []*replicaJob, settled bool) {
	settled = true
	for r := 0; r < jobspec.Replicas(b); r++ {
		for _, spec := range b.GetJobs() {
			jh := jobs[jobspec.BundleJobID(b.GetBundleId(), spec.GetJobName(), r)]
			if jh == nil {
				settled = false
				continue
			}
			job := jh.GetJob()
			if job.GetTerminalState() != nil || job.GetTags()[jobspec.TagDormant] == "true" {
				continue // runs nowhere on purpose
			}
			in := currentInstance(jh, jobspec.ReplicaRole(r))
			if in == nil || in.GetPhase() != managerv1.InstancePhase_INSTANCE_PHASE_RUNNING ||
				in.GetDesired() == desiredStopped || !reachable(in.GetNodeId()) {
				settled = false
				continue
			}
			if migrating[job.GetJobId()] {
				settled = false // counted, not moved: the migration decides
			}
			out = append(out, &replicaJob{job: job, in: in, replica: r, name: spec.GetJobName()})
		}
	}
	return out, settled
}

// repairReason says what a repair restores and where it moves the replica.
func repairReason(c *replicaJob, res placement.Result) string {
	rules := make([]string, len(c.breaks))
	for i, dg := range c.breaks {
		rules[i] = string(dg.Rule)
	}
	after := "which complies"
	if len(res.Degradations) > 0 {
		left := make([]string, len(res.Degradations))
		for i, dg := range res.Degradations {
			left[i] = string(dg.Rule)
		}
		after = "which breaks only " + strings.Join(left, ", ")
	}
	return fmt.Sprintf("%s: %s; moving %s (%s) to %s, %s", strings.Join(rules, ", "), c.breaks[0].Reason,
		jobspec.ReplicaRole(c.replica), c.job.GetJobId(), res.NodeID, after)
}
