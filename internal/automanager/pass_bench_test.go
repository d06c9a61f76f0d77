package automanager

import (
	"context"
	"fmt"
	"log/slog"
	"testing"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/internal/clock"
)

// benchFleet is a fakeAPI of n running jobs kept placed (autoPlacement),
// ten to a node, and the AutoManager over it after its first full pass.
func benchFleet(b *testing.B, n int) (*AutoManager, *countingAPI) {
	b.Helper()
	api := &countingAPI{fakeAPI: newFakeAPI(), reads: map[string]int{}}
	for i := range n / 10 {
		api.nodes = append(api.nodes, node(fmt.Sprintf("node-%05d", i)))
	}
	for i := range n {
		jh := autoJob(fmt.Sprintf("job-%07d", i))
		jh.Job.State = managerv1.JobState_JOB_STATE_ACTIVE
		jh.History = nil
		api.put(jh)
		api.instance(jh.Job.JobId, "primary", fmt.Sprintf("node-%05d", i/10), phRunning)
	}
	am := New(Config{API: api, Clock: clock.NewFake(t0), Logger: slog.New(slog.DiscardHandler)})
	if _, err := am.Pass(context.Background()); err != nil {
		b.Fatal(err)
	}
	return am, api
}

// BenchmarkFullPass is the safety net's cost: read and plan every job
// (the reads are the fake's: proto clones of every job, as the in-process
// reads make).
//
//	go test ./internal/automanager -run '^$' -bench 'FullPass|PassChanges' -benchtime=5x
func BenchmarkFullPass(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		b.Run(fmt.Sprintf("jobs=%d", n), func(b *testing.B) {
			am, _ := benchFleet(b, n)
			ctx := context.Background()
			for b.Loop() {
				if _, err := am.Pass(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkPassChanges is an event's cost: one job touched (a new job of
// no automatic placement) among n.
func BenchmarkPassChanges(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		b.Run(fmt.Sprintf("jobs=%d", n), func(b *testing.B) {
			am, api := benchFleet(b, n)
			ctx := context.Background()
			i := 0
			for b.Loop() {
				i++
				plain := &managerv1.JobWithHistory{Job: &managerv1.Job{JobId: fmt.Sprintf("plain-%07d", i)}}
				api.put(plain)
				am.changes.note(jobEvent(plain))
				if _, err := am.passChanges(ctx, am.changes.take(), false); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkPlanWithOfflineNodes is a new primary's first pass after an
// overload (simulation run J): 10,000 nodes, half of them lost, and 2,000
// jobs to place on the online half. It reports the placements per second
// of the whole Plan (building the placement state included).
//
//	CGO_ENABLED=0 go test ./internal/automanager -run x -bench PlanWithOfflineNodes -benchtime=3x
func BenchmarkPlanWithOfflineNodes(b *testing.B) {
	const nodes, offline, jobs = 10_000, 5_000, 2_000
	v := View{}
	for i := range nodes {
		n := node(fmt.Sprintf("node-%05d", i))
		if i%2 == 1 && i/2 < offline {
			n = lost(n)
		}
		v.Nodes = append(v.Nodes, n)
	}
	for i := range jobs {
		v.Jobs = append(v.Jobs, autoJob(fmt.Sprintf("job-%05d", i)))
	}
	placed := 0
	for b.Loop() {
		placed += len(starts(Plan(v, Policy{}, t0)))
	}
	if placed != jobs*b.N {
		b.Fatalf("placed %d of %d", placed, jobs*b.N)
	}
	b.ReportMetric(float64(placed)/b.Elapsed().Seconds(), "placements/s")
}

// BenchmarkPassPlacesOne is an event that needs a node: one new job kept
// placed, among jobs running on 10,000 nodes (16 vCPUs, room to spare).
// The pass places on the mirror's placement state, built by the first
// pass that needed it (before the clock starts) and kept since: the
// nodes (decision 0063) and every running job's allocation are not read
// again (decision 0068), so the pass's cost does not grow with the jobs.
//
//	CGO_ENABLED=0 go test ./internal/automanager -run x -bench PassPlacesOne -benchtime=20x
func BenchmarkPassPlacesOne(b *testing.B) {
	for _, jobs := range []int{1_000, 100_000} {
		b.Run(fmt.Sprintf("nodes=10000/jobs=%d", jobs), func(b *testing.B) {
			api := &countingAPI{fakeAPI: newFakeAPI(), reads: map[string]int{}}
			runningFleet(api.fakeAPI, 10_000, jobs)
			am := New(Config{API: api, Clock: clock.NewFake(t0), Logger: slog.New(slog.DiscardHandler)})
			ctx := context.Background()
			if _, err := am.Pass(ctx); err != nil {
				b.Fatal(err)
			}
			i := 0
			place := func() {
				i++
				jh := autoJob(fmt.Sprintf("new-%07d", i))
				jh.Job.AutoPlacement.Requirements.RequiredCapacity = 0.01
				api.put(jh)
				am.changes.note(jobEvent(jh))
				if _, err := am.passChanges(ctx, am.changes.take(), false); err != nil {
					b.Fatal(err)
				}
			}
			place() // the first builds the mirror's placement state
			for b.Loop() {
				place()
			}
			if got := len(api.starts()); got != i {
				b.Fatalf("%d started of %d", got, i)
			}
		})
	}
}

// BenchmarkSagaPlaceTarget is a migration's target placement among jobs
// running on 10,000 nodes. path=read is the saga on its own: it reads the
// whole view and builds the fleet's placement state for each target, so
// its cost grows with the jobs. path=kept is the saga under an
// AutoManager: it places on the mirror's kept state (keptTargets; the
// state built before the clock starts, as a running AutoManager has it).
//
//	CGO_ENABLED=0 go test ./internal/automanager -run x -bench SagaPlaceTarget -benchtime=5x -benchmem
func BenchmarkSagaPlaceTarget(b *testing.B) {
	for _, jobs := range []int{1_000, 100_000} {
		for _, path := range []string{"read", "kept"} {
			b.Run(fmt.Sprintf("nodes=10000/jobs=%d/path=%s", jobs, path), func(b *testing.B) {
				api := newFakeAPI()
				runningFleet(api, 10_000, jobs)
				s := newSaga(api, clock.NewFake(t0), slog.New(slog.DiscardHandler), Policy{}, nil)
				ctx := context.Background()
				if path == "kept" {
					am := New(Config{API: api, Clock: clock.NewFake(t0), Logger: slog.New(slog.DiscardHandler)})
					if _, err := am.Pass(ctx); err != nil {
						b.Fatal(err)
					}
					am.mirrorMu.Lock()
					am.mirror.placement()
					am.mirrorMu.Unlock()
					s = am.saga
				}
				m := &migration{st: &managerv1.MigrationState{SourceJobId: "job-0000000", SourceNodeId: "node-00000",
					TargetRole: "primary@bench", Strategy: stratOverlap}}
				for b.Loop() {
					if node, _, why, _ := s.placeTarget(ctx, m); node == "" {
						b.Fatalf("no target: %s", why)
					}
				}
			})
		}
	}
}

// runningFleet gives api nodes of 16 vCPUs (in 50 racks) and jobs kept
// placed, running round robin on them.
func runningFleet(api *fakeAPI, nodes, jobs int) {
	for i := range nodes {
		n := node(fmt.Sprintf("node-%05d", i), "rack", fmt.Sprintf("r%02d", i%50))
		n.Hardware.Vcpus = 16
		api.nodes = append(api.nodes, n)
	}
	for i := range jobs {
		jh := autoJob(fmt.Sprintf("job-%07d", i))
		jh.Job.State = managerv1.JobState_JOB_STATE_ACTIVE
		jh.History = nil
		api.put(jh)
		api.instance(jh.Job.JobId, "primary", fmt.Sprintf("node-%05d", i%nodes), phRunning)
	}
}

// BenchmarkPassOnMigrationEvent is the pass after one migration's event
// among 10,000 jobs, with as many ended migrations kept in the store (they
// stay until an operator forgets them): it reads that migration's record,
// not every record.
//
//	CGO_ENABLED=0 go test ./internal/automanager -run x -bench PassOnMigrationEvent -benchmem
func BenchmarkPassOnMigrationEvent(b *testing.B) {
	for _, kept := range []int{1_000, 100_000} {
		b.Run(fmt.Sprintf("jobs=10000/migrations=%d", kept), func(b *testing.B) {
			am, api := benchFleet(b, 10_000)
			for i := range kept {
				id := fmt.Sprintf("old-%07d", i)
				api.migs[id] = &managerv1.MigrationState{MigrationId: id, SourceJobId: fmt.Sprintf("job-%07d", i%10_000), Phase: phDone}
			}
			ctx := context.Background()
			if _, err := am.Pass(ctx); err != nil {
				b.Fatal(err)
			}
			st := &managerv1.MigrationState{MigrationId: "m-live", SourceJobId: "job-0000001", SourceRole: "primary", Phase: phPlacing}
			api.migs["m-live"] = st
			for b.Loop() {
				am.changes.note(&managerv1.Event{Kind: &managerv1.Event_MigrationUpdated{MigrationUpdated: st}})
				if _, err := am.passChanges(ctx, am.changes.take(), false); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
