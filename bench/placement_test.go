package bench

// Placement benchmarks with the bindings committed through raft, beside the
// plan-only figures of pkg/placement (BenchmarkServiceScheduler there):
//
//	go test ./bench -run '^$' -bench 'PlacementCommitted' -benchtime=3x
//	go test ./bench -run '^$' -bench 'PlacementAtScaleCommitted' -benchtime=1x
//
// # BenchmarkPlacementCommitted
//
// The shape of hashicorp/nomad's scheduler/benchmarks
// BenchmarkServiceScheduler: 1,000 and 10,000 nodes of 4 vCPUs over 50
// racks (a node tag), every other node lacking the "sdi" capability the
// jobs need (half the cluster ineligible), each job 0.8 reference units so
// at most two fit on a node (2.0 units); 50 … 1,200 jobs placed, without
// and with spread over racks. The nodes are registered and online in a
// real single-member store (raft + raft-wal on disk, fsync per batch), and
// the jobs created, before the clock starts. Timed per iteration: read the
// nodes from the store, index them (placement.NewState), place every job
// (PlaceBatch) and commit the bindings through raft as the AutoManager
// does — StartJobs plans of up to 1,000 (one BindInstances command each),
// four in flight. Each iteration places a fresh set of jobs against empty
// nodes (the store does not check capacity; the plan does). Reported:
// placements/s, and plan-ms / commit-ms per iteration.
//
// # BenchmarkPlacementAtScaleCommitted
//
// 10,000 empty nodes of 4 vCPUs and 100,000 jobs of 0.2 units (ten to a
// node: the cluster ends exactly full), placed and committed as above.
// Each iteration adds 100,000 more jobs to the store (the store does not
// check capacity), so -benchtime=3x places against 0, 100,000 and 200,000
// jobs already stored; each round's figures are logged (-v).

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/internal/store"
	"github.com/norsk-go/norsk-manager/pkg/placement"
)

// plApplyAll applies cmds through st, 64 at a time (raft batches them).
func plApplyAll(b *testing.B, st *store.Store, cmds []*storev1.Command) {
	b.Helper()
	ctx := context.Background()
	sem := make(chan struct{}, 64)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	for _, c := range cmds {
		c.Time = timestamppb.New(time.Now())
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			res, err := st.Apply(ctx, c)
			if err == nil {
				err = res.Err
			}
			if err != nil {
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if first != nil {
		b.Fatalf("setup: %v", first)
	}
}

// plNodes registers n online nodes of 4 vCPUs over 50 racks; when sdi,
// every other node has four "sdi" capabilities.
func plNodes(b *testing.B, st *store.Store, n int, sdi bool) {
	b.Helper()
	var reg, member, online []*storev1.Command
	for i := range n {
		id := fmt.Sprintf("node-%05d", i)
		reg = append(reg, &storev1.Command{Cmd: &storev1.Command_RegisterSlot{RegisterSlot: &storev1.RegisterSlot{
			NodeId: id, NodeName: id, Token: "tok-" + id,
		}}})
		var caps []*managerv1.Capability
		if sdi && i%2 == 0 {
			caps = []*managerv1.Capability{{Name: "sdi", Count: 4}}
		}
		hw := &managerv1.Hardware{Vcpus: 4}
		member = append(member, &storev1.Command{Cmd: &storev1.Command_MemberRegister{MemberRegister: &storev1.MemberRegister{
			Token: "tok-" + id, NodeSecret: "sec-" + id, Address: fmt.Sprintf("10.%d.%d.%d:7000", i>>16&255, i>>8&255, i&255),
			Hardware: hw, Capabilities: caps, Runtime: "process",
		}}})
		online = append(online, &storev1.Command{Cmd: &storev1.Command_NodeOnline{NodeOnline: &storev1.NodeOnline{
			NodeId: id, Hello: &managerv1.WorkerHello{NodeId: id, Hardware: hw, Capabilities: caps, Runtime: "process"},
		}}})
	}
	plApplyAll(b, st, reg)
	plApplyAll(b, st, member)
	plApplyAll(b, st, online)
	// Racks are node tags.
	var tags []*storev1.Command
	for i := range n {
		tags = append(tags, &storev1.Command{Cmd: &storev1.Command_SetNodeTags{SetNodeTags: &storev1.SetNodeTags{
			NodeId: fmt.Sprintf("node-%05d", i), Tags: map[string]string{"rack": fmt.Sprintf("r%02d", i%50)},
		}}})
	}
	plApplyAll(b, st, tags)
}

// plJobs creates count jobs named prefix-NNNNNN needing capacity units (and
// one "sdi" when sdi).
func plJobs(b *testing.B, st *store.Store, prefix string, count int, capacity float64, sdi bool) []*managerv1.Job {
	b.Helper()
	req := &managerv1.JobRequirements{RequiredCapacity: capacity}
	if sdi {
		req.RequiredCapabilities = []*managerv1.CapabilityRequirement{{Name: "sdi", Count: 1}}
	}
	jobs := make([]*managerv1.Job, count)
	cmds := make([]*storev1.Command, count)
	for i := range jobs {
		jobs[i] = &managerv1.Job{
			JobId:         fmt.Sprintf("%s-%06d", prefix, i),
			Services:      []*managerv1.Service{{Name: "main", Image: "svc", Command: []string{"/svc"}}},
			AutoPlacement: &managerv1.AutoPlacement{Requirements: req},
		}
		cmds[i] = &storev1.Command{Cmd: &storev1.Command_CreateJob{CreateJob: &storev1.CreateJob{Job: jobs[i]}}}
	}
	plApplyAll(b, st, cmds)
	return jobs
}

// plPlaceAndCommit is one pass: read the nodes, plan every job, commit the
// bindings. It returns the plan and commit times and how many were bound.
func plPlaceAndCommit(b *testing.B, st *store.Store, jobs []*managerv1.Job, spread bool) (plan, commit time.Duration, bound int) {
	start := time.Now()
	r := st.State().Snapshot()
	var view []placement.Node
	for _, rec := range r.Nodes(nil) {
		view = append(view, placement.NodeFromProto(rec.GetNode()))
	}
	s, err := placement.NewState(placement.Config{}, view, nil)
	if err != nil {
		b.Fatal(err)
	}
	reqs := make([]placement.Request, len(jobs))
	for i, j := range jobs {
		reqs[i] = placement.RequestForJob(placement.Config{}, j, nil, "primary")
		if spread {
			reqs[i].Spread = &placement.Spread{Attribute: "rack", Group: "svc"}
		}
	}
	res, err := s.PlaceBatch(reqs)
	if err != nil {
		b.Fatal(err)
	}
	var binds []*storev1.BindInstance
	for i, r := range res {
		if r.NodeID != "" {
			binds = append(binds, &storev1.BindInstance{JobId: jobs[i].GetJobId(), Role: "primary", NodeId: r.NodeID,
				Options: &managerv1.StartJobOptions{Placement: &managerv1.PlacementEvent{Kind: "first", Summary: r.Summary()}}})
		}
	}
	plan = time.Since(start)
	start = time.Now()
	var cmds []*storev1.Command
	for len(binds) > 0 {
		n := min(len(binds), 1000)
		cmds = append(cmds, &storev1.Command{Cmd: &storev1.Command_BindInstances{BindInstances: &storev1.BindInstances{Binds: binds[:n]}}})
		binds = binds[n:]
	}
	ctx := context.Background()
	sem := make(chan struct{}, 4)
	var wg sync.WaitGroup
	var mu sync.Mutex
	for _, c := range cmds {
		c.Time = timestamppb.New(time.Now())
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			res, err := st.Apply(ctx, c)
			if err != nil || res.Err != nil {
				b.Errorf("commit: %v %v", err, res.Err)
				return
			}
			n := 0
			for _, r := range res.Value.(*managerv1.StartJobsResponse).GetResults() {
				if r.GetErrorCode() == "" {
					n++
				}
			}
			mu.Lock()
			bound += n
			mu.Unlock()
		})
	}
	wg.Wait()
	return plan, time.Since(start), bound
}

