package placement

import (
	"fmt"
	"reflect"
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// The reference placement: the linear scan the package made before the
// index (decision 0054), kept to check the index against. It reads every
// node, applies every hard rule to it and ranks the eligible ones, with no
// cache of any kind; the indexed Place must give the same Result.

// placeScan is State.Place without the index (and without explanations):
// every node is checked and ranked.
func (s *State) placeScan(req Request) (Result, error) {
	p, err := s.prepare(&req)
	if err != nil {
		return Result{Tier: -1, GPU: -1}, err
	}
	res := Result{Tier: -1, GPU: -1}
	var refused [numRids]int
	best, bestTier := int32(-1), int32(-1)
	var bestKey rankKey
	for i := range s.nodes {
		ni := int32(i)
		r := s.staticCheck(ni, p, nil)
		if r == ridNone {
			r = s.dynamicCheck(ni, p, nil)
		}
		if r != ridNone {
			refused[r]++
			continue
		}
		res.Eligible++
		n := &s.nodes[i]
		tier := int32(p.tier(n))
		k := s.rank(ni, p, staticRank(tier, spareRank(&n.Node, p), req.Recovery, missingImages(&n.Node, p)))
		if best < 0 || k < bestKey {
			best, bestKey, bestTier = ni, k, tier
		}
	}
	for r := ridPin; r < numRids; r++ {
		if refused[r] > 0 {
			res.Refused = append(res.Refused, RuleCount{Rule: r.rule(), Nodes: refused[r]})
		}
	}
	if best < 0 {
		res.Reason = ReasonNoCapacity
		return res, nil
	}
	res.NodeID = s.nodes[best].ID
	res.Tier = int(bestTier)
	if p.need.gpu > 0 {
		res.GPU = int(s.nodes[best].fitGPU(p.need))
	}
	res.Degradations = s.degradations(best, p)
	return res, nil
}

// placeBatchScan is PlaceBatch by the reference scan.
func (s *State) placeBatchScan(reqs []Request) ([]Result, error) {
	out := make([]Result, 0, len(reqs))
	for i := range reqs {
		res, err := s.placeScan(reqs[i])
		if err != nil {
			return out, err
		}
		if res.NodeID != "" {
			if err := s.Commit(reqs[i].Allocation(res)); err != nil {
				return out, err
			}
		}
		out = append(out, res)
	}
	return out, nil
}

// TestIndexMatchesReference: on random nodes (many of them alike, so
// classes and groups hold several), random existing allocations and a
// random sequence of placements (a few request shapes repeated, and fresh
// ones, some pinned, some explained), commits (the placements made and
// arbitrary bindings, over-committing nodes) and removals, the indexed
// Place gives exactly the Result of the reference scan, explanation aside.
func TestIndexMatchesReference(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var nodes []Node
		for i := range rapid.IntRange(1, 40).Draw(t, "nodes") {
			if i > 0 && rapid.IntRange(0, 2).Draw(t, "twin") > 0 {
				n := rapid.SampledFrom(nodes).Draw(t, "of")
				n.ID = fmt.Sprintf("n%02d", i)
				n.VCPUs = uint32(rapid.IntRange(0, 8).Draw(t, "twinVCPUs"))
				nodes = append(nodes, n)
				continue
			}
			nodes = append(nodes, genNode(t, i))
		}
		var live []Allocation
		for i := range rapid.IntRange(0, 8).Draw(t, "existing") {
			r := genRequest(t, 500+i, nodes)
			live = append(live, r.Allocation(Result{NodeID: rapid.SampledFrom(nodes).Draw(t, "on").ID, GPU: rapid.IntRange(-1, 2).Draw(t, "gpuIndex")}))
		}
		s, err := NewState(propCfg, rapid.Permutation(nodes).Draw(t, "nodeOrder"), live)
		if err != nil {
			t.Fatal(err)
		}
		var shapes []Request
		for i := range rapid.IntRange(1, 4).Draw(t, "shapes") {
			shapes = append(shapes, genRequest(t, i, nodes))
		}
		for step := range rapid.IntRange(1, 80).Draw(t, "steps") {
			switch op := rapid.IntRange(0, 9).Draw(t, "op"); {
			case op == 0 && len(live) > 0:
				i := rapid.IntRange(0, len(live)-1).Draw(t, "which")
				if !s.Remove(live[i].JobID, live[i].Role) {
					t.Fatalf("remove %s/%s: not bound", live[i].JobID, live[i].Role)
				}
				live = slices.Delete(live, i, i+1)
				continue
			case op == 1:
				r := genRequest(t, 1000+step, nodes)
				a := r.Allocation(Result{NodeID: rapid.SampledFrom(nodes).Draw(t, "on").ID, GPU: rapid.IntRange(-1, 2).Draw(t, "gpuIndex")})
				if err := s.Commit(a); err != nil {
					t.Fatal(err)
				}
				live = append(live, a)
				continue
			}
			req := drawStepRequest(t, step, nodes, shapes, 4)
			got, err := s.Place(req)
			if err != nil {
				t.Fatal(err)
			}
			want, err := s.placeScan(req)
			if err != nil {
				t.Fatal(err)
			}
			if req.Explain != (got.Explanation != nil) {
				t.Fatalf("step %d: explain %v, explanation %v", step, req.Explain, got.Explanation != nil)
			}
			got.Explanation = nil
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("step %d: indexed %+v\nreference %+v", step, got, want)
			}
			if got.NodeID != "" {
				a := req.Allocation(got)
				if err := s.Commit(a); err != nil {
					t.Fatal(err)
				}
				live = append(live, a)
			}
		}
	})
}

func nodeIDs(nodes []Node) []string {
	ids := make([]string, len(nodes))
	for i, n := range nodes {
		ids[i] = n.ID
	}
	return ids
}

// drawStepRequest draws step's request: a fresh one or one of shapes
// (repeated shapes exercise the index's cache), pinned now and then, asking
// for an explanation one time in explainOdds+1.
func drawStepRequest(t *rapid.T, step int, nodes []Node, shapes []Request, explainOdds int) Request {
	var req Request
	if rapid.IntRange(0, 3).Draw(t, "fresh") == 0 {
		req = genRequest(t, step, nodes)
	} else {
		req = rapid.SampledFrom(shapes).Draw(t, "shape")
	}
	req.JobID = fmt.Sprintf("step-%03d", step)
	if rapid.IntRange(0, 9).Draw(t, "pin") == 0 {
		req.PinNode = rapid.SampledFrom(append([]string{"nowhere"}, nodeIDs(nodes)...)).Draw(t, "pinned")
	}
	req.Explain = rapid.IntRange(0, explainOdds).Draw(t, "explain") == 0
	return req
}
