package placement

import (
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

var propCfg = Config{
	Pools:                map[string][]string{"live": {"cheap", "dear"}},
	BandCeilings:         map[string]int{"bronze": 80},
	PresenceCapabilities: map[string]bool{"sock": true},
}

// propImages are the image refs nodes hold and services name.
var propImages = []string{"127.0.0.1:5000/enc:1", "127.0.0.1:5000/pkg:1", "docker.io/library/x:latest"}

// genNodes draws 1 to max nodes (genNode each).
func genNodes(t *rapid.T, max int) []Node {
	var nodes []Node
	for i := range rapid.IntRange(1, max).Draw(t, "nodes") {
		nodes = append(nodes, genNode(t, i))
	}
	return nodes
}

func genNode(t *rapid.T, i int) Node {
	n := Node{
		ID:         fmt.Sprintf("n%02d", i),
		VCPUs:      uint32(rapid.IntRange(0, 8).Draw(t, "vcpus")),
		Pool:       rapid.SampledFrom([]string{"cheap", "dear", "other"}).Draw(t, "pool"),
		Zone:       rapid.SampledFrom([]string{"", "z1", "z2", "z3"}).Draw(t, "zone"),
		Cloud:      rapid.SampledFrom([]string{"", "c1", "c2"}).Draw(t, "cloud"),
		Attributes: map[string]string{},
		Runtime:    rapid.SampledFrom([]string{"", "docker", "process"}).Draw(t, "runtime"),
	}
	if r := rapid.IntRange(-1, 2).Draw(t, "rack"); r >= 0 {
		n.Attributes["rack"] = fmt.Sprintf("r%d", r)
	}
	for g := rapid.IntRange(0, 2).Draw(t, "gpus"); g > 0; g-- {
		n.GPUs = append(n.GPUs, GPU{Model: rapid.SampledFrom([]string{"T4", "A10"}).Draw(t, "model"), Capacity: rapid.SampledFrom([]float64{0.5, 1}).Draw(t, "gcap")})
	}
	if c := rapid.IntRange(0, 3).Draw(t, "sdi"); c > 0 {
		n.Capabilities = append(n.Capabilities, Capability{"sdi", uint32(c)})
	}
	if rapid.Bool().Draw(t, "sock") {
		n.Capabilities = append(n.Capabilities, Capability{"sock", 1})
	}
	n.Images = rapid.SliceOfDistinct(rapid.SampledFrom(propImages), rapid.ID).Draw(t, "images")
	if rapid.IntRange(0, 3).Draw(t, "isSpare") == 0 {
		n.Spare = Spare{Enabled: true, Exclusive: rapid.Bool().Draw(t, "exclusive"),
			ReservedFor: rapid.SliceOfDistinct(rapid.SampledFrom([]string{"t1", "t2"}), rapid.ID).Draw(t, "reservedFor"),
			WarmFor:     rapid.SliceOfDistinct(rapid.SampledFrom([]string{"t1", "t2"}), rapid.ID).Draw(t, "warmFor")}
	}
	if rapid.IntRange(0, 5).Draw(t, "unavailable") == 0 {
		n.Unavailable = rapid.SampledFrom([]string{"the node is lost", "the node is draining"}).Draw(t, "why")
	}
	return n
}

func genRequest(t *rapid.T, i int, nodes []Node) Request {
	aa := func(l string) AntiAffinity { return AntiAffinity(rapid.IntRange(0, 1).Draw(t, l)) }
	names := []string{"a", "b", "c"}
	r := Request{
		JobID:    fmt.Sprintf("j%03d", i),
		Role:     "primary",
		Template: rapid.SampledFrom([]string{"t1", "t2", "t3"}).Draw(t, "template"),
		Pool:     rapid.SampledFrom([]string{"", "live", "other"}).Draw(t, "pool"),
		Requirements: Requirements{
			Capacity:     rapid.SampledFrom([]float64{0, 0.25, 0.5, 1, 1.5}).Draw(t, "capacity"),
			Cores:        uint32(rapid.SampledFrom([]int{0, 0, 0, 1, 2}).Draw(t, "cores")),
			GPUCapacity:  rapid.SampledFrom([]float64{0, 0, 0.5}).Draw(t, "gpu"),
			GPUModel:     rapid.SampledFrom([]string{"", "T4"}).Draw(t, "gpuModel"),
			PriorityBand: rapid.SampledFrom([]string{"", "bronze"}).Draw(t, "band"),
		},
		BundleID:            rapid.SampledFrom([]string{"", "B1", "B2"}).Draw(t, "bundle"),
		ReplicaIndex:        rapid.IntRange(0, 2).Draw(t, "replica"),
		JobName:             rapid.SampledFrom(names).Draw(t, "jobName"),
		AntiAffinity:        AntiAffinityPolicy{SameNode: aa("sameNode"), SameAz: aa("sameAz"), SameCloud: aa("sameCloud")},
		CoLocateWith:        rapid.SliceOfDistinct(rapid.SampledFrom(names), rapid.ID).Draw(t, "coLocate"),
		SeparateFrom:        rapid.SliceOfDistinct(rapid.SampledFrom(names), rapid.ID).Draw(t, "separate"),
		Recovery:            rapid.Bool().Draw(t, "recovery"),
		OverrideReservation: rapid.IntRange(0, 3).Draw(t, "override") == 0,
	}
	if c := rapid.IntRange(0, 2).Draw(t, "sdi"); c > 0 {
		r.Requirements.Capabilities = append(r.Requirements.Capabilities, Capability{"sdi", uint32(c)})
	}
	if rapid.Bool().Draw(t, "needSock") {
		r.Requirements.Capabilities = append(r.Requirements.Capabilities, Capability{"sock", 1})
	}
	if rapid.Bool().Draw(t, "spread") {
		r.Spread = &Spread{Attribute: "rack"}
	}
	for k := rapid.IntRange(0, 2).Draw(t, "services"); k > 0; k-- {
		sv := Service{Name: fmt.Sprintf("s%d", k),
			Image: rapid.IntRange(0, 3).Draw(t, "image") > 0, Command: rapid.IntRange(0, 3).Draw(t, "command") > 0}
		if sv.Image {
			sv.ImageRef = rapid.SampledFrom(propImages).Draw(t, "imageRef")
		}
		r.Services = append(r.Services, sv)
	}
	for _, n := range nodes {
		if rapid.IntRange(0, 5).Draw(t, "exclude") == 0 {
			if r.Exclude == nil {
				r.Exclude = map[string]string{}
			}
			r.Exclude[n.ID] = "recently failed"
		}
	}
	return r
}

// demandOf recomputes an allocation's CPU demand independently of the
// package, in milli units.
func demandOf(r Requirements) int64 {
	return max(int64(math.Round(r.Capacity*1000)), int64(r.Cores)*MilliUnitsPerVCPU)
}

func checkCapacity(t *rapid.T, s *State, nodes []Node, placed []Allocation) {
	for _, n := range nodes {
		var cpu, cores int64
		caps := map[string]int64{}
		for _, a := range placed {
			if a.NodeID != n.ID {
				continue
			}
			cpu += demandOf(a.Requirements)
			cores += int64(a.Requirements.Cores)
			for _, c := range a.Requirements.Capabilities {
				if !propCfg.PresenceCapabilities[c.Name] {
					caps[c.Name] += int64(c.Count)
				}
			}
		}
		if cpu > int64(n.VCPUs)*MilliUnitsPerVCPU {
			t.Fatalf("node %s over CPU capacity: %d milli-units of %d", n.ID, cpu, int64(n.VCPUs)*MilliUnitsPerVCPU)
		}
		if cores > int64(n.VCPUs) {
			t.Fatalf("node %s over cores: %d of %d", n.ID, cores, n.VCPUs)
		}
		for name, used := range caps {
			var total int64
			for _, c := range n.Capabilities {
				if c.Name == name {
					total += int64(c.Count)
				}
			}
			if used > total {
				t.Fatalf("node %s over capability %s: %d of %d", n.ID, name, used, total)
			}
		}
		u, _ := s.Usage(n.ID)
		for i := range u.GPU {
			if u.GPU[i] > u.GPUCapacity[i]+1e-9 {
				t.Fatalf("node %s over GPU %d: %v of %v", n.ID, i, u.GPU[i], u.GPUCapacity[i])
			}
		}
	}
}

// forbidCompliant reports whether putting r on node n keeps the first k of
// its FORBID rules (sameNode, sameAz, sameCloud order) against placed.
func forbidCompliant(n Node, byID map[string]Node, r Request, placed []Allocation, k int) bool {
	var rules []Rule
	if r.AntiAffinity.SameNode == Forbid {
		rules = append(rules, RuleSameNode)
	}
	if r.AntiAffinity.SameAz == Forbid {
		rules = append(rules, RuleSameAz)
	}
	if r.AntiAffinity.SameCloud == Forbid {
		rules = append(rules, RuleSameCloud)
	}
	if k > len(rules) {
		k = len(rules)
	}
	for _, a := range placed {
		if r.BundleID == "" || a.BundleID != r.BundleID || a.ReplicaIndex == r.ReplicaIndex || a.JobID == r.JobID {
			continue
		}
		o, ok := byID[a.NodeID]
		if !ok {
			continue
		}
		for _, rule := range rules[:k] {
			switch {
			case rule == RuleSameNode && o.ID == n.ID,
				rule == RuleSameAz && n.Zone != "" && o.Zone == n.Zone,
				rule == RuleSameCloud && n.Cloud != "" && o.Cloud == n.Cloud:
				return false
			}
		}
	}
	return true
}

func numForbid(r Request) int {
	k := 0
	for _, a := range []AntiAffinity{r.AntiAffinity.SameNode, r.AntiAffinity.SameAz, r.AntiAffinity.SameCloud} {
		if a == Forbid {
			k++
		}
	}
	return k
}

// TestPlacementProperties places a random sequence of requests on random
// nodes and checks every placement against independent oracles: capacity
// is never exceeded, FORBID is broken only when no eligible node keeps it,
// co-location and separation hold, exclusive spares and exclusions are
// respected, and the choice is the same from a rebuilt State, from a State
// built from shuffled input, from the incremental State, and with or
// without an explanation.
func TestPlacementProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		nodes := genNodes(t, 10)
		byID := map[string]Node{}
		for _, n := range nodes {
			byID[n.ID] = n
		}
		inc, err := NewState(propCfg, nodes, nil)
		if err != nil {
			t.Fatal(err)
		}
		var placed []Allocation
		for i := range rapid.IntRange(1, 30).Draw(t, "requests") {
			if len(placed) > 0 && rapid.IntRange(0, 6).Draw(t, "remove") == 0 {
				k := rapid.IntRange(0, len(placed)-1).Draw(t, "which")
				if !inc.Remove(placed[k].JobID, placed[k].Role) {
					t.Fatalf("remove %s failed", placed[k].JobID)
				}
				placed = slices.Delete(placed, k, k+1)
			}
			r := genRequest(t, i, nodes)

			fast, err := inc.Place(r)
			if err != nil {
				t.Fatal(err)
			}
			r.Explain = true
			fresh, err := NewState(propCfg, nodes, placed)
			if err != nil {
				t.Fatal(err)
			}
			res, err := fresh.Place(r)
			if err != nil {
				t.Fatal(err)
			}
			shuffled, err := NewState(propCfg, rapid.Permutation(nodes).Draw(t, "nodeOrder"), rapid.Permutation(placed).Draw(t, "allocOrder"))
			if err != nil {
				t.Fatal(err)
			}
			res2, _ := shuffled.Place(r)
			if !reflect.DeepEqual(res, res2) {
				t.Fatalf("shuffled input changed the result:\n%+v\n%+v", res, res2)
			}
			exp := res.Explanation
			res.Explanation = nil
			if !reflect.DeepEqual(fast, res) {
				t.Fatalf("incremental/fast result differs from rebuilt/explained:\n%+v\n%+v", fast, res)
			}

			var eligible []Node
			for _, v := range exp.Nodes {
				if len(v.Refusals) == 0 {
					eligible = append(eligible, byID[v.NodeID])
				}
			}
			if res.Eligible != len(eligible) || (res.NodeID == "") != (len(eligible) == 0) {
				t.Fatalf("eligible %d, explanation %d, chosen %q", res.Eligible, len(eligible), res.NodeID)
			}
			if res.NodeID == "" {
				continue
			}
			chosen := byID[res.NodeID]
			if !slices.ContainsFunc(eligible, func(n Node) bool { return n.ID == chosen.ID }) {
				t.Fatalf("chosen %s is not eligible", chosen.ID)
			}
			// FORBID: for every prefix of the FORBID rules, if an eligible node
			// keeps it, the chosen one does.
			for k := 1; k <= numForbid(r); k++ {
				some := slices.ContainsFunc(eligible, func(n Node) bool { return forbidCompliant(n, byID, r, placed, k) })
				if some && !forbidCompliant(chosen, byID, r, placed, k) {
					t.Fatalf("chosen %s breaks the first %d FORBID rules though an eligible node keeps them\n%s", chosen.ID, k, exp)
				}
			}
			if (len(res.Degradations) > 0) == forbidCompliant(chosen, byID, r, placed, 3) {
				t.Fatalf("degradations %v disagree with compliance of %s", res.Degradations, chosen.ID)
			}
			// Breaches agrees with the placement: the chosen node breaks what
			// its degradations say, and no eligible node has a lower severity.
			got, err := fresh.Breaches(r, chosen.ID)
			if err != nil {
				t.Fatal(err)
			}
			if Severity(got) != Severity(res.Degradations) || len(got) != len(res.Degradations) {
				t.Fatalf("Breaches(%s) = %v, the placement degraded %v", chosen.ID, got, res.Degradations)
			}
			for _, n := range eligible {
				ds, _ := fresh.Breaches(r, n.ID)
				if Severity(ds) < Severity(res.Degradations) {
					t.Fatalf("eligible %s breaks %v, less than the chosen %s's %v", n.ID, ds, chosen.ID, res.Degradations)
				}
			}
			// Co-location and separation within the replica, either side naming.
			for _, a := range placed {
				if r.BundleID == "" || a.BundleID != r.BundleID || a.ReplicaIndex != r.ReplicaIndex || a.JobID == r.JobID {
					continue
				}
				if (slices.Contains(r.CoLocateWith, a.JobName) || slices.Contains(a.CoLocateWith, r.JobName)) && a.NodeID != chosen.ID {
					t.Fatalf("co-located with %s on %s, placed on %s", a.JobID, a.NodeID, chosen.ID)
				}
				if (slices.Contains(r.SeparateFrom, a.JobName) || slices.Contains(a.SeparateFrom, r.JobName)) && a.NodeID == chosen.ID {
					t.Fatalf("separated from %s, placed with it on %s", a.JobID, chosen.ID)
				}
			}
			if chosen.Spare.Enabled && chosen.Spare.Exclusive && !r.OverrideReservation && !slices.Contains(chosen.Spare.ReservedFor, r.Template) {
				t.Fatalf("exclusive spare %s (reserved for %v) taken by template %s", chosen.ID, chosen.Spare.ReservedFor, r.Template)
			}
			if _, ex := r.Exclude[chosen.ID]; ex || chosen.Unavailable != "" {
				t.Fatalf("excluded node %s chosen (unavailable: %q)", chosen.ID, chosen.Unavailable)
			}
			if !runsAll(chosen.Runtime, r.Services) {
				t.Fatalf("node %s (runtime %q) chosen for services %+v it cannot run", chosen.ID, chosen.Runtime, r.Services)
			}
			if r.Pool != "" {
				tiers := propCfg.Pools[r.Pool]
				if len(tiers) == 0 {
					tiers = []string{r.Pool}
				}
				if !slices.Contains(tiers, chosen.Pool) {
					t.Fatalf("node %s of pool %s chosen for pool %s", chosen.ID, chosen.Pool, r.Pool)
				}
			}
			r.Explain = false
			a := r.Allocation(res)
			if err := inc.Commit(a); err != nil {
				t.Fatal(err)
			}
			placed = append(placed, a)
			checkCapacity(t, inc, nodes, placed)
		}
	})
}

