package bench

// Store benchmarks: KvCommit through the API, the cost of the audit entry a
// write carries, and snapshot save/restore of a large state. Figures only.
//
//	go test ./bench -run '^$' -bench 'KvCommit|AuditCost|Snapshot100k' -benchtime=2000x
//
// # BenchmarkKvCommit/clients=1, /clients=32
//
// b.N KvCommit calls (one put of a 64-byte value to a new key, guarded by
// expected_revision 0) spread over 1 or 32 client goroutines sharing one
// HTTP/2 connection, closed loop, through the generated Connect client
// (gRPC protocol) against a real member. Reported: commits/s, p50-ms,
// p99-ms, max-ms.
//
// # BenchmarkAuditCost
//
// The cost of the audit entry a write carries:
//
//   - fsm/audit=off|on: state.Apply of a CreateJob command, without and with
//     Command.audit, on an in-memory state: the CPU cost of the entry
//     (JSON payload, SHA-256, two more rows) with nothing else around it.
//   - store/audit=off|on/clients=N: store.Apply of the same commands
//     through raft (raft-wal, fsync per batch) on a store opened directly,
//     with 1 and 32 proposers: what the entry adds to an acknowledged write.
//   - api/clients=N: CreateJob through the API, where every call is audited
//     (it cannot be turned off): compare with store/audit=on.
//
// # BenchmarkSnapshot100kJobs
//
// A state of 100,000 jobs (each created by a stamped command, so the audit
// log has 100,000 entries too) built once by applying commands to a
// state.State. Then per iteration: write it to a file (WriteTo, fsync),
// read it back into a fresh state (Restore), and restore it into a running
// store (Store.RestoreSnapshotFile: full verification, raft's user
// restore, FSM restore). Reported: MB (file size), ms/op. At most
// stMaxSnapshotIters iterations run whatever b.N is (ns/op is over those).

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	connectrpc "connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1/managerv1connect"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/internal/auth"
	"github.com/norsk-go/norsk-manager/internal/nodes"
	"github.com/norsk-go/norsk-manager/internal/store"
	"github.com/norsk-go/norsk-manager/internal/store/state"
)