func BenchmarkPlacementCommitted(b *testing.B) {
	for _, clusterSize := range []int{1000, 10000} {
		st := stOpenStore(b, b.TempDir())
		plNodes(b, st, clusterSize, true)
		round := 0
		for _, spread := range []bool{false, true} {
			for _, count := range []int{50, 300, 600, 900, 1200} {
				b.Run(fmt.Sprintf("%d nodes %d jobs spread=%v", clusterSize, count, spread), func(b *testing.B) {
					var plan, commit time.Duration
					placed := 0
					for b.Loop() {
						b.StopTimer()
						round++
						jobs := plJobs(b, st, fmt.Sprintf("r%03d", round), count, 0.8, true)
						b.StartTimer()
						p, c, n := plPlaceAndCommit(b, st, jobs, spread)
						plan, commit, placed = plan+p, commit+c, placed+n
					}
					if want := min(count, clusterSize) * b.N; placed != want {
						b.Fatalf("bound %d, want %d", placed, want)
					}
					b.ReportMetric(float64(placed)/(plan+commit).Seconds(), "placements/s")
					b.ReportMetric(float64(placed)/plan.Seconds(), "plan-placements/s")
					b.ReportMetric(float64(plan.Milliseconds())/float64(b.N), "plan-ms")
					b.ReportMetric(float64(commit.Milliseconds())/float64(b.N), "commit-ms")
				})
			}
		}
	}
}

func BenchmarkPlacementAtScaleCommitted(b *testing.B) {
	st := stOpenStore(b, b.TempDir())
	plNodes(b, st, 10000, false)
	round := 0
	var plan, commit time.Duration
	placed := 0
	for b.Loop() {
		b.StopTimer()
		round++
		jobs := plJobs(b, st, fmt.Sprintf("s%02d", round), 100000, 0.2, false)
		b.StartTimer()
		p, c, n := plPlaceAndCommit(b, st, jobs, false)
		plan, commit, placed = plan+p, commit+c, placed+n
		b.Logf("round %d, %d jobs stored before it: %d placed, plan %s, commit %s, %.0f placements/s",
			round, (round-1)*100000, n, p.Round(time.Millisecond), c.Round(time.Millisecond), float64(n)/(p+c).Seconds())
	}
	if placed != 100000*b.N {
		b.Fatalf("bound %d, want %d", placed, 100000*b.N)
	}
	b.ReportMetric(float64(placed)/(plan+commit).Seconds(), "placements/s")
	b.ReportMetric(float64(plan.Milliseconds())/float64(b.N), "plan-ms")
	b.ReportMetric(float64(commit.Milliseconds())/float64(b.N), "commit-ms")
}
