package bench

// The cost of committing bindings as the store grows:
//
//	go test ./bench -run '^$' -bench 'CommitAtStoreSize' -benchtime=3x
//
// # BenchmarkCommitAtStoreSize
//
// The FSM alone (state.State, no raft, no disk), three stores in one
// process: each of 10,000 online nodes of 4 vCPUs and with 0, 100,000 or
// 1,000,000 jobs already in it and bound (each with its instance, as in a
// running fleet). Each round creates 100,000 new jobs in every store and
// binds them — BindInstances commands of 1,000 binds each, as the
// AutoManager's StartJobs plans are — the stores taking turns, the first
// to go moving on by one each round, so that whatever the machine does
// meanwhile falls on all three alike. Timed: the bind commands only.
// Reported per store size N (-benchtime=Rx runs R rounds):
// binds/s-stored=N (bindings made, counted from the commands' results,
// not requested) and cpu-binds/s-stored=N (bindings per second of CPU
// time this process used while the commands ran: on a machine shared with
// other work the wall-clock rate measures the neighbours as much as the
// store, the CPU rate does not); flat-cpu, the slowest size's cpu-binds/s
// over the fastest's (1 is flat; the goal is ≥ 0.9); and
// faults/1000-binds, the page faults the process took under the clock
// (near 0: the heap had the room, see below). -commit.cpuprofile FILE
// writes a CPU profile of each size's last timed round to FILE-stored=N.
//
// -commit.stored lists the sizes (default 0,100000,1000000); one size per
// run (go test ./bench ... -commit.stored=1000000) measures a store alone in
// its process.
//
// One process, not one per size: what an allocation costs depends on the
// heap it lands in. In a process that holds only an empty store the
// commits' allocations take fresh, already zeroed spans; in one that
// holds a million jobs they fill the free slots of partly used spans,
// which the allocator finds and zeroes as it goes — measured in separate
// processes, 0.63–0.90 of the empty store's rate (decision 0047), the
// difference almost all in mallocgc. That is the price of a large heap,
// paid by every allocation in the Manager alike; in one heap the three
// stores pay it alike, and what differs is what the store itself does.
//
// The garbage collector is off while the commands run (a collection first,
// then GOGC off, restored after; -commit.gc below keeps it on): what one
// GC cycle costs grows with the heap — with a million jobs stored it marks
// gigabytes — while how often cycles run falls in proportion, so over time
// the GC's share per commit does not depend on the store; but whether a
// cycle lands in a window of a few seconds is chance, and measured with the GC on the same code read
// 7,292 and 32,951 cpu-binds/s at a million stored in two runs. With it
// off the figures are the commits' own cost.
//
// -commit.gc keeps the collector on under the clock, as in a Manager, and
// charges each bind its share of it: cpu-binds/s then counts the
// process's CPU under the clock less the collector's (runtime/metrics'
// /cpu/classes/gc estimate), and gc-us/bind is the collector's CPU per byte
// allocated over the process's life (the harness's forced collections and
// throwaway stores left out) times the bytes the binds allocated. A cycle
// marks the live heap and the pacer starts the next once the program has
// allocated in proportion to it, so that share depends little on whether
// a cycle lands under the clock. total-binds/s is the rate with both;
// flat-total, its slowest size over its fastest. Run each size alone
// (-commit.stored=N): each heap is then as large as its store makes it,
// and recycled as a running Manager's is. What the two modes show, and
// what neither can: decision 0047.
//
// What a commit costs should not depend on `stored`: a bind touches its own
// job and instance rows and the node's index entries, never the rest.

