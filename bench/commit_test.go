package bench

// The cost of committing bindings as the store grows:
//
//	go test ./bench -run '^$' -bench 'CommitAtStoreSize' -benchtime=1x
//
// # BenchmarkCommitAtStoreSize/stored=0, /stored=100000, /stored=1000000
//
// The FSM alone (state.State, no raft, no disk): 10,000 online nodes of 4
// vCPUs, `stored` jobs already in the store and bound (each with its
// instance, as in a running fleet), then 100,000 new jobs created and
// bound — BindInstances commands of 1,000 binds each, as the AutoManager's
// StartJobs plans are. Timed: the bind commands only.
// Reported: binds/s (bindings made, counted from the commands' results,
// not requested), ms per 1,000-bind command, and cpu-binds/s: bindings per
// second of CPU time this process used while the commands ran — on a
// machine shared with other work the wall-clock rate measures the
// neighbours as much as the store, the CPU rate does not; and
// faults/1000-binds, the page faults the process took under the clock
// (near 0: the heap had the room, see below). -commit.cpuprofile FILE
// writes a CPU profile of the timed binds of each size to FILE-stored=N.
//
// The garbage collector is off while the commands run (a collection first,
// then GOGC off, restored after): what one GC cycle costs grows with the
// heap — with a million jobs stored it marks gigabytes — while how often
// cycles run falls in proportion, so over time the GC's share per commit
// does not depend on the store; but whether a cycle lands in a window of a
// few seconds is chance, and measured with the GC on the same code read
// 7,292 and 32,951 cpu-binds/s at a million stored in two runs. With it
// off the figures are the commits' own cost.
// What a commit costs should not depend on `stored`: a bind touches its own
// job and instance rows and the node's index entries, never the rest.

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/internal/store/state"
)

// cmApply applies cmd at the next index, failing the benchmark on error.
func cmApply(b *testing.B, s *state.State, idx *uint64, cmd *storev1.Command) state.Result {
	*idx++
	if cmd.Time == nil {
		cmd.Time = timestamppb.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(*idx) * time.Millisecond))
	}
	res := s.Apply(*idx, cmd)
	if res.Err != nil {
		b.Fatalf("apply %T: %v", cmd.GetCmd(), res.Err)
	}
	return res
}

// cmNodes registers n online nodes of 4 vCPUs.
func cmNodes(b *testing.B, s *state.State, idx *uint64, n int) []string {
	ids := make([]string, n)
	for i := range n {
		id := fmt.Sprintf("node-%05d", i)
		ids[i] = id
		hw := &managerv1.Hardware{Vcpus: 4}
		cmApply(b, s, idx, &storev1.Command{Cmd: &storev1.Command_RegisterSlot{RegisterSlot: &storev1.RegisterSlot{NodeId: id, NodeName: id, Token: "tok-" + id}}})
		cmApply(b, s, idx, &storev1.Command{Cmd: &storev1.Command_MemberRegister{MemberRegister: &storev1.MemberRegister{
			Token: "tok-" + id, NodeSecret: "sec-" + id, Address: fmt.Sprintf("10.0.%d.%d:7000", i>>8&255, i&255), Hardware: hw, Runtime: "process",
		}}})
		cmApply(b, s, idx, &storev1.Command{Cmd: &storev1.Command_NodeOnline{NodeOnline: &storev1.NodeOnline{
			NodeId: id, Hello: &managerv1.WorkerHello{NodeId: id, Hardware: hw, Runtime: "process"},
		}}})
	}
	return ids
}

// cmJobs creates count jobs prefix-NNNNNNN.
func cmJobs(b *testing.B, s *state.State, idx *uint64, prefix string, count int) []string {
	ids := make([]string, count)
	for i := range count {
		ids[i] = fmt.Sprintf("%s-%07d", prefix, i)
		cmApply(b, s, idx, stCreateCmd(ids[i], false, time.Time{}))
	}
	return ids
}

