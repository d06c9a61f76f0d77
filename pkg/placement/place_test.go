package placement

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
)

type nodeOpt func(*Node)

func mkNode(id string, vcpus uint32, opts ...nodeOpt) Node {
	n := Node{ID: id, VCPUs: vcpus, Attributes: map[string]string{}}
	for _, o := range opts {
		o(&n)
	}
	return n
}

func pool(p string) nodeOpt  { return func(n *Node) { n.Pool = p } }
func zone(z string) nodeOpt  { return func(n *Node) { n.Zone = z } }
func cloud(c string) nodeOpt { return func(n *Node) { n.Cloud = c } }
func attr(k, v string) nodeOpt {
	return func(n *Node) { n.Attributes[k] = v }
}
func gpu(model string, c float64) nodeOpt {
	return func(n *Node) { n.GPUs = append(n.GPUs, GPU{Model: model, Capacity: c}) }
}
func capab(name string, c uint32) nodeOpt {
	return func(n *Node) { n.Capabilities = append(n.Capabilities, Capability{Name: name, Count: c}) }
}
func runtimeOf(rt string) nodeOpt { return func(n *Node) { n.Runtime = rt } }

// Services a runtime sees: with only a command, only an image, or both.
var (
	cmdOnly   = []Service{{Name: "enc", Command: true}}
	imageOnly = []Service{{Name: "enc", Image: true}}
	both      = []Service{{Name: "enc", Image: true, Command: true}}
)

func spare(exclusive bool, reservedFor, warmFor []string) nodeOpt {
	return func(n *Node) {
		n.Spare = Spare{Enabled: true, Exclusive: exclusive, ReservedFor: reservedFor, WarmFor: warmFor}
	}
}

func alloc(job, node string, capacity float64) Allocation {
	return Allocation{JobID: job, Role: "primary", NodeID: node, Requirements: Requirements{Capacity: capacity}}
}

func bundleAlloc(job, node, bundle string, replica int, name string, capacity float64) Allocation {
	a := alloc(job, node, capacity)
	a.BundleID, a.ReplicaIndex, a.JobName = bundle, replica, name
	return a
}

func req(job string, capacity float64) Request {
	return Request{JobID: job, Role: "primary", Requirements: Requirements{Capacity: capacity}}
}

type placeCase struct {
	name   string
	cfg    Config
	nodes  []Node
	allocs []Allocation
	req    Request
	want   string            // chosen node, "" = none
	refuse map[string]string // node → "rule: reason substring"
	degr   []Rule
}

func with(r Request, f func(*Request)) Request { f(&r); return r }