// runsAll is the runtime oracle, written apart from the package: docker
// needs an image, process needs a command, any other runtime (or none
// said) runs anything.
func runsAll(runtime string, svcs []Service) bool {
	for _, s := range svcs {
		if (runtime == "docker" && !s.Image) || (runtime == "process" && !s.Command) {
			return false
		}
	}
	return true
}

// TestPlacementNeverOnAWrongRuntime (issue 12 item 11): whatever the
// nodes, their load and the request, no placement — incremental, fresh or
// explained, first placement or recovery, pinned or not — lands on a node
// whose runtime cannot run the request's services, and when every node is
// of such a runtime nothing is placed and the runtime rule says so for each.
func TestPlacementNeverOnAWrongRuntime(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		nodes := genNodes(t, 8)
		byID := map[string]Node{}
		for _, n := range nodes {
			byID[n.ID] = n
		}
		s, err := NewState(propCfg, nodes, nil)
		if err != nil {
			t.Fatal(err)
		}
		for i := range rapid.IntRange(1, 25).Draw(t, "requests") {
			r := genRequest(t, i, nodes)
			if rapid.IntRange(0, 4).Draw(t, "pin") == 0 {
				r.PinNode = rapid.SampledFrom(nodes).Draw(t, "pinned").ID
			}
			r.Explain = rapid.Bool().Draw(t, "explain")
			res, err := s.Place(r)
			if err != nil {
				t.Fatal(err)
			}
			if res.NodeID != "" && !runsAll(byID[res.NodeID].Runtime, r.Services) {
				t.Fatalf("placed on %s (runtime %q), which cannot run %+v", res.NodeID, byID[res.NodeID].Runtime, r.Services)
			}
			if r.Explain {
				for _, v := range res.Explanation.Nodes {
					refused := slices.ContainsFunc(v.Refusals, func(rf Refusal) bool { return rf.Rule == RuleRuntime })
					if refused == runsAll(byID[v.NodeID].Runtime, r.Services) {
						t.Fatalf("node %s (runtime %q), services %+v: runtime refusal %v", v.NodeID, byID[v.NodeID].Runtime, r.Services, refused)
					}
				}
			}
			if res.NodeID != "" {
				r.Explain = false
				if err := s.Commit(r.Allocation(res)); err != nil {
					t.Fatal(err)
				}
			}
		}
	})
}

