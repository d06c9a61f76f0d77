package automanager

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/pkg/placement"
)

// SpareSpec is how many warm, empty elastic nodes a pool tier keeps (the
// pool's spares: {count, warmFor, exclusive, instanceType}).
type SpareSpec struct {
	// Count is how many spares the tier keeps (0: none).
	Count int
	// WarmFor names bundle templates (bundle job names) or job ids whose
	// images every spare is prefetched with; recovery of those prefers
	// these spares.
	WarmFor []string
	// Exclusive spares take only the WarmFor templates (unless a placement
	// overrides the reservation).
	Exclusive bool
	// InstanceType is the type a cloud tier's spares are created as (""
	// = the tier's cheapest).
	InstanceType string
}

// Spare actions.
const (
	// ActProvisionSpare creates a spare in elastic tier Pool through
	// Provider, tagged with Tags.
	ActProvisionSpare ActionKind = iota + 100
	// ActReleaseSpare clears the spare tags of NodeID, a spare an instance
	// was bound to or one its tier keeps no more: it is an ordinary node
	// from then on.
	ActReleaseSpare
	// ActPrefetch tells NodeID's worker to pull Images.
	ActPrefetch
)

// spareTags are the tags a spare of spec is created (and kept) with.
func spareTags(spec SpareSpec) map[string]string {
	t := map[string]string{placement.TagSpare: "true"}
	if len(spec.WarmFor) > 0 {
		t[placement.TagWarmFor] = strings.Join(spec.WarmFor, ",")
		if spec.Exclusive {
			t[placement.TagReservedFor] = strings.Join(spec.WarmFor, ",")
		}
	}
	if spec.Exclusive {
		t[placement.TagExclusive] = "true"
	}
	return t
}

// SpareRefetchAfter is how long the reconciler waits before asking a spare
// that still lacks an image to prefetch it again.
const SpareRefetchAfter = time.Minute

// planSpares keeps each tier's spares: a spare an instance was bound to is
// released (an ordinary node from then on, reaped once idle), a tier with
// fewer online or starting empty spares than its count gets new ones (at
// most MaxProvisionPerPass a pass, none while the tier is on hold), one
// with more releases the surplus (its count lowered, or its entry gone:
// see surplusSpares), and an online spare lacking an image of the
// templates it is warm for is told to prefetch it (again after
// SpareRefetchAfter, prefetched remembers when).
func planSpares(d *Decision, v View, p Policy, now time.Time, prefetched map[string]time.Time) {
	tiers := make([]string, 0, len(p.Spares))
	for t := range p.Spares {
		tiers = append(tiers, t)
	}
	// The tiers whose spares no entry keeps: looked for when some are
	// configured (every pass reads the nodes then anyway), else only in a
	// full pass, so that a fleet without spares pays nothing per event.
	if len(p.Spares) > 0 || v.Others == nil {
		tiers = append(tiers, unkeptSpareTiers(v.Nodes, p.Spares)...)
	}
	if len(tiers) == 0 {
		return
	}
	sort.Strings(tiers)
	d.sparesDecided = len(p.Spares) > 0
	made := 0
	for _, tier := range tiers {
		spec := p.Spares[tier] // the zero spec (no spares) for a tier no entry names
		var et ElasticTier
		if spec.Count > 0 {
			var ok bool
			if et, ok = elasticTier(p, tier); !ok {
				d.blockSpares(tier, "no provider creates nodes in this tier (is its provider configured, its region run?)")
				continue
			}
		}
		warm := v.Jobs
		if v.WarmJobs != nil {
			warm = v.WarmJobs
		}
		images := warmImages(warm, spec.WarmFor)
		// A spare is consumed once an instance is bound to it: the node
		// record says so, and so do the jobs (the node record of an
		// incremental pass may predate the binding).
		bound := map[string]string{} // node → "job/role"
		for _, jh := range warm {
			for _, in := range jh.GetInstances() {
				if liveInstance(in) && bound[in.GetNodeId()] == "" {
					bound[in.GetNodeId()] = in.GetJobId() + "/" + in.GetRole()
				}
			}
		}
		var idle []*managerv1.Node
		for _, n := range v.Nodes {
			if !isSpareOf(n, tier) {
				continue
			}
			switch n.GetState() {
			case nodeOnline, nodeStarting:
			default:
				continue // lost or ending: replaced, and reaped as any node
			}
			by := bound[n.GetNodeId()]
			if len(n.GetInstances()) > 0 {
				by = n.GetInstances()[0].GetJobId() + "/" + n.GetInstances()[0].GetRole()
			}
			if by != "" {
				d.Actions = append(d.Actions, Action{Kind: ActReleaseSpare, NodeID: n.GetNodeId(), Pool: tier,
					Reason: fmt.Sprintf("spare of tier %s consumed by %s", tier, by)})
				continue
			}
			idle = append(idle, n)
		}
		kept, surplus := surplusSpares(idle, spec.Count)
		for _, n := range surplus {
			d.Actions = append(d.Actions, Action{Kind: ActReleaseSpare, NodeID: n.GetNodeId(), Pool: tier,
				Reason: fmt.Sprintf("tier %s keeps %d spare(s) and has %d idle: released as surplus (an ordinary elastic node from now on, reaped once idle)", tier, spec.Count, len(idle))})
		}
		for _, n := range kept {
			if n.GetState() != nodeOnline || n.GetDraining() {
				continue
			}
			var missing []string
			for _, img := range images {
				if !holdsImage(n, img) {
					missing = append(missing, img)
				}
			}
			if len(missing) == 0 {
				continue
			}
			key := n.GetNodeId() + "|" + strings.Join(missing, ",")
			if at, ok := prefetched[key]; ok && now.Sub(at) < SpareRefetchAfter {
				d.due(at.Add(SpareRefetchAfter))
				continue
			}
			d.Actions = append(d.Actions, Action{Kind: ActPrefetch, NodeID: n.GetNodeId(), Images: missing, Pool: tier,
				Reason: fmt.Sprintf("spare of tier %s warm for %s", tier, strings.Join(spec.WarmFor, ", "))})
		}
		have := len(kept)
		if have >= spec.Count {
			continue
		}
		if until, held := v.ProvisionHold[tier]; held && now.Before(until) {
			d.due(until)
			continue
		}
		for ; have < spec.Count && made < p.MaxProvisionPerPass; have++ {
			act := Action{Kind: ActProvisionSpare, Provider: et.Provider, Pool: tier, Tags: spareTags(spec),
				Reason: fmt.Sprintf("tier %s keeps %d spare(s), has %d", tier, spec.Count, have)}
			if len(et.Types) > 0 {
				t := et.Types[0]
				if spec.InstanceType != "" {
					i := slices.IndexFunc(et.Types, func(t ElasticType) bool { return t.Name == spec.InstanceType })
					if i < 0 {
						d.blockSpares(tier, fmt.Sprintf("instance type %s is not offered in any region or zone the tier runs (the instance-type cache has %s)", spec.InstanceType, typeNames(et.Types)))
						break
					}
					t = et.Types[i]
				}
				act.Type = &t
			}
			d.Actions = append(d.Actions, act)
			made++
		}
	}
}