// cmBinds are BindInstances commands of per binds each, binding jobs to
// nodes round robin.
func cmBinds(jobs, nodes []string, per int) []*storev1.Command {
	var cmds []*storev1.Command
	for k := 0; k < len(jobs); k += per {
		bc := &storev1.BindInstances{}
		for i := k; i < min(k+per, len(jobs)); i++ {
			bc.Binds = append(bc.Binds, &storev1.BindInstance{JobId: jobs[i], Role: "primary", NodeId: nodes[i%len(nodes)],
				Options: &managerv1.StartJobOptions{Placement: &managerv1.PlacementEvent{Kind: "first"}}})
		}
		cmds = append(cmds, &storev1.Command{Cmd: &storev1.Command_BindInstances{BindInstances: bc}})
	}
	return cmds
}

// commitProfile profiles BenchmarkCommitAtStoreSize's timed binds only.
var commitProfile = flag.String("commit.cpuprofile", "", "BenchmarkCommitAtStoreSize: write a CPU profile of the timed binds only to FILE-stored=N")

func BenchmarkCommitAtStoreSize(b *testing.B) {
	for _, stored := range []int{0, 100_000, 1_000_000} {
		b.Run(fmt.Sprintf("stored=%d", stored), func(b *testing.B) {
			s := state.New(state.Limits{})
			var idx uint64
			nodes := cmNodes(b, s, &idx, 10000)
			const binds, per = 100_000, 1000
			old := cmJobs(b, s, &idx, "old", stored)
			for _, c := range cmBinds(old, nodes, per) {
				cmApply(b, s, &idx, c)
			}
			var took, cpu time.Duration
			var faults int64
			made := 0
			for range b.N {
				jobs := cmJobs(b, s, &idx, fmt.Sprintf("new%d", idx), binds)
				cmds := cmBinds(jobs, nodes, per)
				// The throwaway store is made with the collector off, as the
				// timed binds run: its garbage piles up as theirs will, and
				// the collection then frees room for all of it.
				runtime.GC()
				gcPercent := debug.SetGCPercent(-1)
				warmHeap(b, len(nodes), binds, per)
				runtime.GC()
				stopProfile := startProfile(b, *commitProfile, stored)
				start, cpu0, f0 := time.Now(), cpuTime(), pageFaults()
				for _, c := range cmds {
					res := cmApply(b, s, &idx, c)
					for _, r := range res.Value.(*managerv1.StartJobsResponse).GetResults() {
						if r.GetErrorCode() == "" {
							made++
						}
					}
				}
				took += time.Since(start)
				cpu += cpuTime() - cpu0
				faults += pageFaults() - f0
				stopProfile()
				debug.SetGCPercent(gcPercent)
			}
			if made != binds*b.N {
				b.Fatalf("bound %d of %d", made, binds*b.N)
			}
			b.ReportMetric(float64(made)/took.Seconds(), "binds/s")
			b.ReportMetric(ms(took)/float64(b.N*binds/per), "ms/command")
			b.ReportMetric(float64(made)/cpu.Seconds(), "cpu-binds/s")
			b.ReportMetric(float64(faults)*1000/float64(made), "faults/1000-binds")
		})
	}
}

// startProfile starts a CPU profile to file-stored=N when file is set; the
// returned function stops it.
func startProfile(b *testing.B, file string, stored int) (stop func()) {
	if file == "" {
		return func() {}
	}
	f, err := os.Create(fmt.Sprintf("%s-stored=%d", file, stored))
	if err != nil {
		b.Fatal(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		b.Fatal(err)
	}
	return func() {
		pprof.StopCPUProfile()
		_ = f.Close()
	}
}

// warmHeap creates and binds jobs jobs, per to a command, on a throwaway
// store of n nodes: collected, it leaves the room a timed round of as many
// binds needs (see BenchmarkCommitAtStoreSize).
func warmHeap(b *testing.B, n, jobs, per int) {
	s := state.New(state.Limits{})
	var idx uint64
	nodes := cmNodes(b, s, &idx, n)
	for _, c := range cmBinds(cmJobs(b, s, &idx, "warm", jobs), nodes, per) {
		cmApply(b, s, &idx, c)
	}
}

// pageFaults is the page faults this process has taken (minor and major).
func pageFaults() int64 {
	ru := selfUsage()
	return ru.Minflt + ru.Majflt
}

// cpuTime is the CPU time (user and system) this process has used.
func cpuTime() time.Duration {
	ru := selfUsage()
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// selfUsage is this process's resource usage (zero if it cannot be read).
func selfUsage() syscall.Rusage {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return ru
}