// stClosedLoop runs op b.N times over clients goroutines and reports
// throughput (as unit) and latency percentiles.
func stClosedLoop(b *testing.B, clients int, unit string, op func(i int64) error) {
	b.Helper()
	var next atomic.Int64
	var failed atomic.Pointer[error]
	samples := make([][]time.Duration, clients)
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for c := range clients {
		wg.Go(func() {
			lat := make([]time.Duration, 0, b.N/clients+1)
			for {
				i := next.Add(1) - 1
				if i >= int64(b.N) || failed.Load() != nil {
					break
				}
				t0 := time.Now()
				err := op(i)
				lat = append(lat, time.Since(t0))
				if err != nil {
					failed.CompareAndSwap(nil, &err)
					break
				}
			}
			samples[c] = lat
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if err := failed.Load(); err != nil {
		b.Fatalf("op: %v", *err)
	}
	all := slices.Concat(samples...)
	slices.Sort(all)
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), unit)
	b.ReportMetric(ms(percentile(all, 50)), "p50-ms")
	b.ReportMetric(ms(percentile(all, 99)), "p99-ms")
	b.ReportMetric(ms(all[len(all)-1]), "max-ms")
}

func stAPIClient(url string) managerv1connect.ManagerClient {
	return managerv1connect.NewManagerClient(nodes.H2CClient(), url, connectrpc.WithGRPC(), auth.WithBearer(benchToken))
}

func BenchmarkKvCommit(b *testing.B) {
	for _, clients := range []int{1, 32} {
		b.Run(fmt.Sprintf("clients=%d", clients), func(b *testing.B) {
			srv := startManager(b)
			c := stAPIClient(srv.URL())
			ctx := context.Background()
			prefix := fmt.Sprintf("r%d-", runID.Add(1))
			value := make([]byte, 64)
			zero := uint64(0)
			commit := func(key string) error {
				_, err := c.KvCommit(ctx, connectrpc.NewRequest(&managerv1.KvCommitRequest{Namespace: "bench", Writes: []*managerv1.KvWrite{
					{Key: key, Op: &managerv1.KvWrite_Put{Put: value}, ExpectedRevision: &zero},
				}}))
				return err
			}
			// Warm up: one call per client so the streams exist.
			var wg sync.WaitGroup
			for i := range clients {
				wg.Go(func() {
					if err := commit(fmt.Sprintf("%swarm-%d", prefix, i)); err != nil {
						b.Errorf("warm-up: %v", err)
					}
				})
			}
			wg.Wait()
			if b.Failed() {
				return
			}
			stClosedLoop(b, clients, "commits/s", func(i int64) error { return commit(fmt.Sprintf("%sk-%d", prefix, i)) })
		})
	}
}

func stCreateCmd(id string, audit bool, now time.Time) *storev1.Command {
	cmd := &storev1.Command{
		Time: timestamppb.New(now),
		Cmd: &storev1.Command_CreateJob{CreateJob: &storev1.CreateJob{Job: &managerv1.Job{
			JobId:       id,
			Description: "benchmark job",
			Tags:        map[string]string{"team": "bench", "channel": "news"},
			Services:    []*managerv1.Service{{Name: "main", Image: "bench:dev"}},
		}}},
	}
	if audit {
		cmd.Audit = &storev1.AuditStamp{Who: "peer:127.0.0.1:54321", Method: "CreateJob", Target: "job/" + id}
	}
	return cmd
}

func BenchmarkAuditCost(b *testing.B) {
	for _, audit := range []bool{false, true} {
		b.Run(fmt.Sprintf("fsm/audit=%s", onOff(audit)), func(b *testing.B) {
			s := state.New(state.Limits{})
			cmds := make([]*storev1.Command, b.N)
			now := time.Now()
			for i := range cmds {
				cmds[i] = stCreateCmd(fmt.Sprintf("job-%d", i), audit, now)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				if res := s.Apply(uint64(i+1), cmds[i]); res.Err != nil {
					b.Fatal(res.Err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/1e3, "us/apply")
		})
	}
	for _, clients := range []int{1, 32} {
		for _, audit := range []bool{false, true} {
			b.Run(fmt.Sprintf("store/audit=%s/clients=%d", onOff(audit), clients), func(b *testing.B) {
				st := stOpenStore(b, b.TempDir())
				ctx := context.Background()
				prefix := fmt.Sprintf("r%d-", runID.Add(1))
				stClosedLoop(b, clients, "writes/s", func(i int64) error {
					_, err := st.Apply(ctx, stCreateCmd(fmt.Sprintf("%sjob-%d", prefix, i), audit, time.Now()))
					return err
				})
			})
		}
		b.Run(fmt.Sprintf("api/clients=%d", clients), func(b *testing.B) {
			srv := startManager(b)
			c := stAPIClient(srv.URL())
			ctx := context.Background()
			prefix := fmt.Sprintf("r%d-", runID.Add(1))
			create := func(id string) error {
				_, err := c.CreateJob(ctx, connectrpc.NewRequest(&managerv1.CreateJobRequest{Job: &managerv1.Job{
					JobId: id, Description: "benchmark job",
					Tags:     map[string]string{"team": "bench", "channel": "news"},
					Services: []*managerv1.Service{{Name: "main", Image: "bench:dev"}},
				}}))
				return err
			}
			var wg sync.WaitGroup
			for i := range clients {
				wg.Go(func() {
					if err := create(fmt.Sprintf("%swarm-%d", prefix, i)); err != nil {
						b.Errorf("warm-up: %v", err)
					}
				})
			}
			wg.Wait()
			if b.Failed() {
				return
			}
			stClosedLoop(b, clients, "writes/s", func(i int64) error { return create(fmt.Sprintf("%sjob-%d", prefix, i)) })
		})
	}
}

func onOff(v bool) string {
	if v {
		return "on"
	}
	return "off"
}

// stOpenStore opens a single-member store (raft + raft-wal) in dir.
func stOpenStore(b *testing.B, dir string) *store.Store {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := store.Open(ctx, store.Config{Dir: dir, MemberID: "bench", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatalf("open store: %v", err)
	}
	b.Cleanup(func() { _ = st.Close() })
	return st
}

const st100k = 100_000

var (
	stBigOnce  sync.Once
	stBigState *state.State
	stBigBuild time.Duration
)

// stBig is a state of 100,000 jobs, each created by a stamped command.
func stBig(b *testing.B) *state.State {
	stBigOnce.Do(func() {
		start := time.Now()
		s := state.New(state.Limits{})
		now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		for i := range st100k {
			if res := s.Apply(uint64(i+1), stCreateCmd(fmt.Sprintf("job-%06d", i), true, now.Add(time.Duration(i)*time.Millisecond))); res.Err != nil {
				panic(res.Err)
			}
		}
		stBigState, stBigBuild = s, time.Since(start)
	})
	b.Logf("state: %d jobs, %d audit entries, built in %v", st100k, st100k, stBigBuild.Round(time.Millisecond))
	return stBigState
}

// stMaxSnapshotIters caps the iterations of the 100k-job benchmarks: each
// takes about a second, and `make bench` runs everything with
// -benchtime=3000x. The time per iteration is reported as ns/op and ms/op
// over the iterations actually run.
const stMaxSnapshotIters = 5

// stCapped runs op min(b.N, stMaxSnapshotIters) times and reports the time
// per run.
func stCapped(b *testing.B, op func()) {
	b.Helper()
	n := min(b.N, stMaxSnapshotIters)
	b.ResetTimer()
	start := time.Now()
	for range n {
		op()
	}
	per := time.Since(start) / time.Duration(n)
	b.StopTimer()
	b.ReportMetric(float64(per.Nanoseconds()), "ns/op")
	b.ReportMetric(ms(per), "ms/op")
}

func BenchmarkSnapshot100kJobs(b *testing.B) {
	dir := b.TempDir()
	file := filepath.Join(dir, "big.nsnap")
	b.Run("write", func(b *testing.B) {
		r := stBig(b).Snapshot()
		var n int64
		stCapped(b, func() {
			var err error
			if n, err = store.WriteSnapshotFile(file, r); err != nil {
				b.Fatal(err)
			}
		})
		b.ReportMetric(float64(n)/1e6, "MB")
	})
	if _, err := os.Stat(file); err != nil {
		if _, err := store.WriteSnapshotFile(file, stBig(b).Snapshot()); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("restore-state", func(b *testing.B) {
		stCapped(b, func() {
			f, err := os.Open(file)
			if err != nil {
				b.Fatal(err)
			}
			s := state.New(state.Limits{})
			_, err = s.Restore(f)
			_ = f.Close()
			if err != nil {
				b.Fatal(err)
			}
		})
	})
	b.Run("restore-store", func(b *testing.B) {
		st := stOpenStore(b, b.TempDir())
		ctx := context.Background()
		stCapped(b, func() {
			h, err := st.RestoreSnapshotFile(ctx, file)
			if err != nil {
				b.Fatal(err)
			}
			if h.GetIndex() != st100k {
				b.Fatalf("restored index %d", h.GetIndex())
			}
		})
		var n int
		st.State().Snapshot().Jobs(nil, "", func(*storev1.JobRecord) bool { n++; return true })
		if n != st100k {
			b.Fatalf("%d jobs in the store after the restore", n)
		}
	})
}