// TestPlacementDeterministic: the same batch gives the same results every
// time, whatever the order of the nodes and of the existing allocations.
func TestPlacementDeterministic(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		nodes := genNodes(t, 12)
		var existing []Allocation
		for i := range rapid.IntRange(0, 6).Draw(t, "existing") {
			r := genRequest(t, 100+i, nodes)
			existing = append(existing, r.Allocation(Result{NodeID: rapid.SampledFrom(nodes).Draw(t, "on").ID, GPU: rapid.IntRange(-1, 2).Draw(t, "gpuIndex")}))
		}
		var reqs []Request
		for i := range rapid.IntRange(1, 20).Draw(t, "requests") {
			reqs = append(reqs, genRequest(t, i, nodes))
		}
		run := func(ns []Node, as []Allocation) []Result {
			s, err := NewState(propCfg, ns, as)
			if err != nil {
				t.Fatal(err)
			}
			res, err := s.PlaceBatch(reqs)
			if err != nil {
				t.Fatal(err)
			}
			return res
		}
		want := run(nodes, existing)
		if got := run(nodes, existing); !reflect.DeepEqual(got, want) {
			t.Fatal("same input, different results")
		}
		if got := run(rapid.Permutation(nodes).Draw(t, "nodeOrder"), rapid.Permutation(existing).Draw(t, "allocOrder")); !reflect.DeepEqual(got, want) {
			t.Fatalf("shuffled input, different results:\n%+v\n%+v", got, want)
		}
	})
}

