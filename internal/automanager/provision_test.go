package automanager

import (
	"fmt"

	"pgregory.net/rapid"
	"strings"
	"testing"
	"time"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/pkg/placement"
)

func provisions(d Decision) []Action {
	var out []Action
	for _, a := range d.Actions {
		if a.Kind == ActProvision {
			out = append(out, a)
		}
	}
	return out
}

// bigBundle is a bundle of one job needing capacity units (no backup).
func bigBundle(id, pool string, capacity float64) *managerv1.Bundle {
	b := bundle(id, false)
	b.Pool = pool
	b.Jobs[0].Requirements.RequiredCapacity = capacity
	return b
}

func starting(id, pool string, vcpus uint32) *managerv1.Node {
	n := node(id, "pool", pool)
	n.State, n.Elastic, n.Provider = nodeStarting, true, "mock"
	n.Hardware.Vcpus = vcpus
	return n
}

// onlineElastic is an online node a provider made in pool, its worker
// running runtime rt (2 vCPUs: 1 unit).
func onlineElastic(id, pool, rt string) *managerv1.Node {
	n := node(id, "pool", pool)
	n.Elastic, n.Provider, n.Runtime = true, "mock", rt
	n.Hardware.Vcpus = 2
	return n
}

// imageOnly gives the bundle's jobs one service with an image and no
// command (a Docker-only spec).
func imageOnly(b *managerv1.Bundle) *managerv1.Bundle {
	for _, j := range b.GetJobs() {
		j.Job.Services = []*managerv1.Service{{Name: "main", Image: "enc:1"}}
	}
	return b
}

func TestProvision(t *testing.T) {
	t.Parallel()
	elastic := Policy{
		Placement: placement.Config{Pools: map[string][]string{"live": {"cheap", "burst"}}},
		Elastic:   []ElasticTier{{Tier: "burst", Provider: "mock", VCPUs: 4}},
	}
	full := func() *managerv1.Node { n := node("a", "pool", "cheap"); n.Hardware.Vcpus = 1; return n } // 0.5 units
	for _, tc := range []struct {
		name    string
		policy  Policy
		nodes   []*managerv1.Node
		bundles []*managerv1.Bundle
		hold    map[string]time.Time
		// want: how many nodes are created; starts: instances bound now.
		want, starts int
		summary      string
	}{
		{name: "fits: no node created", policy: elastic, nodes: []*managerv1.Node{node("a", "pool", "cheap")},
			bundles: []*managerv1.Bundle{bigBundle("x", "live", 1)}, want: 0, starts: 1},
		{name: "nothing fits: one node for two jobs that share it", policy: elastic, nodes: []*managerv1.Node{full()},
			bundles: []*managerv1.Bundle{bigBundle("x", "live", 1), bigBundle("y", "live", 1)}, want: 1, summary: "creating a node in elastic tier burst"},
		{name: "nothing fits: a node each when they do not share", policy: elastic, nodes: []*managerv1.Node{full()},
			bundles: []*managerv1.Bundle{bigBundle("x", "live", 1.5), bigBundle("y", "live", 1.5)}, want: 2},
		{name: "a starting node takes it: none created", policy: elastic, nodes: []*managerv1.Node{full(), starting("m1", "burst", 4)},
			bundles: []*managerv1.Bundle{bigBundle("x", "live", 1)}, want: 0, summary: "waiting for node m1"},
		{name: "too big for a new node", policy: elastic, nodes: []*managerv1.Node{full()},
			bundles: []*managerv1.Bundle{bigBundle("x", "live", 8)}, want: 0, summary: "would not take it either"},
		{name: "tier on hold after a failure", policy: elastic, nodes: []*managerv1.Node{full()},
			bundles: []*managerv1.Bundle{bigBundle("x", "live", 1)}, hold: map[string]time.Time{"burst": t0.Add(time.Second)}, want: 0},
		{name: "hold over", policy: elastic, nodes: []*managerv1.Node{full()},
			bundles: []*managerv1.Bundle{bigBundle("x", "live", 1)}, hold: map[string]time.Time{"burst": t0}, want: 1},
		{name: "pool without an elastic tier", policy: elastic, nodes: []*managerv1.Node{full()},
			bundles: []*managerv1.Bundle{bigBundle("x", "cheap", 1)}, want: 0},
		{name: "no provider", policy: Policy{}, nodes: []*managerv1.Node{full()},
			bundles: []*managerv1.Bundle{bigBundle("x", "", 1)}, want: 0},
		// Issue 12 item 11: the tier's nodes run processes; an image-only
		// job is not given node after node it cannot run on.
		{name: "the tier's runtime cannot run it", policy: elastic, nodes: []*managerv1.Node{full(), onlineElastic("m1", "burst", "process")},
			bundles: []*managerv1.Bundle{imageOnly(bigBundle("x", "live", 1))}, want: 0, summary: "would not take it either"},
		{name: "the tier's runtime runs it", policy: elastic, nodes: []*managerv1.Node{full(), onlineElastic("m1", "burst", "docker")},
			bundles: []*managerv1.Bundle{imageOnly(bigBundle("x", "live", 1.5))}, want: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := View{Nodes: tc.nodes, Bundles: tc.bundles, ProvisionHold: tc.hold}
			for _, b := range tc.bundles {
				v.Jobs = append(v.Jobs, jobsOf(b)...)
			}
			d := Plan(v, tc.policy, t0)
			ps := provisions(d)
			if len(ps) != tc.want {
				t.Fatalf("created %d nodes (%v), want %d; unplaced %v", len(ps), ps, tc.want, d.Unplaced)
			}
			for _, p := range ps {
				if p.Pool != "burst" || p.Provider != "mock" || !strings.Contains(p.Reason, "nothing fits") {
					t.Errorf("provision %+v: want tier burst through mock, saying why", p)
				}
			}
			if got := len(starts(d)); got != tc.starts {
				t.Errorf("starts = %v, want %d", starts(d), tc.starts)
			}
			if tc.summary != "" {
				found := false
				for _, u := range d.Unplaced {
					found = found || strings.Contains(u.Summary, tc.summary)
				}
				if !found {
					t.Errorf("unplaced %v: want a summary saying %q", d.Unplaced, tc.summary)
				}
			}
		})
	}
}

