package placement

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
)

// State is a set of nodes and the allocations bound to them, indexed for
// placement. It is built once (NewState), then placements read it (Place)
// and bindings update it incrementally (Commit, Remove): no call rescans
// every allocation. It may be kept for as long as its nodes do not change
// (the AutoManager keeps one across passes): what it answers depends only
// on its nodes and the set of allocations bound, never on the order they
// were committed and removed in, and the room a removed allocation held is
// reused. A State is not safe for concurrent use; give each goroutine its
// own.
type State struct {
	cfg   Config
	unit  int64 // milli reference units per vCPU
	nodes []nodeState
	hot   []hotNode
	index map[string]int32

	// Capabilities are numbered; node ni's count of capability c is at
	// ni*ncap+c.
	capIdx            map[string]int32
	ncap              int
	capTotal, capFree []int64 // capFree = capTotal - what allocations hold

	allocs   []allocRec
	free     []int32 // indexes of allocs that Remove left dead, for Commit to reuse
	journal  []undo  // non-nil while a savepoint is open (savepoint.go)
	byKey    map[allocKey]int32
	byBundle map[string][]int32 // each in (JobID, Role) order (sortedInsert)
	byGroup  map[string][]int32

	attrs         map[string]*attrIndex
	spreadByGroup map[string][]*spreadTable
	spreadTables  map[[2]string]*spreadTable

	// classes group the nodes alike for the static rules (classOf: each
	// node's); static holds an index entry per request shape, indexedCost
	// what they hold between them (index.go).
	classes     []nodeClass
	classOf     []int32
	static      map[string]*shapeEntry
	indexedCost int
	keyBuf      []byte  // scratch for shape keys
	allocsOn    []int32 // per node: live allocations bound to it
}

type allocKey struct{ job, role string }

type nodeState struct {
	Node
	gpuCap, gpuUsed []int64
}

// hotNode is the part of a node every placement reads, kept apart and
// small so a scan over thousands of nodes stays in cache.
type hotNode struct {
	cpuCap, cpuUsed  int64
	cores, coresUsed int64
}

type allocRec struct {
	a     Allocation
	node  int32 // -1: the node is not in this State
	need  need
	gpu   int32 // GPU index the allocation holds, -1 none
	alive bool
}

// need is a Requirements in integer milli units.
type need struct {
	demand   int64 // CPU, milli reference units: max(capacity, cores × unit)
	capacity int64
	cores    int64
	gpu      int64
	gpuModel string
	caps     []capNeed // sorted by name, duplicates merged
}

type capNeed struct {
	id      int32 // -1: no node has it
	name    string
	count   int64
	consume bool
}

// attrIndex numbers the values of one node attribute. Nodes of a class
// share their attributes, so values are kept per class.
type attrIndex struct {
	val     []int32 // per class; -1 = attribute missing
	classOf []int32 // the State's
	names   []string
	byName  map[string]int32
}

// at is node ni's value, -1 when it lacks the attribute.
func (a *attrIndex) at(ni int32) int32 { return a.val[a.classOf[ni]] }

// spreadTable counts a spread group's live allocations per attribute value.
type spreadTable struct {
	attr   *attrIndex
	counts []int32
}