// An indexed State that places, commits and removes allocations over time
// (so its caches set full nodes aside and bring them back) answers every
// request exactly as a State built fresh from the same allocations does.
func TestPlacementIncrementalMatchesFresh(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		nodes := genNodes(t, 10)
		s, err := NewState(propCfg, nodes, nil)
		if err != nil {
			t.Fatal(err)
		}
		// A few request shapes, repeated, so cached entries are reused.
		var shapes []Request
		for i := range rapid.IntRange(1, 4).Draw(t, "shapes") {
			shapes = append(shapes, genRequest(t, i, nodes))
		}
		var live []Allocation
		for step := range rapid.IntRange(1, 60).Draw(t, "steps") {
			if len(live) > 0 && rapid.IntRange(0, 5).Draw(t, "remove") == 0 {
				i := rapid.IntRange(0, len(live)-1).Draw(t, "which")
				if !s.Remove(live[i].JobID, live[i].Role) {
					t.Fatalf("remove %s/%s: not bound", live[i].JobID, live[i].Role)
				}
				live = append(live[:i], live[i+1:]...)
				continue
			}
			req := rapid.SampledFrom(shapes).Draw(t, "shape")
			// Ids in no particular order: what the State keeps must not
			// depend on the order it was told things in.
			req.JobID = fmt.Sprintf("job-%03d-%d", rapid.IntRange(0, 999).Draw(t, "id"), step)
			fresh, err := NewState(propCfg, nodes, live)
			if err != nil {
				t.Fatal(err)
			}
			got := placesAlike(t, fmt.Sprintf("step %d", step), s, fresh, req)
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

// A State rolled back to a savepoint, after any placements, commits and
// removes, answers every request as a State built fresh from the
// allocations it held at the savepoint does.
func TestPlacementRollbackMatchesFresh(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		nodes := genNodes(t, 10)
		var shapes []Request
		for i := range rapid.IntRange(1, 4).Draw(t, "shapes") {
			shapes = append(shapes, genRequest(t, i, nodes))
		}
		s, err := NewState(propCfg, nodes, nil)
		if err != nil {
			t.Fatal(err)
		}
		var live []Allocation
		// place commits a placement of a random shape, as a pass does.
		place := func(step int) {
			req := rapid.SampledFrom(shapes).Draw(t, "shape")
			req.JobID = fmt.Sprintf("job-%03d-%d", rapid.IntRange(0, 999).Draw(t, "id"), step)
			res, err := s.Place(req)
			if err != nil {
				t.Fatal(err)
			}
			if res.NodeID != "" {
				a := req.Allocation(res)
				if err := s.Commit(a); err != nil {
					t.Fatal(err)
				}
				live = append(live, a)
			}
		}
		for step := range rapid.IntRange(0, 20).Draw(t, "before") {
			place(step)
		}
		saved := slices.Clone(live)
		s.Savepoint()
		for step := range rapid.IntRange(1, 30).Draw(t, "after") {
			if len(live) > 0 && rapid.IntRange(0, 3).Draw(t, "remove") == 0 {
				i := rapid.IntRange(0, len(live)-1).Draw(t, "which")
				s.Remove(live[i].JobID, live[i].Role)
				live = slices.Delete(live, i, i+1)
				continue
			}
			place(100 + step)
		}
		s.Rollback()
		fresh, err := NewState(propCfg, nodes, saved)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := s.Allocations(), fresh.Allocations(); !reflect.DeepEqual(got, want) {
			t.Fatalf("after the rollback: %d allocations, want %d", len(got), len(want))
		}
		for i := range rapid.IntRange(1, 10).Draw(t, "probes") {
			req := rapid.SampledFrom(shapes).Draw(t, "probe")
			req.JobID = fmt.Sprintf("probe-%d", i)
			req.Explain = rapid.Bool().Draw(t, "explain")
			placesAlike(t, fmt.Sprintf("probe %d", i), s, fresh, req)
		}
	})
}

