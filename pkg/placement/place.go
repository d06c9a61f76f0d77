package placement

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// rid is a hard rule's position in ruleOrder, plus one (0 = no refusal).
type rid uint8

const (
	ridNone rid = iota
	ridPin
	ridExclusion
	ridPool
	ridSelector
	ridRuntime
	ridSpare
	ridCapability
	ridGPU
	ridCores
	ridCapacity
	ridBand
	ridCoLocate
	ridSeparate
	numRids
)

func (r rid) rule() Rule { return ruleOrder[r-1] }

// Place places one request against nodes and the allocations already bound.
// It is the package's whole contract in one call; see State.Place.
func Place(cfg Config, nodes []Node, allocs []Allocation, req Request) (Result, error) {
	s, err := NewState(cfg, nodes, allocs)
	if err != nil {
		return Result{Tier: -1, GPU: -1}, err
	}
	return s.Place(req)
}

// Allocation is the binding of r as placed by res, as Commit takes it.
func (r Request) Allocation(res Result) Allocation {
	a := Allocation{
		JobID: r.JobID, Role: r.Role, NodeID: res.NodeID, GPU: res.GPU, Template: r.Template, Requirements: r.Requirements,
		BundleID: r.BundleID, ReplicaIndex: r.ReplicaIndex, JobName: r.JobName,
		CoLocateWith: r.CoLocateWith, SeparateFrom: r.SeparateFrom,
	}
	if r.Spread != nil {
		a.SpreadGroup = r.spreadGroup()
	}
	return a
}

func (r *Request) spreadGroup() string {
	switch {
	case r.Spread.Group != "":
		return r.Spread.Group
	case r.BundleID != "":
		return r.BundleID
	default:
		return "pool:" + r.Pool
	}
}

// PlaceBatch places requests in order, committing each placed one before
// the next is considered, so later requests see earlier bindings. It stops
// at the first invalid request, returning the results so far and the error.
func (s *State) PlaceBatch(reqs []Request) ([]Result, error) {
	out := make([]Result, 0, len(reqs))
	for i := range reqs {
		res, err := s.Place(reqs[i])
		if err != nil {
			return out, fmt.Errorf("request %d (%s/%s): %w", i, reqs[i].JobID, reqs[i].Role, err)
		}
		if res.NodeID != "" {
			if err := s.Commit(reqs[i].Allocation(res)); err != nil {
				return out, fmt.Errorf("request %d (%s/%s): %w", i, reqs[i].JobID, reqs[i].Role, err)
			}
		}
		out = append(out, res)
	}
	return out, nil
}

// peer is a placed job of the request's bundle.
type peer struct {
	name    string
	replica int
	node    int32
	nodeID  string
}

// prepared is a request with its requirements converted and its bundle
// context gathered: everything placement reads besides the nodes.
type prepared struct {
	req      *Request
	need     need
	ceiling  int64 // percent
	tiers    map[string]int
	tierList []string
	selector []string // sorted keys of NodeSelector
	runtime  runtimeNeed
	images   []string // the services' distinct image refs, sorted
	spread   *spreadTable

	forbidNode, forbidAz, forbidCloud bool
	antiAffinity                      bool   // some FORBID and some other replica placed
	others                            []peer // jobs of other replicas
	coLocate                          []peer // same replica, co-locate relation
	separate                          []peer // same replica, separate relation
}

