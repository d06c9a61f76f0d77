package placement

import (
	"encoding/binary"
	"math"
	"slices"
)

// The placement index (decision 0054). A placement without an explanation
// visits only candidates that can win, not every eligible node:
//
//   - Nodes alike in everything but their ID form a class, found once by
//     NewState. For a request shape the static rules are applied once per
//     class, not once per node; pin and exclusion, which name nodes by ID,
//     are applied to the nodes they name. A node no allocation holds is
//     judged as its class's empty node is, without reading its own state.
//   - A shape entry (one per request shape: what the static rules and the
//     dynamic rules read of a request, and what ranks nodes) holds every
//     node that passes the static rules with its current verdict under the
//     dynamic rules that depend on the node alone (capability, GPU, cores,
//     capacity, band), and the count of nodes per verdict, so the refusal
//     counts of a Result are read, not recounted.
//   - Within an entry, nodes are grouped by everything of the rank key
//     that is the same for a whole group: the static rank (tier, spare
//     preference, images), the spread attribute's value, and the zone and
//     cloud when FORBID sameAz / sameCloud can apply. Each group is a
//     segment tree over its nodes keyed by (static rank, CPU left after
//     placement, node index) — eligible nodes only — so its best node is
//     its root.
//   - A placement takes each group's root, adds the group's spread count
//     and anti-affinity bits, and keeps the best; the few nodes the
//     request's bundle names (co-location, separation, sameNode FORBID)
//     are masked out of the trees and judged one by one.
//
// Commit and Remove re-judge the one node they touch in every entry that
// holds it and update one leaf-to-root path per entry. The cost of a
// placement is thus the number of groups plus the bundle's peers, and of a
// commit the number of entries times the trees' depth; building an entry,
// on a shape's first placement, costs one static check per class and a
// constant per node.

// shapeEntry indexes the nodes that pass the static rules for one request
// shape (shapeKey).
type shapeEntry struct {
	need    need
	ceiling int64
	spread  *attrIndex // the spread attribute, nil without spread
	byZone  bool       // groups are split by zone (FORBID sameAz applies)
	byCloud bool       // and by cloud (FORBID sameCloud applies)

	refused [numRids]int // nodes the static rules refuse, by first rule
	counts  [numRids]int // indexed nodes by current verdict (ridNone: eligible)

	loc    []int32 // per State node: its position in pos plus one, 0 = not indexed
	pos    []indexed
	groups []group
	tree   []slot // every group's segment tree, one after another
}

// indexed is one node of an entry.
type indexed struct {
	ni   int32
	grp  int32
	leaf int32 // index of its leaf in tree
	rid  rid   // its verdict under the dynamic rules of the shape
}

// group is the nodes of an entry whose rank differs only by the CPU left
// and the node index (sameNode FORBID aside: it is judged per node).
type group struct {
	srank     rankKey // staticRank of its nodes
	tier      int32
	spreadVal int32  // the spread attribute's value, -1 = missing or no spread
	zone      string // "" unless the entry splits by zone
	cloud     string // "" unless it splits by cloud
	base      int32  // tree[base+1] is the root
	size      int32  // leaves, a power of two
}

type groupKey struct {
	srank       rankKey
	tier        int32
	spreadVal   int32
	zone, cloud string
}

// slot is a tree node: the best (smallest) key under it, ties to the
// lower node index.
type slot struct {
	k  rankKey
	ni int32
}

var noSlot = slot{k: math.MaxUint64, ni: math.MaxInt32}

func (a slot) less(b slot) bool { return a.k < b.k || (a.k == b.k && a.ni < b.ni) }

func minSlot(a, b slot) slot {
	if b.less(a) {
		return b
	}
	return a
}

// Entries are dropped all at once when there are too many, or when they
// index too many nodes between them (each costs a few tens of bytes per
// node, and every Commit visits every entry).
const (
	maxEntries = 1024
	maxIndexed = 1 << 22
)

// entryFor is the entry of p's shape, built on first use.
func (s *State) entryFor(p *prepared) *shapeEntry {
	s.keyBuf = appendShapeKey(s.keyBuf[:0], p)
	if e, ok := s.static[string(s.keyBuf)]; ok {
		return e
	}
	e := s.buildEntry(p)
	cost := len(s.nodes) + len(e.pos)
	if len(s.static) >= maxEntries || s.indexedCost+cost > maxIndexed {
		clear(s.static)
		s.indexedCost = 0
	}
	s.static[string(s.keyBuf)] = e
	s.indexedCost += cost
	return e
}