// placesAlike places req on a State kept over time and on one built fresh
// from the same allocations, fails unless both answer alike, and returns
// the answer.
func placesAlike(t *rapid.T, what string, kept, fresh *State, req Request) Result {
	got, err := kept.Place(req)
	if err != nil {
		t.Fatal(err)
	}
	want, err := fresh.Place(req)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s: kept %+v, fresh %+v", what, got, want)
	}
	return got
}

// TestPlacementPrefersHeldImages: of two nodes alike in everything but the
// images they hold, the one holding the job's images is chosen over the
// other (a docker node pulls what it lacks; a process node pulls nothing).
func TestPlacementPrefersHeldImages(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var nodes []Node
		for i := range rapid.IntRange(0, 6).Draw(t, "nodes") {
			nodes = append(nodes, genNode(t, i+2))
		}
		r := genRequest(t, 0, nodes)
		if len(r.Services) == 0 {
			r.Services = []Service{{Name: "s", Image: true, ImageRef: propImages[0]}}
		}
		lacks := genNode(t, 0) // n00: the lower id, so a tie would choose it
		lacks.Runtime = rapid.SampledFrom([]string{"", "docker"}).Draw(t, "twinRuntime")
		lacks.Images = nil
		holds := lacks
		holds.ID = "n01"
		for _, sv := range r.Services {
			if sv.ImageRef != "" {
				holds.Images = append(holds.Images, sv.ImageRef)
			}
		}
		nodes = append(nodes, lacks, holds)
		r.Explain = rapid.Bool().Draw(t, "explain")
		res, err := Place(propCfg, nodes, nil, r)
		if err != nil {
			t.Fatal(err)
		}
		if len(holds.Images) > 0 && res.NodeID == lacks.ID {
			t.Fatalf("placed on %s, which must pull %v, over %s, which holds them", lacks.ID, holds.Images, holds.ID)
		}
		if r.Explain && res.NodeID == holds.ID && len(holds.Images) > 0 {
			for _, v := range res.Explanation.Nodes {
				if v.NodeID == holds.ID && !slices.ContainsFunc(v.Notes, func(n string) bool { return strings.Contains(n, "no pull") }) {
					t.Fatalf("the chosen node's notes do not say it holds the images: %v", v.Notes)
				}
			}
		}
	})
}