func TestPlaceRules(t *testing.T) {
	tiers := Config{Pools: map[string][]string{"live": {"cheap", "dear"}}}
	cases := []placeCase{
		{name: "capacity/over refused", nodes: []Node{mkNode("n1", 4), mkNode("n2", 4)},
			allocs: []Allocation{alloc("x", "n1", 1.5)}, req: req("j", 1), want: "n2",
			refuse: map[string]string{"n1": "capacity: 0.5 of 2 reference units free (4 vCPUs), the job needs 1"}},
		{name: "capacity/best fit", nodes: []Node{mkNode("n1", 4), mkNode("n2", 4)},
			allocs: []Allocation{alloc("x", "n2", 0.5)}, req: req("j", 0.5), want: "n2"},
		{name: "capacity/tie by id", nodes: []Node{mkNode("n2", 4), mkNode("n1", 4)}, req: req("j", 0.5), want: "n1"},
		{name: "capacity/exact fit", nodes: []Node{mkNode("n1", 4)}, allocs: []Allocation{alloc("x", "n1", 1.9)}, req: req("j", 0.1), want: "n1"},
		{name: "capacity/no vcpus", nodes: []Node{mkNode("n1", 0)}, req: req("j", 0.001), want: "",
			refuse: map[string]string{"n1": "capacity: 0 of 0 reference units"}},
		{name: "cores/exclusive exhausted", nodes: []Node{mkNode("n1", 4), mkNode("n2", 8)},
			allocs: []Allocation{{JobID: "x", NodeID: "n1", Requirements: Requirements{Cores: 3}}},
			req:    with(req("j", 0), func(r *Request) { r.Requirements.Cores = 2 }), want: "n2",
			refuse: map[string]string{"n1": "cores: 1 of 4 cores free for exclusive use, the job needs 2"}},
		{name: "cores/leave no shared capacity", nodes: []Node{mkNode("n1", 4)},
			allocs: []Allocation{{JobID: "x", NodeID: "n1", Requirements: Requirements{Cores: 4}}},
			req:    req("j", 0.1), want: "", refuse: map[string]string{"n1": "capacity: 0 of 2"}},
		{name: "gpu/model", nodes: []Node{mkNode("n1", 4, gpu("T4", 1)), mkNode("n2", 4, gpu("A10", 1))},
			req:  with(req("j", 0), func(r *Request) { r.Requirements.GPUCapacity, r.Requirements.GPUModel = 0.5, "A10" }),
			want: "n2", refuse: map[string]string{"n1": `gpu: no GPU of model "A10" with capacity 0.5 (has "T4" 1)`}},
		{name: "gpu/second gpu has room", nodes: []Node{mkNode("n1", 4, gpu("T4", 1), gpu("T4", 1))},
			allocs: []Allocation{{JobID: "x", NodeID: "n1", Requirements: Requirements{GPUCapacity: 0.6}}},
			req:    with(req("j", 0), func(r *Request) { r.Requirements.GPUCapacity = 0.6 }), want: "n1"},
		{name: "gpu/per gpu not pooled", nodes: []Node{mkNode("n1", 4, gpu("T4", 1), gpu("T4", 1))},
			allocs: []Allocation{{JobID: "x", NodeID: "n1", Requirements: Requirements{GPUCapacity: 0.6}},
				{JobID: "y", NodeID: "n1", GPU: 1, Requirements: Requirements{GPUCapacity: 0.6}}},
			req: with(req("j", 0), func(r *Request) { r.Requirements.GPUCapacity = 0.6 }), want: "",
			refuse: map[string]string{"n1": `gpu: no GPU has 0.6 free (has "T4" 0.4 free, "T4" 0.4 free)`}},
		{name: "capability/counts consumed", nodes: []Node{mkNode("n1", 4, capab("sdi", 2)), mkNode("n2", 4, capab("sdi", 1))},
			allocs: []Allocation{{JobID: "x", NodeID: "n1", Requirements: Requirements{Capabilities: []Capability{{"sdi", 2}}}}},
			req:    with(req("j", 0), func(r *Request) { r.Requirements.Capabilities = []Capability{{"sdi", 1}} }), want: "n2",
			refuse: map[string]string{"n1": `capability: 0 of 2 "sdi" free, the job needs 1`}},
		{name: "capability/missing", nodes: []Node{mkNode("n1", 4)},
			req:  with(req("j", 0), func(r *Request) { r.Requirements.Capabilities = []Capability{{"sdi", 1}} }),
			want: "", refuse: map[string]string{"n1": `capability: advertises 0 of capability "sdi", the job needs 1`}},
		{name: "capability/presence only", cfg: Config{PresenceCapabilities: map[string]bool{"jobSocket": true}},
			nodes:  []Node{mkNode("n1", 4, capab("jobSocket", 1))},
			allocs: []Allocation{{JobID: "x", NodeID: "n1", Requirements: Requirements{Capabilities: []Capability{{"jobSocket", 1}}}}},
			req:    with(req("j", 0), func(r *Request) { r.Requirements.Capabilities = []Capability{{"jobSocket", 1}} }), want: "n1"},
		{name: "pool/cheapest tier", cfg: tiers,
			nodes: []Node{mkNode("a", 4, pool("dear")), mkNode("b", 4, pool("cheap")), mkNode("c", 4, pool("other"))},
			req:   with(req("j", 1), func(r *Request) { r.Pool = "live" }), want: "b",
			refuse: map[string]string{"c": `pool: node pool "other" is not a tier of pool "live" (tiers cheap, dear)`}},
		{name: "pool/next tier when cheap is full", cfg: tiers,
			nodes:  []Node{mkNode("a", 4, pool("dear")), mkNode("b", 4, pool("cheap"))},
			allocs: []Allocation{alloc("x", "b", 2)},
			req:    with(req("j", 1), func(r *Request) { r.Pool = "live" }), want: "a"},
		{name: "pool/unlisted pool is one tier", nodes: []Node{mkNode("a", 4, pool("x")), mkNode("b", 4, pool("y"))},
			req: with(req("j", 1), func(r *Request) { r.Pool = "y" }), want: "b"},
		{name: "exclusion/reason", nodes: []Node{mkNode("n1", 4), mkNode("n2", 4)},
			allocs: []Allocation{alloc("x", "n1", 1)},
			req:    with(req("j", 1), func(r *Request) { r.Exclude = map[string]string{"n1": "recently failed"} }), want: "n2",
			refuse: map[string]string{"n1": "exclusion: excluded: recently failed"}},
		{name: "pin/only the target", nodes: []Node{mkNode("n1", 4), mkNode("n2", 4)},
			allocs: []Allocation{alloc("x", "n1", 1)},
			req:    with(req("j", 1), func(r *Request) { r.PinNode = "n2" }), want: "n2",
			refuse: map[string]string{"n1": `pin: not the pinned target "n2"`}},
		{name: "pin/target full", nodes: []Node{mkNode("n1", 4), mkNode("n2", 4)},
			allocs: []Allocation{alloc("x", "n2", 2)},
			req:    with(req("j", 1), func(r *Request) { r.PinNode = "n2" }), want: "",
			refuse: map[string]string{"n2": "capacity"}},
		{name: "selector", nodes: []Node{mkNode("n1", 4, attr("arch", "arm")), mkNode("n2", 4, attr("arch", "x86")), mkNode("n3", 4)},
			req: with(req("j", 1), func(r *Request) { r.NodeSelector = map[string]string{"arch": "x86"} }), want: "n2",
			refuse: map[string]string{"n1": `selector: attribute arch="arm", want "x86"`, "n3": `selector: has no attribute "arch"`}},
		{name: "band/bronze keeps headroom", cfg: Config{BandCeilings: map[string]int{"bronze": 80}},
			nodes: []Node{mkNode("n1", 4)}, allocs: []Allocation{alloc("x", "n1", 1)},
			req: with(req("j", 0.8), func(r *Request) { r.Requirements.PriorityBand = "bronze" }), want: "",
			refuse: map[string]string{"n1": `priorityBand: priority band "bronze" may fill a node to 80% of its capacity; placing the job would reach 90%`}},
		{name: "band/gold uses headroom", cfg: Config{BandCeilings: map[string]int{"bronze": 80}},
			nodes: []Node{mkNode("n1", 4)}, allocs: []Allocation{alloc("x", "n1", 1)},
			req: with(req("j", 0.8), func(r *Request) { r.Requirements.PriorityBand = "gold" }), want: "n1"},
		{name: "antiAffinity/sameNode honoured", nodes: []Node{mkNode("n1", 4), mkNode("n2", 4)},
			allocs: []Allocation{bundleAlloc("b-0-enc", "n1", "b", 0, "enc", 1)},
			req: with(req("b-1-enc", 0.5), func(r *Request) {
				r.BundleID, r.ReplicaIndex, r.JobName = "b", 1, "enc"
				r.AntiAffinity.SameNode = Forbid
			}),
			want: "n2"},
		{name: "antiAffinity/sameNode allowed packs", nodes: []Node{mkNode("n1", 4), mkNode("n2", 4)},
			allocs: []Allocation{bundleAlloc("b-0-enc", "n1", "b", 0, "enc", 1)},
			req:    with(req("b-1-enc", 0.5), func(r *Request) { r.BundleID, r.ReplicaIndex, r.JobName = "b", 1, "enc" }),
			want:   "n1"},
		{name: "antiAffinity/sameNode degraded", nodes: []Node{mkNode("n1", 4), mkNode("n2", 1)},
			allocs: []Allocation{bundleAlloc("b-0-enc", "n1", "b", 0, "enc", 1)},
			req: with(req("b-1-enc", 1), func(r *Request) {
				r.BundleID, r.ReplicaIndex, r.JobName = "b", 1, "enc"
				r.AntiAffinity.SameNode = Forbid
			}),
			want: "n1", degr: []Rule{RuleSameNode}},
		{name: "antiAffinity/sameAz", nodes: []Node{mkNode("n1", 4, zone("z1")), mkNode("n2", 4, zone("z1")), mkNode("n3", 4, zone("z2"))},
			allocs: []Allocation{bundleAlloc("b-0-enc", "n1", "b", 0, "enc", 1), alloc("fill", "n2", 0.5)},
			req: with(req("b-1-enc", 0.5), func(r *Request) {
				r.BundleID, r.ReplicaIndex, r.JobName = "b", 1, "enc"
				r.AntiAffinity.SameAz = Forbid
			}),
			want: "n3"},
		{name: "antiAffinity/sameCloud degraded, sameNode kept", nodes: []Node{mkNode("n1", 4, cloud("aws")), mkNode("n2", 4, cloud("aws"))},
			allocs: []Allocation{bundleAlloc("b-0-enc", "n1", "b", 0, "enc", 1)},
			req: with(req("b-1-enc", 0.5), func(r *Request) {
				r.BundleID, r.ReplicaIndex, r.JobName = "b", 1, "enc"
				r.AntiAffinity = AntiAffinityPolicy{SameNode: Forbid, SameCloud: Forbid}
			}),
			want: "n2", degr: []Rule{RuleSameCloud}},
		{name: "antiAffinity/compliant dear tier beats cheap", cfg: tiers,
			nodes:  []Node{mkNode("n1", 4, pool("cheap")), mkNode("n2", 4, pool("dear"))},
			allocs: []Allocation{bundleAlloc("b-0-enc", "n1", "b", 0, "enc", 1)},
			req: with(req("b-1-enc", 0.5), func(r *Request) {
				r.Pool, r.BundleID, r.ReplicaIndex, r.JobName = "live", "b", 1, "enc"
				r.AntiAffinity.SameNode = Forbid
			}),
			want: "n2"},
		{name: "coLocateWith/follows peer", nodes: []Node{mkNode("n1", 4), mkNode("n2", 4)},
			allocs: []Allocation{bundleAlloc("b-0-a", "n2", "b", 0, "a", 1), alloc("fill", "n1", 1.5)},
			req:    with(req("b-0-b", 0.5), func(r *Request) { r.BundleID, r.JobName, r.CoLocateWith = "b", "b", []string{"a"} }),
			want:   "n2", refuse: map[string]string{"n1": `coLocateWith: must run with job "a" of replica 0, which runs on n2`}},
		{name: "coLocateWith/symmetric", nodes: []Node{mkNode("n1", 4), mkNode("n2", 4)},
			allocs: []Allocation{func() Allocation {
				a := bundleAlloc("b-0-a", "n2", "b", 0, "a", 1)
				a.CoLocateWith = []string{"b"}
				return a
			}(), alloc("fill", "n1", 1.5)},
			req: with(req("b-0-b", 0.5), func(r *Request) { r.BundleID, r.JobName = "b", "b" }), want: "n2"},
		{name: "coLocateWith/other replica ignored", nodes: []Node{mkNode("n1", 4), mkNode("n2", 4)},
			allocs: []Allocation{bundleAlloc("b-1-a", "n2", "b", 1, "a", 1), alloc("fill", "n1", 1.5)},
			req:    with(req("b-0-b", 0.5), func(r *Request) { r.BundleID, r.JobName, r.CoLocateWith = "b", "b", []string{"a"} }),
			want:   "n1"},
		{name: "coLocateWith/peer full", nodes: []Node{mkNode("n1", 4), mkNode("n2", 4)},
			allocs: []Allocation{bundleAlloc("b-0-a", "n2", "b", 0, "a", 2)},
			req:    with(req("b-0-b", 0.5), func(r *Request) { r.BundleID, r.JobName, r.CoLocateWith = "b", "b", []string{"a"} }),
			want:   "", refuse: map[string]string{"n2": "capacity"}},
		{name: "separateFrom", nodes: []Node{mkNode("n1", 4), mkNode("n2", 4)},
			allocs: []Allocation{bundleAlloc("b-0-a", "n1", "b", 0, "a", 1)},
			req:    with(req("b-0-b", 0.5), func(r *Request) { r.BundleID, r.JobName, r.SeparateFrom = "b", "b", []string{"a"} }),
			want:   "n2", refuse: map[string]string{"n1": `separateFrom: must not run with job "a" of replica 0, which runs here`}},
		{name: "spare/exclusive refuses other template", nodes: []Node{mkNode("s1", 4, spare(true, []string{"xyz"}, nil))},
			req: with(req("j", 1), func(r *Request) { r.Template = "abc" }), want: "",
			refuse: map[string]string{"s1": `spare: exclusive hot spare reserved for [xyz]; template "abc" is not among them`}},
		{name: "spare/exclusive override", nodes: []Node{mkNode("s1", 4, spare(true, []string{"xyz"}, nil))},
			req: with(req("j", 1), func(r *Request) { r.Template, r.OverrideReservation = "abc", true }), want: "s1"},
		{name: "spare/exclusive own template", nodes: []Node{mkNode("s1", 4, spare(true, []string{"xyz"}, nil))},
			req: with(req("j", 1), func(r *Request) { r.Template = "xyz" }), want: "s1"},
		{name: "spare/ordinary placement uses spares last", nodes: []Node{mkNode("a", 4, spare(false, nil, nil)), mkNode("b", 4)},
			req: req("j", 1), want: "b"},
		{name: "spare/recovery prefers spares", nodes: []Node{mkNode("a", 4), mkNode("b", 4, spare(false, nil, nil))},
			allocs: []Allocation{alloc("x", "a", 1)},
			req:    with(req("j", 1), func(r *Request) { r.Recovery = true }), want: "b"},
		{name: "spare/recovery prefers warm spare", nodes: []Node{mkNode("a", 4, spare(false, nil, nil)), mkNode("b", 4, spare(false, nil, []string{"enc"}))},
			req: with(req("j", 1), func(r *Request) { r.Recovery, r.Template = true, "enc" }), want: "b"},
		{name: "spare/recovery spare beats cheaper tier", cfg: tiers,
			nodes: []Node{mkNode("a", 4, pool("cheap")), mkNode("b", 4, pool("dear"), spare(false, nil, nil))},
			req:   with(req("j", 1), func(r *Request) { r.Pool, r.Recovery = "live", true }), want: "b"},
		{name: "spread/least used rack", nodes: []Node{mkNode("n1", 8, attr("rack", "r1")), mkNode("n2", 8, attr("rack", "r2")), mkNode("n3", 8)},
			allocs: []Allocation{{JobID: "x", NodeID: "n1", SpreadGroup: "g", Requirements: Requirements{Capacity: 1}}},
			req:    with(req("j", 1), func(r *Request) { r.Spread = &Spread{Attribute: "rack", Group: "g"} }), want: "n2"},
		{name: "spread/missing attribute last", nodes: []Node{mkNode("n1", 8, attr("rack", "r1")), mkNode("n0", 8)},
			allocs: []Allocation{{JobID: "x", NodeID: "n1", SpreadGroup: "g", Requirements: Requirements{Capacity: 1}}},
			req:    with(req("j", 1), func(r *Request) { r.Spread = &Spread{Attribute: "rack", Group: "g"} }), want: "n1"},
		// Issue 12 item 11: a command-only spec went to Docker nodes and an
		// image-only one to process nodes, failing there to the ceiling.
		{name: "runtime/command-only refuses docker", nodes: []Node{mkNode("d", 8, runtimeOf("docker")), mkNode("p", 2, runtimeOf("process"))},
			req: with(req("j", 0.5), func(r *Request) { r.Services = cmdOnly }), want: "p",
			refuse: map[string]string{"d": `runtime: runtime docker cannot run command-only services (docker runs images): "enc" has a command and no image`}},
		{name: "runtime/image-only refuses process", nodes: []Node{mkNode("d", 2, runtimeOf("docker")), mkNode("p", 8, runtimeOf("process"))},
			req: with(req("j", 0.5), func(r *Request) { r.Services = imageOnly }), want: "d",
			refuse: map[string]string{"p": `runtime: runtime process cannot run image-only services (process runs commands): "enc" has an image and no command`}},
		{name: "runtime/image and command run on either", nodes: []Node{mkNode("d", 2, runtimeOf("docker")), mkNode("p", 8, runtimeOf("process"))},
			req: with(req("j", 0.5), func(r *Request) { r.Services = both }), want: "d"},
		{name: "runtime/a node that does not say runs anything", nodes: []Node{mkNode("old", 4), mkNode("p", 4, runtimeOf("process"))},
			req: with(req("j", 0.5), func(r *Request) { r.Services = imageOnly }), want: "old",
			refuse: map[string]string{"p": "runtime: runtime process cannot run image-only"}},
		{name: "runtime/no node's runtime runs it", nodes: []Node{mkNode("p1", 4, runtimeOf("process")), mkNode("p2", 4, runtimeOf("process"))},
			req: with(req("j", 0.5), func(r *Request) {
				r.Services = []Service{{Name: "a", Image: true}, {Name: "b", Command: true}, {Name: "c"}}
			}), want: "",
			refuse: map[string]string{"p1": `runtime: runtime process cannot run image-only services (process runs commands): "a" has an image and no command, "c" has neither an image nor a command`}},
		{name: "nothing fits", nodes: []Node{mkNode("n1", 2), mkNode("n2", 2)}, req: req("j", 5), want: "",
			refuse: map[string]string{"n1": "capacity", "n2": "capacity"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for _, explain := range []bool{false, true} {
				r := tc.req
				r.Explain = explain
				res, err := Place(tc.cfg, tc.nodes, tc.allocs, r)
				if err != nil {
					t.Fatal(err)
				}
				if res.NodeID != tc.want {
					t.Fatalf("explain=%v: placed on %q, want %q\n%s\n%s", explain, res.NodeID, tc.want, res.Summary(), res.Explanation)
				}
				if (res.NodeID == "") != (res.Reason == ReasonNoCapacity) {
					t.Fatalf("reason %q with node %q", res.Reason, res.NodeID)
				}
				var got []Rule
				for _, d := range res.Degradations {
					got = append(got, d.Rule)
				}
				if !slices.Equal(got, tc.degr) {
					t.Fatalf("degradations %v, want %v", res.Degradations, tc.degr)
				}
				if !explain {
					continue
				}
				for node, want := range tc.refuse {
					v := verdictOf(t, res.Explanation, node)
					found := false
					for _, rf := range v.Refusals {
						found = found || strings.Contains(string(rf.Rule)+": "+rf.Reason, want)
					}
					if !found {
						t.Errorf("node %s: refusals %v, want one containing %q", node, v.Refusals, want)
					}
				}
			}
		})
	}
}