// appendShapeKey appends everything of a request an entry depends on:
// what the static rules, the static rank and the dynamic rules read, the
// spread attribute and which anti-affinity rules split the groups. Strings
// are written after their length and lists after theirs, so two shapes
// never share a key.
func appendShapeKey(b []byte, p *prepared) []byte {
	r := p.req
	str := func(v string) {
		b = binary.AppendUvarint(b, uint64(len(v)))
		b = append(b, v...)
	}
	num := func(v int64) { b = binary.AppendVarint(b, v) }
	flag := func(v bool) {
		if v {
			b = append(b, 1)
		} else {
			b = append(b, 0)
		}
	}
	str(r.PinNode)
	str(r.Pool)
	str(r.Template)
	flag(r.Recovery)
	flag(r.OverrideReservation)
	flag(len(p.runtime.noImage) > 0)
	flag(len(p.runtime.noCommand) > 0)
	num(int64(len(p.images)))
	for _, img := range p.images {
		str(img)
	}
	num(int64(len(p.selector)))
	for _, k := range p.selector {
		str(k)
		str(r.NodeSelector[k])
	}
	num(int64(len(p.need.caps)))
	for _, c := range p.need.caps {
		str(c.name)
		num(c.count)
	}
	str(p.need.gpuModel)
	num(p.need.gpu)
	num(int64(len(r.Exclude)))
	if len(r.Exclude) > 0 {
		ex := make([]string, 0, len(r.Exclude))
		for k := range r.Exclude {
			ex = append(ex, k)
		}
		slices.Sort(ex)
		for _, k := range ex {
			str(k)
		}
	}
	num(p.need.demand)
	num(p.need.cores)
	num(p.ceiling)
	flag(p.spread != nil)
	if p.spread != nil {
		str(r.Spread.Attribute)
	}
	flag(p.antiAffinity && p.forbidAz)
	flag(p.antiAffinity && p.forbidCloud)
	return b
}

// buildEntry indexes the nodes passing the static rules for p's shape.
func (s *State) buildEntry(p *prepared) *shapeEntry {
	req := p.req
	e := &shapeEntry{need: p.need, ceiling: p.ceiling, byZone: p.antiAffinity && p.forbidAz, byCloud: p.antiAffinity && p.forbidCloud}
	if p.spread != nil {
		e.spread = p.spread.attr
	}
	e.loc = make([]int32, len(s.nodes))
	// The class rules are judged on a request naming no node; pin and
	// exclusion are applied to the nodes they name, and the classes of
	// unavailable nodes are refused by exclusion whole, unjudged.
	anon := *req
	anon.PinNode, anon.Exclude = "", nil
	q := *p
	q.req = &anon

	classes := s.classes
	classID := func(ci int) int32 { return int32(ci) }
	if req.PinNode != "" {
		ni, ok := s.index[req.PinNode]
		if !ok {
			e.refused[ridPin] = len(s.nodes)
			return e
		}
		// Only the pinned node, as a class of its own.
		e.refused[ridPin] = len(s.nodes) - 1
		classes = []nodeClass{{rep: ni, nodes: []int32{ni}, unavailable: s.nodes[ni].Unavailable != ""}}
		classID = func(int) int32 { return s.classOf[ni] }
	}
	var excluded map[int32]int // class → nodes of it the request excludes
	for id := range req.Exclude {
		if ni, ok := s.index[id]; ok && (req.PinNode == "" || id == req.PinNode) && !s.classes[s.classOf[ni]].unavailable {
			if excluded == nil {
				excluded = map[int32]int{}
			}
			excluded[s.classOf[ni]]++
		}
	}

	// First the classes: their verdict under the static rules, their
	// group, and how many nodes each group gets.
	type passing struct {
		c   *nodeClass
		ex  int // excluded nodes of it
		grp int32
	}
	var pass []passing
	var sizes []int
	groupOf := map[groupKey]int32{}
	for ci := range classes {
		c := &classes[ci]
		if c.unavailable {
			e.refused[ridExclusion] += len(c.nodes)
			continue
		}
		ex := excluded[classID(ci)]
		e.refused[ridExclusion] += ex
		if r := s.staticCheck(c.rep, &q, nil); r != ridNone {
			e.refused[r] += len(c.nodes) - ex
			continue
		}
		n := &s.nodes[c.rep]
		tier := int32(p.tier(n))
		k := groupKey{srank: staticRank(tier, spareRank(&n.Node, p), req.Recovery, missingImages(&n.Node, p)), tier: tier, spreadVal: -1}
		if e.spread != nil {
			k.spreadVal = e.spread.at(c.rep)
		}
		if e.byZone {
			k.zone = n.Zone
		}
		if e.byCloud {
			k.cloud = n.Cloud
		}
		g, ok := groupOf[k]
		if !ok {
			g = int32(len(e.groups))
			groupOf[k] = g
			e.groups = append(e.groups, group{srank: k.srank, tier: k.tier, spreadVal: k.spreadVal, zone: k.zone, cloud: k.cloud})
			sizes = append(sizes, 0)
		}
		sizes[g] += len(c.nodes) - ex
		pass = append(pass, passing{c: c, ex: ex, grp: g})
	}

	// Then the trees, one after another, and the nodes in their leaves.
	total, nIndexed := 0, 0
	for g := range e.groups {
		size := int32(1)
		for int(size) < sizes[g] {
			size <<= 1
		}
		e.groups[g].base, e.groups[g].size = int32(total), size
		total += 2 * int(size)
		nIndexed += sizes[g]
	}
	e.tree = make([]slot, total)
	e.pos = make([]indexed, 0, nIndexed)
	fill := make([]int32, len(e.groups)) // leaves filled per group
	for _, pc := range pass {
		gr := &e.groups[pc.grp]
		// A node no allocation holds is as its class's pristine node is.
		pristine := s.pristineRid(pc.c.rep, e)
		pristineKey := s.pristineKey(pc.c.rep, e, gr)
		for _, ni := range pc.c.nodes {
			if pc.ex > 0 {
				if _, out := req.Exclude[s.nodes[ni].ID]; out {
					continue
				}
			}
			e.loc[ni] = int32(len(e.pos)) + 1
			rec := indexed{ni: ni, grp: pc.grp, leaf: gr.base + gr.size + fill[pc.grp]}
			fill[pc.grp]++
			if s.allocsOn[ni] == 0 {
				rec.rid = pristine
				if rec.rid == ridNone {
					e.tree[rec.leaf] = slot{k: pristineKey, ni: ni}
				} else {
					e.tree[rec.leaf] = noSlot
				}
			} else {
				rec.rid = s.shapeRid(ni, e)
				e.tree[rec.leaf] = s.leafSlot(e, &rec)
			}
			e.counts[rec.rid]++
			e.pos = append(e.pos, rec)
		}
	}
	for g := range e.groups {
		gr := &e.groups[g]
		for j := gr.base + gr.size + fill[g]; j < gr.base+2*gr.size; j++ {
			e.tree[j] = noSlot
		}
		for j := gr.size - 1; j >= 1; j-- {
			e.tree[gr.base+j] = minSlot(e.tree[gr.base+2*j], e.tree[gr.base+2*j+1])
		}
	}
	return e
}