func (s *State) prepare(req *Request) (*prepared, error) {
	nd, err := s.need(req.Requirements)
	if err != nil {
		return nil, err
	}
	p := &prepared{req: req, need: nd, ceiling: 100}
	if c, ok := s.cfg.BandCeilings[req.Requirements.PriorityBand]; ok && c >= 0 && c < 100 {
		p.ceiling = int64(c)
	}
	if req.Pool != "" {
		p.tierList = s.cfg.Pools[req.Pool]
		if len(p.tierList) == 0 {
			p.tierList = []string{req.Pool}
		}
		p.tiers = make(map[string]int, len(p.tierList))
		for i, t := range p.tierList {
			if _, dup := p.tiers[t]; !dup {
				p.tiers[t] = i
			}
		}
	}
	for k := range req.NodeSelector {
		p.selector = append(p.selector, k)
	}
	slices.Sort(p.selector)
	p.runtime = runtimeNeedOf(req.Services)
	for _, sv := range req.Services {
		if sv.ImageRef != "" && !slices.Contains(p.images, sv.ImageRef) {
			p.images = append(p.images, sv.ImageRef)
		}
	}
	slices.Sort(p.images)
	if req.Spread != nil && req.Spread.Attribute != "" {
		p.spread = s.spreadTable(req.spreadGroup(), req.Spread.Attribute)
	}
	p.forbidNode = req.AntiAffinity.SameNode == Forbid
	p.forbidAz = req.AntiAffinity.SameAz == Forbid
	p.forbidCloud = req.AntiAffinity.SameCloud == Forbid
	if req.BundleID != "" {
		for _, idx := range s.byBundle[req.BundleID] {
			r := &s.allocs[idx]
			if !r.alive || r.a.JobID == req.JobID {
				continue
			}
			pe := peer{name: r.a.JobName, replica: r.a.ReplicaIndex, node: r.node, nodeID: r.a.NodeID}
			if r.a.ReplicaIndex != req.ReplicaIndex {
				if r.node >= 0 {
					p.others = append(p.others, pe)
				}
				continue
			}
			if req.JobName == "" || r.a.JobName == "" {
				continue
			}
			if slices.Contains(req.CoLocateWith, r.a.JobName) || slices.Contains(r.a.CoLocateWith, req.JobName) {
				p.coLocate = append(p.coLocate, pe)
			}
			if slices.Contains(req.SeparateFrom, r.a.JobName) || slices.Contains(r.a.SeparateFrom, req.JobName) {
				p.separate = append(p.separate, pe)
			}
		}
	}
	p.antiAffinity = len(p.others) > 0 && (p.forbidNode || p.forbidAz || p.forbidCloud)
	return p, nil
}

// tier is the node's tier for p, -1 when outside the pool.
func (p *prepared) tier(n *nodeState) int {
	if p.tiers == nil {
		return 0
	}
	if t, ok := p.tiers[n.Pool]; ok {
		return t
	}
	return -1
}

// staticCheck applies the rules that depend on the node's description, not
// on what runs on it. With out nil it stops at the first refusal without
// formatting; otherwise it appends every refusal.
func (s *State) staticCheck(ni int32, p *prepared, out *[]Refusal) rid {
	n := &s.nodes[ni]
	req := p.req
	first := ridNone
	fail := func(r rid, reason string) {
		if first == ridNone {
			first = r
		}
		*out = append(*out, Refusal{Rule: r.rule(), Reason: reason})
	}
	if req.PinNode != "" && n.ID != req.PinNode {
		if out == nil {
			return ridPin
		}
		fail(ridPin, fmt.Sprintf("not the pinned target %q", req.PinNode))
	}
	why, ok := req.Exclude[n.ID]
	if !ok && n.Unavailable != "" {
		why, ok = n.Unavailable, true
	}
	if ok {
		if out == nil {
			return ridExclusion
		}
		if why == "" {
			why = "excluded by the caller"
		}
		fail(ridExclusion, "excluded: "+why)
	}
	if p.tier(n) < 0 {
		if out == nil {
			return ridPool
		}
		fail(ridPool, fmt.Sprintf("node pool %q is not a tier of pool %q (tiers %s)", n.Pool, req.Pool, strings.Join(p.tierList, ", ")))
	}
	for _, k := range p.selector {
		want := req.NodeSelector[k]
		if have, ok := n.Attributes[k]; !ok || have != want {
			if out == nil {
				return ridSelector
			}
			if !ok {
				fail(ridSelector, fmt.Sprintf("has no attribute %q (want %q)", k, want))
			} else {
				fail(ridSelector, fmt.Sprintf("attribute %s=%q, want %q", k, have, want))
			}
		}
	}
	if p.runtime.refuses(n.Runtime) {
		if out == nil {
			return ridRuntime
		}
		fail(ridRuntime, p.runtime.why(n.Runtime))
	}
	if n.Spare.Enabled && n.Spare.Exclusive && !req.OverrideReservation && !slices.Contains(n.Spare.ReservedFor, req.Template) {
		if out == nil {
			return ridSpare
		}
		fail(ridSpare, fmt.Sprintf("exclusive hot spare reserved for [%s]; template %q is not among them and the request does not override the reservation",
			strings.Join(n.Spare.ReservedFor, ", "), req.Template))
	}
	for _, c := range p.need.caps {
		if have := s.capCount(s.capTotal, ni, c.id); have < c.count {
			if out == nil {
				return ridCapability
			}
			fail(ridCapability, fmt.Sprintf("advertises %d of capability %q, the job needs %d", have, c.name, c.count))
		}
	}
	if p.need.gpu > 0 {
		ok := false
		for i := range n.gpuCap {
			if gpuModelMatches(n.GPUs[i].Model, p.need.gpuModel) && n.gpuCap[i] >= p.need.gpu {
				ok = true
				break
			}
		}
		if !ok {
			if out == nil {
				return ridGPU
			}
			fail(ridGPU, fmt.Sprintf("no GPU%s with capacity %s (has %s)", modelPhrase(p.need.gpuModel), units(p.need.gpu), gpuList(n)))
		}
	}
	return first
}