// NewState indexes nodes and existing allocations. Node IDs must be unique
// and every node needs an ID; allocations must have unique (JobID, Role).
// The result does not depend on the order of either slice: nodes are kept in
// ID order and allocations are applied in (JobID, Role) order. An allocation
// on a node not in nodes still binds its bundle (co-location, separation)
// but consumes nothing. Existing allocations are applied even if they
// over-commit a node; such a node then takes nothing more.
func NewState(cfg Config, nodes []Node, allocs []Allocation) (*State, error) {
	s := &State{
		cfg:           cfg,
		unit:          cfg.MilliUnitsPerVCPU,
		index:         make(map[string]int32, len(nodes)),
		byKey:         make(map[allocKey]int32, len(allocs)),
		byBundle:      map[string][]int32{},
		byGroup:       map[string][]int32{},
		attrs:         map[string]*attrIndex{},
		spreadByGroup: map[string][]*spreadTable{},
		spreadTables:  map[[2]string]*spreadTable{},
		static:        map[string]*shapeEntry{},
	}
	if s.unit <= 0 {
		s.unit = MilliUnitsPerVCPU
	}
	sorted := slices.Clone(nodes)
	slices.SortFunc(sorted, func(a, b Node) int { return cmp.Compare(a.ID, b.ID) })
	s.nodes = make([]nodeState, len(sorted))
	s.hot = make([]hotNode, len(sorted))
	s.capIdx = map[string]int32{}
	for _, n := range sorted {
		for _, c := range n.Capabilities {
			if _, ok := s.capIdx[c.Name]; !ok {
				s.capIdx[c.Name] = int32(len(s.capIdx))
			}
		}
	}
	s.ncap = len(s.capIdx)
	s.capTotal = make([]int64, len(sorted)*s.ncap)
	for i, n := range sorted {
		if n.ID == "" {
			return nil, errors.New("placement: a node has no ID")
		}
		if i > 0 && sorted[i-1].ID == n.ID {
			return nil, fmt.Errorf("placement: node %q given twice", n.ID)
		}
		ns := nodeState{Node: n}
		s.hot[i] = hotNode{cpuCap: int64(n.VCPUs) * s.unit, cores: int64(n.VCPUs)}
		for _, g := range n.GPUs {
			ns.gpuCap = append(ns.gpuCap, floorMilli(g.Capacity))
		}
		ns.gpuUsed = make([]int64, len(ns.gpuCap))
		for _, c := range n.Capabilities {
			s.capTotal[i*s.ncap+int(s.capIdx[c.Name])] += int64(c.Count)
		}
		s.nodes[i] = ns
		s.index[n.ID] = int32(i)
	}
	s.capFree = slices.Clone(s.capTotal)
	s.allocsOn = make([]int32, len(sorted))
	s.classify()
	as := slices.Clone(allocs)
	slices.SortFunc(as, byJobRole)
	s.allocs = make([]allocRec, 0, len(as)) // grown once, not by doubling
	for _, a := range as {
		if err := s.Commit(a); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// Commit binds an allocation: it consumes its node's capacity (GPU capacity
// from the GPU it names) and counts towards its bundle and spread group. It
// does not check that the allocation fits; Place does that. It fails on an
// invalid requirement or a (JobID, Role) already bound.
func (s *State) Commit(a Allocation) error {
	k := allocKey{a.JobID, a.Role}
	if _, dup := s.byKey[k]; dup {
		return fmt.Errorf("placement: allocation %s/%s already bound", a.JobID, a.Role)
	}
	nd, err := s.need(a.Requirements)
	if err != nil {
		return fmt.Errorf("placement: allocation %s/%s: %w", a.JobID, a.Role, err)
	}
	ni, ok := s.index[a.NodeID]
	if !ok {
		ni = -1
	}
	rec := allocRec{a: a, node: ni, need: nd, gpu: -1, alive: true}
	if ni >= 0 {
		n, h := &s.nodes[ni], &s.hot[ni]
		s.allocsOn[ni]++
		h.cpuUsed += nd.demand
		h.coresUsed += nd.cores
		for _, c := range nd.caps {
			if c.consume && c.id >= 0 {
				s.capFree[int(ni)*s.ncap+int(c.id)] -= c.count
			}
		}
		if nd.gpu > 0 && a.GPU >= 0 && a.GPU < len(n.gpuCap) {
			rec.gpu = int32(a.GPU)
			n.gpuUsed[rec.gpu] += nd.gpu
		}
		s.touch(ni)
	}
	var idx int32
	if n := len(s.free); n > 0 {
		idx, s.free = s.free[n-1], s.free[:n-1]
		s.allocs[idx] = rec
	} else {
		idx = int32(len(s.allocs))
		s.allocs = append(s.allocs, rec)
	}
	s.byKey[k] = idx
	s.record(true, a)
	if a.BundleID != "" {
		s.byBundle[a.BundleID] = s.sortedInsert(s.byBundle[a.BundleID], idx)
	}
	if a.SpreadGroup != "" {
		s.byGroup[a.SpreadGroup] = append(s.byGroup[a.SpreadGroup], idx)
		if ni >= 0 {
			for _, t := range s.spreadByGroup[a.SpreadGroup] {
				if v := t.attr.at(ni); v >= 0 {
					t.counts[v]++
				}
			}
		}
	}
	return nil
}

// Remove unbinds the allocation (jobID, role), returning its capacity to
// the node. It reports whether there was one.
func (s *State) Remove(jobID, role string) bool {
	k := allocKey{jobID, role}
	idx, ok := s.byKey[k]
	if !ok {
		return false
	}
	delete(s.byKey, k)
	rec := &s.allocs[idx]
	rec.alive = false
	if ni := rec.node; ni >= 0 {
		n, h := &s.nodes[ni], &s.hot[ni]
		s.allocsOn[ni]--
		h.cpuUsed -= rec.need.demand
		h.coresUsed -= rec.need.cores
		for _, c := range rec.need.caps {
			if c.consume && c.id >= 0 {
				s.capFree[int(ni)*s.ncap+int(c.id)] += c.count
			}
		}
		if rec.gpu >= 0 {
			n.gpuUsed[rec.gpu] -= rec.need.gpu
		}
		s.touch(ni)
		if g := rec.a.SpreadGroup; g != "" {
			for _, t := range s.spreadByGroup[g] {
				if v := t.attr.at(ni); v >= 0 {
					t.counts[v]--
				}
			}
		}
	}
	if b := rec.a.BundleID; b != "" {
		s.byBundle[b] = slices.DeleteFunc(s.byBundle[b], func(i int32) bool { return i == idx })
	}
	if g := rec.a.SpreadGroup; g != "" {
		s.byGroup[g] = slices.DeleteFunc(s.byGroup[g], func(i int32) bool { return i == idx })
	}
	s.record(false, rec.a)
	rec.a = Allocation{} // let go of its strings
	s.free = append(s.free, idx)
	return true
}

// sortedInsert inserts allocation idx into list, kept in (JobID, Role)
// order: a bundle's peers are then met in the same order however the State
// came to hold them (an explanation names the first peer that breaks a
// rule).
func (s *State) sortedInsert(list []int32, idx int32) []int32 {
	i, _ := slices.BinarySearchFunc(list, idx, func(e, _ int32) int { return byJobRole(s.allocs[e].a, s.allocs[idx].a) })
	return slices.Insert(list, i, idx)
}

// byJobRole orders allocations by (JobID, Role), the order a State
// applies and lists them in.
func byJobRole(a, b Allocation) int {
	return cmp.Or(cmp.Compare(a.JobID, b.JobID), cmp.Compare(a.Role, b.Role))
}

// Allocations returns the live allocations in (JobID, Role) order.
func (s *State) Allocations() []Allocation {
	out := make([]Allocation, 0, len(s.byKey))
	for _, r := range s.allocs {
		if r.alive {
			out = append(out, r.a)
		}
	}
	slices.SortFunc(out, byJobRole)
	return out
}

// Usage is a node's consumption in reference units, for tests and reports.
type Usage struct {
	CPU, CPUCapacity float64
	Cores, CoresCap  int64
	GPU, GPUCapacity []float64
	Capabilities     map[string]int64 // consumed counts
}

// Usage reports the node's current consumption; ok is false for an unknown
// node.
func (s *State) Usage(nodeID string) (u Usage, ok bool) {
	ni, ok := s.index[nodeID]
	if !ok {
		return Usage{}, false
	}
	n, h := &s.nodes[ni], &s.hot[ni]
	u = Usage{CPU: float64(h.cpuUsed) / 1000, CPUCapacity: float64(h.cpuCap) / 1000, Cores: h.coresUsed, CoresCap: h.cores}
	for i := range n.gpuCap {
		u.GPU = append(u.GPU, float64(n.gpuUsed[i])/1000)
		u.GPUCapacity = append(u.GPUCapacity, float64(n.gpuCap[i])/1000)
	}
	for name, c := range s.capIdx {
		if v := s.capTotal[int(ni)*s.ncap+int(c)] - s.capFree[int(ni)*s.ncap+int(c)]; v != 0 {
			if u.Capabilities == nil {
				u.Capabilities = map[string]int64{}
			}
			u.Capabilities[name] = v
		}
	}
	return u, true
}

// need converts requirements to integer milli units, refusing negative,
// NaN or absurd values.
func (s *State) need(r Requirements) (need, error) {
	c, err := ceilMilli("capacity", r.Capacity)
	if err != nil {
		return need{}, err
	}
	g, err := ceilMilli("GPU capacity", r.GPUCapacity)
	if err != nil {
		return need{}, err
	}
	nd := need{capacity: c, cores: int64(r.Cores), gpu: g, gpuModel: r.GPUModel}
	nd.demand = max(c, nd.cores*s.unit)
	if len(r.Capabilities) > 0 {
		caps := make([]capNeed, 0, len(r.Capabilities))
		for _, rc := range r.Capabilities {
			if rc.Count == 0 {
				continue
			}
			if i := slices.IndexFunc(caps, func(c capNeed) bool { return c.name == rc.Name }); i >= 0 {
				caps[i].count += int64(rc.Count)
				continue
			}
			id, ok := s.capIdx[rc.Name]
			if !ok {
				id = -1
			}
			caps = append(caps, capNeed{id: id, name: rc.Name, count: int64(rc.Count), consume: !s.cfg.PresenceCapabilities[rc.Name]})
		}
		slices.SortFunc(caps, func(a, b capNeed) int { return cmp.Compare(a.name, b.name) })
		nd.caps = caps
	}
	return nd, nil
}

const maxUnits = 1e9

func ceilMilli(what string, x float64) (int64, error) {
	if math.IsNaN(x) || x < 0 || x > maxUnits {
		return 0, fmt.Errorf("%s %v is not a number of reference units in [0, %g]", what, x, float64(maxUnits))
	}
	return int64(math.Ceil(x*1000 - 1e-6)), nil
}

func floorMilli(x float64) int64 {
	if math.IsNaN(x) || x <= 0 {
		return 0
	}
	if x > maxUnits {
		x = maxUnits
	}
	return int64(math.Floor(x*1000 + 1e-6))
}

func gpuModelMatches(have, want string) bool { return want == "" || have == want }

// fitGPU is the lowest-numbered GPU of the model with room for nd, or -1.
func (n *nodeState) fitGPU(nd need) int32 {
	for i := range n.gpuCap {
		if gpuModelMatches(n.GPUs[i].Model, nd.gpuModel) && n.gpuCap[i]-n.gpuUsed[i] >= nd.gpu {
			return int32(i)
		}
	}
	return -1
}

// attr indexes a node attribute once, on first use.
func (s *State) attr(name string) *attrIndex {
	if a, ok := s.attrs[name]; ok {
		return a
	}
	a := &attrIndex{val: make([]int32, len(s.classes)), classOf: s.classOf, byName: map[string]int32{}}
	for c := range s.classes {
		v, ok := s.nodes[s.classes[c].rep].Attributes[name]
		if !ok {
			a.val[c] = -1
			continue
		}
		id, ok := a.byName[v]
		if !ok {
			id = int32(len(a.names))
			a.names = append(a.names, v)
			a.byName[v] = id
		}
		a.val[c] = id
	}
	s.attrs[name] = a
	return a
}

// spreadTable returns the counts of group over attribute, counting the
// group's allocations once when first asked; Commit and Remove keep it
// current afterwards.
func (s *State) spreadTable(group, attribute string) *spreadTable {
	key := [2]string{group, attribute}
	if t, ok := s.spreadTables[key]; ok {
		return t
	}
	a := s.attr(attribute)
	t := &spreadTable{attr: a, counts: make([]int32, len(a.names))}
	for _, idx := range s.byGroup[group] {
		if r := &s.allocs[idx]; r.alive && r.node >= 0 {
			if v := a.at(r.node); v >= 0 {
				t.counts[v]++
			}
		}
	}
	s.spreadTables[key] = t
	s.spreadByGroup[group] = append(s.spreadByGroup[group], t)
	return t
}
