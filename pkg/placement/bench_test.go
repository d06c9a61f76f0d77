package placement

import (
	"fmt"
	"testing"
	"time"
)

// benchNodes is the cluster of Nomad's BenchmarkServiceScheduler: n nodes
// of 4 cores over 50 racks; every other node lacks the "sdi" capability the
// jobs require, so half of the cluster is ineligible.
func benchNodes(n int) []Node {
	nodes := make([]Node, n)
	for i := range nodes {
		nodes[i] = Node{
			ID:         fmt.Sprintf("node-%05d", i),
			VCPUs:      4,
			Attributes: map[string]string{"rack": fmt.Sprintf("r%02d", i%50)},
		}
		if i%2 == 0 {
			nodes[i].Capabilities = []Capability{{Name: "sdi", Count: 4}}
		}
	}
	return nodes
}

// benchJobs are count instances of one service: 0.8 reference units each,
// so at most 2 fit on a 4-vCPU node (2.0 units), requiring one "sdi".
func benchJobs(count int, spread bool) []Request {
	reqs := make([]Request, count)
	for i := range reqs {
		reqs[i] = Request{
			JobID: fmt.Sprintf("svc-%05d", i), Role: "primary", Template: "svc",
			Requirements: Requirements{Capacity: 0.8, Capabilities: []Capability{{Name: "sdi", Count: 1}}},
		}
		if spread {
			reqs[i].Spread = &Spread{Attribute: "rack", Group: "svc"}
		}
	}
	return reqs
}

// runPlacementBench places reqs on a fresh state of nodes per iteration
// and reports the placements made (results with a node, not requests) per
// second of placing.
func runPlacementBench(b *testing.B, nodes []Node, reqs []Request, wantPlaced int) {
	var placing time.Duration
	made := 0
	for b.Loop() {
		b.StopTimer()
		s, err := NewState(Config{}, nodes, nil)
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		start := time.Now()
		res, err := s.PlaceBatch(reqs)
		placing += time.Since(start)
		if err != nil {
			b.Fatal(err)
		}
		placed := 0
		for _, r := range res {
			if r.NodeID != "" {
				placed++
			}
		}
		if placed != wantPlaced {
			b.Fatalf("placed %d of %d, want %d", placed, len(reqs), wantPlaced)
		}
		made += placed
	}
	b.ReportMetric(float64(made)/placing.Seconds(), "placements/s")
}

// BenchmarkServiceScheduler mirrors hashicorp/nomad
// scheduler/benchmarks BenchmarkServiceScheduler: plan only (no raft).
func BenchmarkServiceScheduler(b *testing.B) {
	for _, clusterSize := range []int{1000, 10000} {
		nodes := benchNodes(clusterSize)
		for _, rackSpread := range []bool{false, true} {
			for _, jobs := range []int{50, 300, 600, 900, 1200} {
				reqs := benchJobs(jobs, rackSpread)
				want := min(jobs, clusterSize) // half the nodes × 2 per node
				b.Run(fmt.Sprintf("%d nodes %d jobs spread=%v", clusterSize, jobs, rackSpread), func(b *testing.B) {
					runPlacementBench(b, nodes, reqs, want)
				})
			}
		}
	}
}

// BenchmarkPlacementAtScale places 100,000 jobs on 10,000 empty 4-vCPU
// nodes (0.2 units each: ten to a node, so the cluster ends exactly full).
func BenchmarkPlacementAtScale(b *testing.B) {
	nodes := benchNodes(10000)
	for i := range nodes {
		nodes[i].Capabilities = nil
	}
	reqs := make([]Request, 100000)
	for i := range reqs {
		reqs[i] = Request{JobID: fmt.Sprintf("job-%06d", i), Role: "primary", Requirements: Requirements{Capacity: 0.2}}
	}
	runPlacementBench(b, nodes, reqs, len(reqs))
}