// dynamicCheck applies the rules that depend on the node's allocations.
func (s *State) dynamicCheck(ni int32, p *prepared, out *[]Refusal) rid {
	n, h := &s.nodes[ni], &s.hot[ni]
	nd := &p.need
	first := ridNone
	fail := func(r rid, reason string) {
		if first == ridNone {
			first = r
		}
		*out = append(*out, Refusal{Rule: r.rule(), Reason: reason})
	}
	for _, c := range nd.caps {
		if !c.consume {
			continue
		}
		total := s.capCount(s.capTotal, ni, c.id)
		if free := s.capCount(s.capFree, ni, c.id); free < c.count && total >= c.count {
			if out == nil {
				return ridCapability
			}
			fail(ridCapability, fmt.Sprintf("%d of %d %q free, the job needs %d", max(free, 0), total, c.name, c.count))
		}
	}
	if nd.gpu > 0 && n.fitGPU(*nd) < 0 && s.staticGPU(n, nd) {
		if out == nil {
			return ridGPU
		}
		fail(ridGPU, fmt.Sprintf("no GPU%s has %s free (has %s)", modelPhrase(nd.gpuModel), units(nd.gpu), gpuFree(n)))
	}
	if nd.cores > 0 && h.coresUsed+nd.cores > h.cores {
		if out == nil {
			return ridCores
		}
		fail(ridCores, fmt.Sprintf("%d of %d cores free for exclusive use, the job needs %d", max(h.cores-h.coresUsed, 0), h.cores, nd.cores))
	}
	if h.cpuUsed+nd.demand > h.cpuCap {
		if out == nil {
			return ridCapacity
		}
		fail(ridCapacity, fmt.Sprintf("%s of %s reference units free (%d vCPUs), the job needs %s",
			units(max(h.cpuCap-h.cpuUsed, 0)), units(h.cpuCap), n.VCPUs, units(nd.demand)))
	}
	if p.ceiling < 100 && (h.cpuUsed+nd.demand)*100 > h.cpuCap*p.ceiling {
		if out == nil {
			return ridBand
		}
		reach := int64(100)
		if h.cpuCap > 0 {
			reach = (h.cpuUsed + nd.demand) * 100 / h.cpuCap
		}
		fail(ridBand, fmt.Sprintf("priority band %q may fill a node to %d%% of its capacity; placing the job would reach %d%%",
			p.req.Requirements.PriorityBand, p.ceiling, reach))
	}
	for _, pe := range p.coLocate {
		if pe.node != ni {
			if out == nil {
				return ridCoLocate
			}
			fail(ridCoLocate, fmt.Sprintf("must run with job %q of replica %d, which runs on %s", pe.name, pe.replica, pe.nodeID))
		}
	}
	for _, pe := range p.separate {
		if pe.node == ni {
			if out == nil {
				return ridSeparate
			}
			fail(ridSeparate, fmt.Sprintf("must not run with job %q of replica %d, which runs here", pe.name, pe.replica))
		}
	}
	return first
}

// capCount reads node ni's entry of capability id in table (0 for a
// capability no node has).
func (s *State) capCount(table []int64, ni, id int32) int64 {
	if id < 0 {
		return 0
	}
	return table[int(ni)*s.ncap+int(id)]
}

