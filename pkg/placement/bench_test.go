package placement

import (
	"fmt"
	"maps"
	"runtime"
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
	runPlacementBenchWith(b, nodes, reqs, wantPlaced, (*State).PlaceBatch)
}

// runPlacementBenchWith is runPlacementBench with the batch placement
// given (the indexed PlaceBatch, or the reference scan).
func runPlacementBenchWith(b *testing.B, nodes []Node, reqs []Request, wantPlaced int, batch func(*State, []Request) ([]Result, error)) {
	var placing, cpu time.Duration
	made, iters := 0, 0
	for b.Loop() {
		b.StopTimer()
		s, err := NewState(Config{}, nodes, nil)
		if err != nil {
			b.Fatal(err)
		}
		// Collect now what building the State (untimed) left to collect,
		// or its marking runs concurrently with the placing and is charged
		// to it: at 50,000 nodes that is most of the timed wall clock on a
		// 2-core machine.
		runtime.GC()
		b.StartTimer()
		start, cpu0 := time.Now(), processCPU()
		res, err := batch(s, reqs)
		placing += time.Since(start)
		cpu += processCPU() - cpu0
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
		iters++
	}
	b.ReportMetric(float64(made)/placing.Seconds(), "placements/s")
	b.ReportMetric(float64(made)/float64(iters), "placed/op")
	b.ReportMetric(float64(placing.Microseconds())/1000/float64(iters), "place-ms/op")
	if cpu > 0 {
		b.ReportMetric(float64(cpu.Microseconds())/1000/float64(iters), "place-cpu-ms/op")
	}
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

// BenchmarkPlacementAtScale places 1,200 jobs (the ServiceScheduler
// shape: 0.8 units and one "sdi" each, half the nodes lacking it) on 1,000
// and on 50,000 empty 4-vCPU nodes, without and with spread over 50 racks,
// by the indexed path (path=index, State.PlaceBatch) and by the reference
// linear scan beside it (path=scan, reference_test.go). 1,000 nodes hold
// 1,000 of the jobs (two on each of the 500 with "sdi"), so 200 are refused
// there; 50,000 nodes hold all 1,200. Reported: placements made per second
// of placing, placements made per iteration and the placing time per
// iteration, wall clock and the process's CPU time (on a shared machine
// the wall clock also holds the time other processes had the cores) (building the State is not timed, and the garbage collector is
// run after it so its marking is not either; building the index for the
// request shape, on the first placement, is timed).
//
//	go test -run x -bench BenchmarkPlacementAtScale -count 3 ./pkg/placement/
func BenchmarkPlacementAtScale(b *testing.B) {
	for _, clusterSize := range []int{1000, 50000} {
		nodes := benchNodes(clusterSize)
		for _, spread := range []bool{false, true} {
			reqs := benchJobs(1200, spread)
			want := min(len(reqs), clusterSize)
			for _, path := range []string{"index", "scan"} {
				batch := (*State).PlaceBatch
				if path == "scan" {
					batch = (*State).placeBatchScan
				}
				b.Run(fmt.Sprintf("nodes=%d/spread=%v/path=%s", clusterSize, spread, path), func(b *testing.B) {
					runPlacementBenchWith(b, nodes, reqs, want, batch)
				})
			}
		}
	}
}

// BenchmarkPlacementFill places 100,000 jobs on 10,000 empty 4-vCPU nodes
// (0.2 units each: ten to a node, so the cluster ends exactly full).
func BenchmarkPlacementFill(b *testing.B) {
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

// BenchmarkNewState indexes the nodes of BenchmarkPlacementAtScale (1,000
// and 50,000), which its placing time leaves out: sorting them, their
// capability tables and, since decision 0054, their classes.
func BenchmarkNewState(b *testing.B) {
	for _, clusterSize := range []int{1000, 50000} {
		nodes := benchNodes(clusterSize)
		b.Run(fmt.Sprintf("nodes=%d", clusterSize), func(b *testing.B) {
			for b.Loop() {
				if _, err := NewState(Config{}, nodes, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkPlacementOffline places 1,200 jobs of the ServiceScheduler
// shape on 10,000 nodes of which 5,000 are offline (every other node with
// "sdi" among them, so 2,500 take the jobs), the offline ones given as the
// AutoManager gave them before decision 0063 — in every request's Exclude,
// a copy per request — and as it gives them since: Node.Unavailable, once
// in the State. Both place the same (TestUnavailableIsExclusionOfEveryRequest).
//
//	CGO_ENABLED=0 go test -run x -bench BenchmarkPlacementOffline -count 3 ./pkg/placement/
func BenchmarkPlacementOffline(b *testing.B) {
	nodes := benchNodes(10000)
	offline := map[string]string{}
	for i := range nodes {
		if i%4 < 2 {
			offline[nodes[i].ID] = "the node is lost"
		}
	}
	reqs := benchJobs(1200, false)
	for _, given := range []string{"exclude", "unavailable"} {
		ns, rs := nodes, reqs
		if given == "exclude" {
			rs = make([]Request, len(reqs))
			copy(rs, reqs)
		} else {
			ns = make([]Node, len(nodes))
			copy(ns, nodes)
			for i := range ns {
				ns[i].Unavailable = offline[ns[i].ID]
			}
		}
		b.Run("offline="+given, func(b *testing.B) {
			runPlacementBenchWith(b, ns, rs, len(reqs), func(s *State, reqs []Request) ([]Result, error) {
				if given == "exclude" {
					for i := range reqs { // as placeSlot did: a copy per request
						reqs[i].Exclude = maps.Clone(offline)
					}
				}
				return s.PlaceBatch(reqs)
			})
		})
	}
}
