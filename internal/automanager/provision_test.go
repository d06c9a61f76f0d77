package automanager

import (
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
	p := Policy{Elastic: []ElasticTier{{Tier: "burst", Provider: "mock", VCPUs: 4}}}
	b := bigBundle("x", "", 0.5)
	v := View{Nodes: []*managerv1.Node{node("z"), starting("a", "burst", 2)}, Bundles: []*managerv1.Bundle{b}, Jobs: jobsOf(b)}
	d := Plan(v, p, t0)
	if got := starts(d); got["x.channel.0/primary"] != "z" {
		t.Fatalf("starts = %v, unplaced %v: want the online node z", got, d.Unplaced)
	}
}