// An online node with room wins over a starting one.
func TestProvisionPrefersOnlineNodes(t *testing.T) {
	t.Parallel()
	p := Policy{Elastic: []ElasticTier{{Tier: "burst", Provider: "mock", VCPUs: 4}}}
	b := bigBundle("x", "", 0.5)
	v := View{Nodes: []*managerv1.Node{node("z"), starting("a", "burst", 2)}, Bundles: []*managerv1.Bundle{b}, Jobs: jobsOf(b)}
	d := Plan(v, p, t0)
	if got := starts(d); got["x.channel.0/primary"] != "z" {
		t.Fatalf("starts = %v, unplaced %v: want the online node z", got, d.Unplaced)
	}
}

// A cloud tier creates a node of its cheapest instance type that takes the
// instance, and the summary says why the cheaper ones would not do.
func TestProvisionCheapestTypeThatFits(t *testing.T) {
	t.Parallel()
	cloud := Policy{Elastic: []ElasticTier{{Tier: "burst", Provider: "aws", Types: []ElasticType{
		{Name: "c6i.large", VCPUs: 2, Region: "eu-west-1", Fallbacks: []string{"c6i.xlarge", "c6i.2xlarge"}},
		{Name: "c6i.xlarge", VCPUs: 4, Region: "eu-west-1", Fallbacks: []string{"c6i.2xlarge"}},
		{Name: "c6i.2xlarge", VCPUs: 8, Region: "eu-west-1"},
	}}}}
	for _, tc := range []struct {
		capacity float64
		want     string
		summary  string
	}{
		{0.5, "c6i.large", "creating a c6i.large (2 vCPUs, eu-west-1) node in elastic tier burst"},
		{1.5, "c6i.xlarge", "c6i.large (2 vCPUs, eu-west-1) would not take it (capacity:"},
		{3, "c6i.2xlarge", "c6i.xlarge (4 vCPUs, eu-west-1) would not take it"},
		{5, "", "no instance type of elastic tier burst would take it"},
	} {
		b := bigBundle("x", "burst", tc.capacity)
		d := Plan(View{Bundles: []*managerv1.Bundle{b}, Jobs: jobsOf(b)}, cloud, t0)
		ps := provisions(d)
		switch {
		case tc.want == "" && len(ps) != 0:
			t.Errorf("capacity %g: created %v, want none", tc.capacity, ps)
		case tc.want != "" && (len(ps) != 1 || ps[0].Type == nil || ps[0].Type.Name != tc.want || ps[0].Provider != "aws"):
			t.Errorf("capacity %g: provisions %+v, want one %s", tc.capacity, ps, tc.want)
		}
		if len(d.Unplaced) != 1 || !strings.Contains(d.Unplaced[0].Summary, tc.summary) {
			t.Errorf("capacity %g: unplaced %v, want a summary saying %q", tc.capacity, d.Unplaced, tc.summary)
		}
		e := ExplainElastic(cloud, placement.Request{JobID: "x", Role: "primary", Pool: "burst", Requirements: placement.Requirements{Capacity: tc.capacity}})
		if e == nil || e.GetInstanceType() != tc.want {
			t.Errorf("capacity %g: explained %v, want %q", tc.capacity, e, tc.want)
		}
	}
}

// Property: the type chosen is the first of the tier's list a new node of
// which holds the instance's capacity, and every cheaper one is rejected
// with a reason.
func TestChooseTypeProperty(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		vcpus := rapid.SliceOfN(rapid.Uint32Range(1, 64), 1, 6).Draw(t, "vcpus")
		capacity := float64(rapid.IntRange(1, 80).Draw(t, "halfUnits")) / 4
		et := ElasticTier{Tier: "t", Provider: "aws"}
		for i, v := range vcpus {
			et.Types = append(et.Types, ElasticType{Name: fmt.Sprintf("type-%d", i), VCPUs: v})
		}
		got, rej, ok := chooseType(placement.Config{}, et, placement.Request{JobID: "j", Role: "primary", Requirements: placement.Requirements{Capacity: capacity}})
		want := -1
		for i, v := range vcpus {
			if float64(v)*0.5 >= capacity {
				want = i
				break
			}
		}
		if want < 0 {
			if ok || len(rej) != len(vcpus) {
				t.Fatalf("capacity %g over %v: chose %v (%v), rejections %d", capacity, vcpus, got, ok, len(rej))
			}
			return
		}
		if !ok || got.Name != fmt.Sprintf("type-%d", want) || len(rej) != want {
			t.Fatalf("capacity %g over %v: chose %v (%v) after %d rejections, want type-%d", capacity, vcpus, got.Name, ok, len(rej), want)
		}
		for _, r := range rej {
			if r.Reason == "" {
				t.Fatalf("a rejection without a reason: %+v", r)
			}
		}
	})
}