// pristineRid is shapeRid for a node of ni's class that no allocation
// holds: all its capacity free. Its class passed the static rules, so its
// capabilities and a GPU suffice when free.
func (s *State) pristineRid(ni int32, e *shapeEntry) rid {
	h := &s.hot[ni]
	nd := &e.need
	switch {
	case nd.cores > 0 && nd.cores > h.cores:
		return ridCores
	case nd.demand > h.cpuCap:
		return ridCapacity
	case e.ceiling < 100 && nd.demand*100 > h.cpuCap*e.ceiling:
		return ridBand
	}
	return ridNone
}

// pristineKey is leafSlot's key for such a node.
func (s *State) pristineKey(ni int32, e *shapeEntry, g *group) rankKey {
	return g.srank | remainingKey(s.hot[ni].cpuCap, e.need.demand)
}

// shapeRid is dynamicCheck's first refusal for a node that passed the
// static rules, without co-location and separation (which depend on the
// request's peers, not its shape).
func (s *State) shapeRid(ni int32, e *shapeEntry) rid {
	h := &s.hot[ni]
	nd := &e.need
	base := int(ni) * s.ncap
	for _, c := range nd.caps {
		if c.consume && c.id >= 0 && s.capFree[base+int(c.id)] < c.count {
			return ridCapability
		}
	}
	if nd.gpu > 0 && s.nodes[ni].fitGPU(*nd) < 0 {
		return ridGPU
	}
	if nd.cores > 0 && h.coresUsed+nd.cores > h.cores {
		return ridCores
	}
	if h.cpuUsed+nd.demand > h.cpuCap {
		return ridCapacity
	}
	if e.ceiling < 100 && (h.cpuUsed+nd.demand)*100 > h.cpuCap*e.ceiling {
		return ridBand
	}
	return ridNone
}

// leafSlot is the tree leaf of an indexed node: its static rank and CPU
// left after placement when it is eligible for the shape, else empty.
func (s *State) leafSlot(e *shapeEntry, rec *indexed) slot {
	if rec.rid != ridNone {
		return noSlot
	}
	h := &s.hot[rec.ni]
	return slot{k: e.groups[rec.grp].srank | remainingKey(h.cpuCap-h.cpuUsed, e.need.demand), ni: rec.ni}
}