func verdictOf(t *testing.T, e *Explanation, node string) NodeVerdict {
	t.Helper()
	for _, v := range e.Nodes {
		if v.NodeID == node {
			return v
		}
	}
	t.Fatalf("no verdict for %s", node)
	return NodeVerdict{}
}

func TestExplanationStableAndComplete(t *testing.T) {
	nodes := []Node{
		mkNode("c", 4, pool("p"), zone("z1")),
		mkNode("a", 4, pool("p"), zone("z1")),
		mkNode("b", 4, pool("q")),
		mkNode("d", 4, pool("p"), spare(true, []string{"other"}, nil)),
	}
	allocs := []Allocation{bundleAlloc("b0", "a", "B", 0, "enc", 1)}
	r := Request{JobID: "b1", Role: "backup", Template: "enc", Pool: "p", BundleID: "B", ReplicaIndex: 1, JobName: "enc",
		Requirements: Requirements{Capacity: 1.5}, AntiAffinity: AntiAffinityPolicy{SameAz: Forbid}, Explain: true,
		Exclude: map[string]string{"c": "unhealthy"}}
	res, err := Place(Config{}, nodes, allocs, r)
	if err != nil {
		t.Fatal(err)
	}
	want := `a: refused; capacity: 1 of 2 reference units free (4 vCPUs), the job needs 1.5
b: refused; pool: node pool "q" is not a tier of pool "p" (tiers p)
c: refused; exclusion: excluded: unhealthy
d: refused; spare: exclusive hot spare reserved for [other]; template "enc" is not among them and the request does not override the reservation
`
	if got := res.Explanation.String(); got != want {
		t.Fatalf("explanation:\n%s\nwant:\n%s", got, want)
	}
	if res.NodeID != "" || res.Summary() != "noCapacityInAnyPool; 0 eligible; 1 refused by exclusion; 1 refused by pool; 1 refused by spare; 1 refused by capacity" {
		t.Fatalf("summary %q", res.Summary())
	}
	// Every rule a node fails is listed, in rule order.
	r.Requirements.Capacity = 3
	r.Exclude = map[string]string{"b": ""}
	res, _ = Place(Config{}, nodes, allocs, r)
	v := verdictOf(t, res.Explanation, "b")
	if len(v.Refusals) != 3 || v.Refusals[0].Rule != RuleExclusion || v.Refusals[1].Rule != RulePool || v.Refusals[2].Rule != RuleCapacity ||
		v.Refusals[0].Reason != "excluded: excluded by the caller" {
		t.Fatalf("refusals of b: %+v", v.Refusals)
	}
	// An eligible node says how it ranked.
	r.Requirements.Capacity = 0.5
	r.Exclude = nil
	res, _ = Place(Config{}, nodes, allocs, r)
	if res.NodeID != "a" || len(res.Degradations) != 1 || res.Degradations[0].Rule != RuleSameAz {
		t.Fatalf("result %+v", res)
	}
	v = verdictOf(t, res.Explanation, "a")
	if !v.Chosen || !strings.Contains(strings.Join(v.Notes, "|"), `breaks FORBID antiAffinity.sameAz: zone z1 also runs job "enc" of replica 0 (on a)`) {
		t.Fatalf("verdict of c: %+v", v)
	}
}