// staticGPU reports whether some GPU could hold nd when empty (so a dynamic
// GPU refusal is not reported twice).
func (s *State) staticGPU(n *nodeState, nd *need) bool {
	for i := range n.gpuCap {
		if gpuModelMatches(n.GPUs[i].Model, nd.gpuModel) && n.gpuCap[i] >= nd.gpu {
			return true
		}
	}
	return false
}

// rankKey orders eligible nodes; smaller is better, and ties go to the
// lower node ID (nodes are scanned in ID order and only a strictly better
// key replaces the best). It packs, most significant first:
//
//	violations  3 bits  FORBID breaks: sameNode 4 | sameAz 2 | sameCloud 1
//	spareFirst  2 bits  recovery only: spare for the template 0, other spare 1, not a spare 2
//	tier        8 bits  pool tier, cheapest first (tiers past 255 rank as 255)
//	spareLast   2 bits  ordinary placement: not a spare 0, spare for the template 1, other spare 2
//	spread     18 bits  jobs of the spread group on the node's attribute value
//	images      3 bits  the job's images the node does not hold (a pull each)
//	remaining  28 bits  CPU milli-units left after placement (best fit)
//
// Spread counts and capacities past their widths saturate.
type rankKey uint64

const (
	maxSpread    = 1<<18 - 1
	maxMissing   = 1<<3 - 1
	maxRemaining = 1<<28 - 1
)

// remainingKey is the best-fit part of a rank key: the CPU a node would
// have left, free less demand (never below zero; saturating).
func remainingKey(free, demand int64) rankKey {
	return rankKey(min(max(free-demand, 0), maxRemaining))
}

// staticRank is the part of the key fixed by the node's description.
func staticRank(tier int32, spare int8, recovery bool, missing int) rankKey {
	k := rankKey(min(max(tier, 0), 255))<<51 | rankKey(min(max(missing, 0), maxMissing))<<28
	if recovery {
		return k | rankKey(spare)<<59
	}
	return k | rankKey(spare)<<49
}

func spareRank(n *Node, p *prepared) int8 {
	forT := p.req.Template != "" && (slices.Contains(n.Spare.WarmFor, p.req.Template) || slices.Contains(n.Spare.ReservedFor, p.req.Template))
	switch {
	case !n.Spare.Enabled && p.req.Recovery:
		return 2
	case !n.Spare.Enabled:
		return 0
	case forT:
		if p.req.Recovery {
			return 0
		}
		return 1
	case p.req.Recovery:
		return 1
	default:
		return 2
	}
}

// missingImages is how many of the job's images the node does not hold
// (0 on a process node, which pulls none).
func missingImages(n *Node, p *prepared) int {
	if len(p.images) == 0 || n.Runtime == RuntimeProcess {
		return 0
	}
	miss := 0
	for _, img := range p.images {
		if !slices.Contains(n.Images, img) {
			miss++
		}
	}
	return miss
}

func (s *State) violations(ni int32, p *prepared) int8 {
	if !p.antiAffinity {
		return 0
	}
	n := &s.nodes[ni]
	var v int8
	for _, o := range p.others {
		on := &s.nodes[o.node]
		if p.forbidNode && o.node == ni {
			v |= 4
		}
		if p.forbidAz && n.Zone != "" && on.Zone == n.Zone {
			v |= 2
		}
		if p.forbidCloud && n.Cloud != "" && on.Cloud == n.Cloud {
			v |= 1
		}
	}
	return v
}

func (s *State) rank(ni int32, p *prepared, static rankKey) rankKey {
	k := static
	if p.antiAffinity {
		k |= rankKey(s.violations(ni, p)) << 61
	}
	if p.spread != nil {
		spread := int32(maxSpread)
		if v := p.spread.attr.at(ni); v >= 0 {
			spread = min(p.spread.counts[v], maxSpread)
		}
		k |= rankKey(spread) << 31
	}
	h := &s.hot[ni]
	return k | remainingKey(h.cpuCap-h.cpuUsed, p.need.demand)
}