// setLeaf writes a leaf and the minima above it.
func (e *shapeEntry) setLeaf(rec *indexed, v slot) {
	base := e.groups[rec.grp].base
	e.tree[rec.leaf] = v
	for j := (rec.leaf - base) >> 1; j >= 1; j >>= 1 {
		m := minSlot(e.tree[base+2*j], e.tree[base+2*j+1])
		if e.tree[base+j] == m {
			break
		}
		e.tree[base+j] = m
	}
}

// touch re-judges node ni in every entry after its allocations changed.
func (s *State) touch(ni int32) {
	for _, e := range s.static {
		p := e.loc[ni] - 1
		if p < 0 {
			continue
		}
		rec := &e.pos[p]
		r := s.shapeRid(ni, e)
		e.counts[rec.rid]--
		e.counts[r]++
		rec.rid = r
		e.setLeaf(rec, s.leafSlot(e, rec))
	}
}

// choice is the best node found so far, by (rank key, node index).
type choice struct {
	ni   int32 // -1: none yet
	key  rankKey
	tier int32
}

func (c *choice) offer(ni int32, k rankKey, tier int32) {
	if c.ni < 0 || k < c.key || (k == c.key && ni < c.ni) {
		c.ni, c.key, c.tier = ni, k, tier
	}
}

// placeIndexed finds p's node from the index: the refusal counts, the
// number of eligible nodes and the best of them.
func (s *State) placeIndexed(p *prepared) (refused [numRids]int, eligible int, best choice) {
	e := s.entryFor(p)
	best.ni = -1
	refused = e.refused
	for r := ridCapability; r <= ridBand; r++ {
		refused[r] += e.counts[r]
	}
	eligible = e.counts[ridNone]
	// at is the position of node ni when it is eligible for the shape.
	at := func(ni int32) (int32, bool) {
		if ni < 0 {
			return -1, false
		}
		i := e.loc[ni] - 1
		return i, i >= 0 && e.pos[i].rid == ridNone
	}
	separated := func(ni int32) bool {
		return slices.ContainsFunc(p.separate, func(pe peer) bool { return pe.node == ni })
	}

	if len(p.coLocate) > 0 {
		// Only the node every co-located peer runs on can take the job.
		t := p.coLocate[0].node
		for _, pe := range p.coLocate[1:] {
			if pe.node != t {
				t = -1
			}
		}
		i, ok := at(t)
		if !ok {
			refused[ridCoLocate] += eligible
			return refused, 0, best
		}
		refused[ridCoLocate] += eligible - 1
		if separated(t) {
			refused[ridSeparate]++
			return refused, 0, best
		}
		g := &e.groups[e.pos[i].grp]
		best.offer(t, s.rank(t, p, g.srank), g.tier)
		return refused, 1, best
	}

	// Nodes the bundle names are taken out of the trees: those a
	// separated peer runs on are refused, those another replica runs on
	// (sameNode FORBID) are ranked one by one.
	var masked []int32
	mask := func(ni int32) bool {
		i, ok := at(ni)
		if !ok || slices.Contains(masked, i) {
			return false
		}
		masked = append(masked, i)
		e.setLeaf(&e.pos[i], noSlot)
		return true
	}
	for _, pe := range p.separate {
		if mask(pe.node) {
			refused[ridSeparate]++
			eligible--
		}
	}
	nSeparated := len(masked)
	if p.antiAffinity && p.forbidNode {
		for _, o := range p.others {
			mask(o.node)
		}
	}
	for _, i := range masked[nSeparated:] {
		ni := e.pos[i].ni
		g := &e.groups[e.pos[i].grp]
		best.offer(ni, s.rank(ni, p, g.srank), g.tier)
	}
	for gi := range e.groups {
		g := &e.groups[gi]
		root := e.tree[g.base+1]
		if root.ni == noSlot.ni {
			continue
		}
		k := root.k
		if e.spread != nil {
			spread := int32(maxSpread)
			if g.spreadVal >= 0 {
				spread = min(p.spread.counts[g.spreadVal], maxSpread)
			}
			k |= rankKey(spread) << 31
		}
		if e.byZone || e.byCloud {
			k |= rankKey(s.groupViolations(g, p)) << 61
		}
		best.offer(root.ni, k, g.tier)
	}
	for _, i := range masked {
		rec := &e.pos[i]
		e.setLeaf(rec, s.leafSlot(e, rec))
	}
	return refused, eligible, best
}

// groupViolations is the sameAz and sameCloud bits of violations for the
// nodes of g (sameNode is judged per node).
func (s *State) groupViolations(g *group, p *prepared) int8 {
	var v int8
	for _, o := range p.others {
		on := &s.nodes[o.node]
		if p.forbidAz && g.zone != "" && on.Zone == g.zone {
			v |= 2
		}
		if p.forbidCloud && g.cloud != "" && on.Cloud == g.cloud {
			v |= 1
		}
	}
	return v
}