func TestPlaceRefusesBadInput(t *testing.T) {
	if _, err := Place(Config{}, []Node{mkNode("a", 1), mkNode("a", 2)}, nil, req("j", 1)); err == nil {
		t.Fatal("duplicate node accepted")
	}
	if _, err := Place(Config{}, []Node{mkNode("a", 1)}, nil, req("j", -1)); err == nil {
		t.Fatal("negative capacity accepted")
	}
	if _, err := Place(Config{}, []Node{mkNode("a", 1)}, []Allocation{alloc("x", "a", 1), alloc("x", "a", 1)}, req("j", 1)); err == nil {
		t.Fatal("duplicate allocation accepted")
	}
}

func TestBatchCommitsAndRemove(t *testing.T) {
	s, err := NewState(Config{}, []Node{mkNode("a", 4), mkNode("b", 4)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var reqs []Request
	for _, j := range []string{"j1", "j2", "j3", "j4", "j5"} {
		reqs = append(reqs, req(j, 1))
	}
	res, err := s.PlaceBatch(reqs)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range res {
		got = append(got, r.NodeID)
	}
	if want := []string{"a", "a", "b", "b", ""}; !slices.Equal(got, want) {
		t.Fatalf("batch placed %v, want %v", got, want)
	}
	if !s.Remove("j1", "primary") || s.Remove("j1", "primary") {
		t.Fatal("remove")
	}
	if r, _ := s.Place(req("j5", 1)); r.NodeID != "a" {
		t.Fatalf("after remove placed on %q", r.NodeID)
	}
	if u, _ := s.Usage("a"); u.CPU != 1 || u.CPUCapacity != 2 {
		t.Fatalf("usage %+v", u)
	}
}

func TestFromProto(t *testing.T) {
	cores := uint32(2)
	gcap := float32(0.5)
	model := "T4"
	n := NodeFromProto(&managerv1.Node{
		NodeId: "n1", Provider: "cluster",
		Tags:         map[string]string{"pool": "live", "zone": "z1", "spare": "true", "warmFor": "enc, dec", "reservedFor": "enc", "exclusive": "true"},
		Hardware:     &managerv1.Hardware{Vcpus: 8, Gpus: []*managerv1.Gpu{{Model: "T4", Capacity: 1}}},
		Capabilities: []*managerv1.Capability{{Name: "sdi", Count: 4}},
	})
	want := Node{ID: "n1", Pool: "live", Zone: "z1", Cloud: "cluster", VCPUs: 8,
		Attributes:   map[string]string{"pool": "live", "zone": "z1", "spare": "true", "warmFor": "enc, dec", "reservedFor": "enc", "exclusive": "true"},
		GPUs:         []GPU{{"T4", 1}},
		Capabilities: []Capability{{"sdi", 4}},
		Spare:        Spare{Enabled: true, WarmFor: []string{"enc", "dec"}, ReservedFor: []string{"enc"}, Exclusive: true}}
	if !reflect.DeepEqual(n, want) {
		t.Fatalf("node %+v\nwant %+v", n, want)
	}
	r := RequirementsFromProto(&managerv1.JobRequirements{RequiredCapacity: 1.5, RequiredCores: &cores, RequiredGpuCapacity: &gcap,
		RequiredGpuModel: &model, RequiredCapabilities: []*managerv1.CapabilityRequirement{{Name: "sdi", Count: 1}}, PriorityBand: "bronze"})
	wantR := Requirements{Capacity: 1.5, Cores: 2, GPUCapacity: 0.5, GPUModel: "T4", Capabilities: []Capability{{"sdi", 1}}, PriorityBand: "bronze"}
	if !reflect.DeepEqual(r, wantR) {
		t.Fatalf("requirements %+v", r)
	}
	if !reflect.DeepEqual(RequirementsFromProto(nil), Requirements{}) {
		t.Fatal("nil requirements")
	}
}

func TestGPUIndexIsBound(t *testing.T) {
	s, _ := NewState(Config{}, []Node{mkNode("n1", 4, gpu("A10", 1), gpu("T4", 1), gpu("T4", 1))}, nil)
	r := with(req("j1", 0), func(r *Request) { r.Requirements.GPUCapacity, r.Requirements.GPUModel = 0.75, "T4" })
	res, err := s.PlaceBatch([]Request{r, with(r, func(r *Request) { r.JobID = "j2" }), with(r, func(r *Request) { r.JobID = "j3" })})
	if err != nil {
		t.Fatal(err)
	}
	if res[0].GPU != 1 || res[1].GPU != 2 || res[2].NodeID != "" || res[2].GPU != -1 {
		t.Fatalf("GPU choices %d %d %q/%d", res[0].GPU, res[1].GPU, res[2].NodeID, res[2].GPU)
	}
	if u, _ := s.Usage("n1"); !slices.Equal(u.GPU, []float64{0, 0.75, 0.75}) {
		t.Fatalf("GPU usage %v", u.GPU)
	}
}