// Place chooses a node for req given the State's nodes and allocations,
// without changing the State (Commit binds the choice). The choice is a
// pure function of the State's content and req: it does not depend on the
// order nodes or allocations were given in, nor on Request.Explain.
//
// A node is eligible when it passes every hard rule (pin, exclusion, pool,
// selector, runtime, spare, capability, GPU, cores, capacity, priority band,
// co-location, separation). Among eligible nodes the best rankKey wins:
// fewest broken FORBID rules (sameNode before sameAz before sameCloud),
// then for recovery hot spares first, then the cheapest tier, then
// (ordinary placement) non-spares first, then the least-used spread value,
// then best fit (least CPU left), then the lowest node ID. The error is
// for invalid requirements only.
//
// Without Request.Explain the choice and the refusal counts are read from
// the State's index for the request's shape (index.go), built on the
// shape's first placement; with it every node is checked and explained.
func (s *State) Place(req Request) (Result, error) {
	p, err := s.prepare(&req)
	if err != nil {
		return Result{Tier: -1, GPU: -1}, err
	}
	res := Result{Tier: -1, GPU: -1}
	var refused [numRids]int
	best := int32(-1)
	var bestKey rankKey
	bestTier := int32(-1)
	consider := func(ni, tier int32, static rankKey) {
		res.Eligible++
		k := s.rank(ni, p, static)
		if best < 0 || k < bestKey {
			best, bestKey, bestTier = ni, k, tier
		}
	}
	var verdicts []NodeVerdict
	if req.Explain {
		verdicts = make([]NodeVerdict, len(s.nodes))
		for i := range s.nodes {
			ni := int32(i)
			n := &s.nodes[i]
			v := NodeVerdict{NodeID: n.ID, Tier: p.tier(n)}
			var refs []Refusal
			r := s.staticCheck(ni, p, &refs)
			if d := s.dynamicCheck(ni, p, &refs); r == ridNone {
				r = d
			}
			slices.SortStableFunc(refs, func(a, b Refusal) int { return cmp.Compare(ruleIndex(a.Rule), ruleIndex(b.Rule)) })
			v.Refusals = refs
			if r != ridNone {
				refused[r]++
			} else {
				consider(ni, int32(v.Tier), staticRank(int32(v.Tier), spareRank(&n.Node, p), req.Recovery, missingImages(&n.Node, p)))
			}
			verdicts[i] = v
		}
	} else {
		var c choice
		refused, res.Eligible, c = s.placeIndexed(p)
		best, bestTier = c.ni, c.tier
	}
	for r := ridPin; r < numRids; r++ {
		if refused[r] > 0 {
			res.Refused = append(res.Refused, RuleCount{Rule: r.rule(), Nodes: refused[r]})
		}
	}
	if best < 0 {
		res.Reason = ReasonNoCapacity
	} else {
		res.NodeID = s.nodes[best].ID
		res.Tier = int(bestTier)
		if p.need.gpu > 0 {
			res.GPU = int(s.nodes[best].fitGPU(p.need))
		}
		res.Degradations = s.degradations(best, p)
	}
	if req.Explain {
		for i := range verdicts {
			if len(verdicts[i].Refusals) == 0 {
				verdicts[i].Chosen = int32(i) == best
				verdicts[i].Notes = s.notes(int32(i), p)
			}
		}
		res.Explanation = &Explanation{Nodes: verdicts}
	}
	return res, nil
}

func ruleIndex(r Rule) int { return slices.Index(ruleOrder, r) }

// breaches lists, for node ni, the FORBID rules it breaks and why.
func (s *State) breaches(ni int32, p *prepared) []Degradation {
	v := s.violations(ni, p)
	if v == 0 {
		return nil
	}
	n := &s.nodes[ni]
	var out []Degradation
	add := func(bit int8, rule Rule, what func(o peer) bool, where string) {
		if v&bit == 0 {
			return
		}
		for _, o := range p.others {
			if what(o) {
				out = append(out, Degradation{Rule: rule, Reason: fmt.Sprintf("%s job %q of replica %d (on %s)", where, o.name, o.replica, o.nodeID)})
				return
			}
		}
	}
	add(4, RuleSameNode, func(o peer) bool { return o.node == ni }, "node "+n.ID+" also runs")
	add(2, RuleSameAz, func(o peer) bool { return s.nodes[o.node].Zone == n.Zone }, "zone "+n.Zone+" also runs")
	add(1, RuleSameCloud, func(o peer) bool { return s.nodes[o.node].Cloud == n.Cloud }, "cloud "+n.Cloud+" also runs")
	return out
}