import (
	"flag"
	"fmt"
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"runtime/pprof"
	"strconv"
	"strings"
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

// commitGC keeps the collector on under the clock and charges its share.
var commitGC = flag.Bool("commit.gc", false, "BenchmarkCommitAtStoreSize: keep the garbage collector on and charge each bind its share of it")

// commitStored lists the store sizes BenchmarkCommitAtStoreSize compares.
var commitStored = flag.String("commit.stored", "0,100000,1000000", "BenchmarkCommitAtStoreSize: the store sizes, in jobs, compared in one process")

// commitSizes parses -commit.stored.
func commitSizes(b *testing.B) []int {
	var sizes []int
	for _, f := range strings.Split(*commitStored, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 0 {
			b.Fatalf("-commit.stored: %q is not a number of jobs", f)
		}
		sizes = append(sizes, n)
	}
	return sizes
}

func BenchmarkCommitAtStoreSize(b *testing.B) {
	const binds, per = 100_000, 1000
	type store struct {
		stored, made int
		s            *state.State
		idx          uint64
		nodes        []string
		took, cpu    time.Duration
		gc           time.Duration // the collector's share (-commit.gc)
		faults       int64
	}
	var stores []*store
	// harness is what the forced collections and the throwaway store cost
	// the collector; the share charged to binds leaves it out.
	var harness gcReading
	for _, stored := range commitSizes(b) {
		st := &store{stored: stored, s: state.New(state.Limits{})}
		st.nodes = cmNodes(b, st.s, &st.idx, 10000)
		for _, c := range cmBinds(cmJobs(b, st.s, &st.idx, "old", stored), st.nodes, per) {
			cmApply(b, st.s, &st.idx, c)
		}
		stores = append(stores, st)
	}
	for round := range b.N {
		for k := range stores {
			st := stores[(round+k)%len(stores)]
			jobs := cmJobs(b, st.s, &st.idx, fmt.Sprintf("new%d", st.idx), binds)
			cmds := cmBinds(jobs, st.nodes, per)
			// The throwaway store is made with the collector off, as the
			// timed binds run: its garbage piles up as theirs will, and
			// the collection then frees room for all of it.
			h0 := readGC()
			runtime.GC()
			gcPercent := debug.SetGCPercent(-1)
			warmHeap(b, len(st.nodes), binds, per)
			runtime.GC()
			if *commitGC {
				debug.SetGCPercent(gcPercent)
			}
			stopProfile := startProfile(b, *commitProfile, st.stored)
			gc0 := readGC()
			harness.add(gc0, h0)
			start, cpu0, f0 := time.Now(), cpuTime(), pageFaults()
			for _, c := range cmds {
				res := cmApply(b, st.s, &st.idx, c)
				for _, r := range res.Value.(*managerv1.StartJobsResponse).GetResults() {
					if r.GetErrorCode() == "" {
						st.made++
					}
				}
			}
			st.took += time.Since(start)
			st.cpu += cpuTime() - cpu0
			st.faults += pageFaults() - f0
			if *commitGC {
				gc1 := readGC()
				st.cpu -= gc1.cpu - gc0.cpu
				st.gc += harness.share(gc1, gc1.allocs-gc0.allocs)
			}
			stopProfile()
			debug.SetGCPercent(gcPercent)
		}
	}
	lo, hi := math.Inf(1), 0.0
	tlo, thi := math.Inf(1), 0.0
	made, faults := 0, int64(0)
	for _, st := range stores {
		if st.made != binds*b.N {
			b.Fatalf("stored=%d: bound %d of %d", st.stored, st.made, binds*b.N)
		}
		made += st.made
		faults += st.faults
		rate := float64(st.made) / st.cpu.Seconds()
		lo, hi = min(lo, rate), max(hi, rate)
		b.ReportMetric(float64(st.made)/st.took.Seconds(), fmt.Sprintf("binds/s-stored=%d", st.stored))
		b.ReportMetric(rate, fmt.Sprintf("cpu-binds/s-stored=%d", st.stored))
		if *commitGC {
			total := float64(st.made) / (st.cpu + st.gc).Seconds()
			tlo, thi = min(tlo, total), max(thi, total)
			b.ReportMetric(float64(st.gc.Microseconds())/float64(st.made), fmt.Sprintf("gc-us/bind-stored=%d", st.stored))
			b.ReportMetric(total, fmt.Sprintf("total-binds/s-stored=%d", st.stored))
		}
	}
	if *commitGC {
		b.ReportMetric(tlo/thi, "flat-total")
	}
	b.ReportMetric(lo/hi, "flat-cpu")
	b.ReportMetric(float64(faults)*1000/float64(made), "faults/1000-binds")
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

// gcReading is the collector's CPU and the bytes allocated so far in this
// process, both as runtime/metrics counts them.
type gcReading struct {
	cpu    time.Duration
	allocs uint64
}

// readGC reads the collector's CPU time (an estimate: see /cpu/classes in
// runtime/metrics) and the bytes allocated since the process started.
func readGC() gcReading {
	s := []metrics.Sample{{Name: "/cpu/classes/gc/total:cpu-seconds"}, {Name: "/gc/heap/allocs:bytes"}}
	metrics.Read(s)
	return gcReading{cpu: time.Duration(s[0].Value.Float64() * float64(time.Second)), allocs: s[1].Value.Uint64()}
}

// add adds to g what the collector did between from and to.
func (g *gcReading) add(to, from gcReading) {
	g.cpu += to.cpu - from.cpu
	g.allocs += to.allocs - from.allocs
}

// share is the collector's cost of allocating bytes at the rate it has
// cost per byte over the process's life up to now, leaving out what the
// harness g did.
func (g gcReading) share(now gcReading, bytes uint64) time.Duration {
	if now.allocs <= g.allocs {
		return 0
	}
	return time.Duration(float64(now.cpu-g.cpu) * float64(bytes) / float64(now.allocs-g.allocs))
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