// TestUnavailableIsExclusionOfEveryRequest: marking nodes unavailable once
// in the State places exactly as naming them in every request's Exclude
// does — with the request's own reason where it names such a node too —
// on random nodes, allocations and sequences of placements (shapes
// repeated and fresh, pinned, explained), commits and removals: the same
// Result, refusal counts, degradations and explanation, word for word.
func TestUnavailableIsExclusionOfEveryRequest(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var nodes []Node
		for i := range rapid.IntRange(1, 30).Draw(t, "nodes") {
			if i > 0 && rapid.IntRange(0, 2).Draw(t, "twin") > 0 {
				n := rapid.SampledFrom(nodes).Draw(t, "of")
				n.ID = fmt.Sprintf("n%02d", i)
				if rapid.Bool().Draw(t, "flip") {
					n.Unavailable = rapid.SampledFrom([]string{"", "the node is lost", "the node is offline"}).Draw(t, "twinWhy")
				}
				nodes = append(nodes, n)
				continue
			}
			nodes = append(nodes, genNode(t, i))
		}
		// The same nodes, none unavailable: each request excludes them.
		plain := slices.Clone(nodes)
		unavailable := map[string]string{}
		for i := range plain {
			if plain[i].Unavailable != "" {
				unavailable[plain[i].ID] = plain[i].Unavailable
				plain[i].Unavailable = ""
			}
		}
		var live []Allocation
		for i := range rapid.IntRange(0, 8).Draw(t, "existing") {
			r := genRequest(t, 500+i, nodes)
			live = append(live, r.Allocation(Result{NodeID: rapid.SampledFrom(nodes).Draw(t, "on").ID, GPU: rapid.IntRange(-1, 2).Draw(t, "gpuIndex")}))
		}
		marked, err := NewState(propCfg, nodes, live)
		if err != nil {
			t.Fatal(err)
		}
		each, err := NewState(propCfg, plain, live)
		if err != nil {
			t.Fatal(err)
		}
		var shapes []Request
		for i := range rapid.IntRange(1, 4).Draw(t, "shapes") {
			shapes = append(shapes, genRequest(t, i, nodes))
		}
		for step := range rapid.IntRange(1, 60).Draw(t, "steps") {
			if len(live) > 0 && rapid.IntRange(0, 6).Draw(t, "remove") == 0 {
				i := rapid.IntRange(0, len(live)-1).Draw(t, "which")
				if !marked.Remove(live[i].JobID, live[i].Role) || !each.Remove(live[i].JobID, live[i].Role) {
					t.Fatalf("remove %s/%s: not bound", live[i].JobID, live[i].Role)
				}
				live = slices.Delete(live, i, i+1)
				continue
			}
			req := drawStepRequest(t, step, nodes, shapes, 3)
			got, err := marked.Place(req)
			if err != nil {
				t.Fatal(err)
			}
			wide := req
			wide.Exclude = make(map[string]string, len(unavailable)+len(req.Exclude))
			for id, why := range unavailable {
				wide.Exclude[id] = why
			}
			for id, why := range req.Exclude {
				wide.Exclude[id] = why
			}
			want, err := each.Place(wide)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("step %d: unavailable in the State %+v\nin every request %+v\n%s\n%s", step, got, want, got.Explanation, want.Explanation)
			}
			if got.NodeID != "" {
				a := req.Allocation(got)
				if err := marked.Commit(a); err != nil {
					t.Fatal(err)
				}
				if err := each.Commit(a); err != nil {
					t.Fatal(err)
				}
				live = append(live, a)
			}
		}
	})
}