func (s *State) degradations(ni int32, p *prepared) []Degradation {
	ds := s.breaches(ni, p)
	for i := range ds {
		ds[i].Reason = "no eligible node complies with FORBID; " + ds[i].Reason
	}
	return ds
}

// notes describes how an eligible node ranked.
func (s *State) notes(ni int32, p *prepared) []string {
	n, h := &s.nodes[ni], &s.hot[ni]
	var out []string
	for _, d := range s.breaches(ni, p) {
		out = append(out, fmt.Sprintf("breaks FORBID %s: %s", d.Rule, d.Reason))
	}
	if n.Spare.Enabled {
		switch spareRank(&n.Node, p) {
		case 0:
			out = append(out, "hot spare for this template, preferred for recovery")
		case 1:
			if p.req.Recovery {
				out = append(out, "hot spare, preferred for recovery")
			} else {
				out = append(out, "hot spare for this template, used after ordinary nodes")
			}
		default:
			out = append(out, "hot spare, used after ordinary nodes")
		}
	}
	if len(p.images) > 0 && n.Runtime != RuntimeProcess {
		switch miss := missingImages(&n.Node, p); {
		case miss == 0 && len(p.images) == 1:
			out = append(out, "holds the job's image "+p.images[0]+": no pull")
		case miss == 0:
			out = append(out, fmt.Sprintf("holds all %d of the job's images: no pull", len(p.images)))
		default:
			out = append(out, fmt.Sprintf("holds %d of the job's %d images: %d to pull, ranked below nodes that hold more", len(p.images)-miss, len(p.images), miss))
		}
	}
	if p.spread != nil {
		if v := p.spread.attr.at(ni); v >= 0 {
			out = append(out, fmt.Sprintf("spread: %s=%q holds %d of the group's jobs", p.req.Spread.Attribute, p.spread.attr.names[v], p.spread.counts[v]))
		} else {
			out = append(out, fmt.Sprintf("spread: no attribute %q, ranked last", p.req.Spread.Attribute))
		}
	}
	out = append(out, fmt.Sprintf("%s of %s reference units left after placement", units(h.cpuCap-h.cpuUsed-p.need.demand), units(h.cpuCap)))
	return out
}

func units(milli int64) string { return strconv.FormatFloat(float64(milli)/1000, 'f', -1, 64) }

func modelPhrase(model string) string {
	if model == "" {
		return ""
	}
	return fmt.Sprintf(" of model %q", model)
}

func gpuList(n *nodeState) string {
	if len(n.gpuCap) == 0 {
		return "no GPUs"
	}
	parts := make([]string, len(n.gpuCap))
	for i := range n.gpuCap {
		parts[i] = fmt.Sprintf("%q %s", n.GPUs[i].Model, units(n.gpuCap[i]))
	}
	return strings.Join(parts, ", ")
}

func gpuFree(n *nodeState) string {
	parts := make([]string, len(n.gpuCap))
	for i := range n.gpuCap {
		parts[i] = fmt.Sprintf("%q %s free", n.GPUs[i].Model, units(max(n.gpuCap[i]-n.gpuUsed[i], 0)))
	}
	return strings.Join(parts, ", ")
}

// Breaches lists the FORBID anti-affinity rules req breaks on node nodeID
// against the other replicas of its bundle as the State holds them, as if
// it were placed there (its own allocations do not count): what a bound
// replica's node breaks now, for the AutoManager's repairs. Only the
// bundle's rules are read; whether the node has room is not asked. The
// error is for an unknown node or invalid requirements.
func (s *State) Breaches(req Request, nodeID string) ([]Degradation, error) {
	ni, ok := s.index[nodeID]
	if !ok {
		return nil, fmt.Errorf("placement: no node %q", nodeID)
	}
	p, err := s.prepare(&req)
	if err != nil {
		return nil, err
	}
	return s.breaches(ni, p), nil
}

// Severity ranks a set of broken FORBID rules as placement ranks nodes:
// sameNode 4, sameAz 2, sameCloud 1, summed once per rule; lower is better
// and 0 is compliant. A node of lower severity is preferred to any node of
// higher, whatever else differs.
func Severity(ds []Degradation) int {
	v := 0
	for _, d := range ds {
		switch d.Rule {
		case RuleSameNode:
			v |= 4
		case RuleSameAz:
			v |= 2
		case RuleSameCloud:
			v |= 1
		}
	}
	return v
}