// isSpareOf reports whether n is an elastic node of tier carrying the spare
// tag (the AutoManager's spares; an operator's hand-marked spares on local
// servers are not elastic, and are never released).
func isSpareOf(n *managerv1.Node, tier string) bool {
	return n.GetElastic() && n.GetTags()[placement.TagSpare] == "true" && n.GetTags()[placement.TagPool] == tier
}

// unkeptSpareTiers are the tiers of the elastic spares that no entry of
// spares keeps (or keeps none of): their spares are all surplus.
func unkeptSpareTiers(nodes []*managerv1.Node, spares map[string]SpareSpec) []string {
	var out []string
	for _, n := range nodes {
		tier := n.GetTags()[placement.TagPool]
		if !n.GetElastic() || n.GetTags()[placement.TagSpare] != "true" || slices.Contains(out, tier) {
			continue
		}
		if _, kept := spares[tier]; !kept {
			out = append(out, tier)
		}
	}
	return out
}

// surplusSpares splits a tier's idle spares into the count it keeps and
// the surplus it releases. The online ones are kept before the starting
// ones (they are warm, or warming), the warmer before the colder (the more
// images held), then in node id order; the surplus is the rest, in that
// order.
func surplusSpares(idle []*managerv1.Node, count int) (kept, surplus []*managerv1.Node) {
	if len(idle) <= count {
		return idle, nil
	}
	order := slices.Clone(idle)
	slices.SortStableFunc(order, func(a, b *managerv1.Node) int {
		ao, bo := a.GetState() == nodeOnline, b.GetState() == nodeOnline
		switch {
		case ao != bo && ao:
			return -1
		case ao != bo:
			return 1
		case len(a.GetHeldImages()) != len(b.GetHeldImages()):
			return len(b.GetHeldImages()) - len(a.GetHeldImages())
		default:
			return strings.Compare(a.GetNodeId(), b.GetNodeId())
		}
	})
	count = max(count, 0)
	return order[:count], order[count:]
}

// blockSpares records why tier's spares cannot be created now.
func (d *Decision) blockSpares(tier, why string) {
	if d.SparesBlocked == nil {
		d.SparesBlocked = map[string]string{}
	}
	d.SparesBlocked[tier] = why
}

// typeNames lists types' distinct names, or "none".
func typeNames(types []ElasticType) string {
	var names []string
	for _, t := range types {
		if !slices.Contains(names, t.Name) {
			names = append(names, t.Name)
		}
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

// elasticTier is the elastic tier named tier.
func elasticTier(p Policy, tier string) (ElasticTier, bool) {
	for _, et := range p.Elastic {
		if et.Tier == tier {
			return et, true
		}
	}
	return ElasticTier{}, false
}

// warmImages are the images, normalised and sorted, of the jobs a spare
// warm for templates runs: jobs whose template tag, bundle job name or id
// is one of them.
func warmImages(jobs []*managerv1.JobWithHistory, templates []string) []string {
	if len(templates) == 0 {
		return nil
	}
	var out []string
	for _, jh := range jobs {
		job := jh.GetJob()
		name := job.GetTags()[placement.TagTemplate]
		if _, _, bundleName, ok := placement.BundleJobOf(job); ok && name == "" {
			name = bundleName
		}
		if !slices.Contains(templates, name) && !slices.Contains(templates, job.GetJobId()) {
			continue
		}
		for _, s := range job.GetServices() {
			if ref := placement.NormalizeImageRef(s.GetImage()); ref != "" && !slices.Contains(out, ref) {
				out = append(out, ref)
			}
		}
	}
	sort.Strings(out)
	return out
}

// holdsImage reports whether the node holds the normalised ref.
func holdsImage(n *managerv1.Node, ref string) bool {
	for _, h := range n.GetHeldImages() {
		if placement.NormalizeImageRef(h.GetRef()) == ref {
			return true
		}
	}
	return false
}
