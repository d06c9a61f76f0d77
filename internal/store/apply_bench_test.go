package store

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/types/known/timestamppb"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
)

// BenchmarkApply is the store's own write path (raft, raft-wal with fsync,
// the FSM, go-memdb, events, the audit entry), without the API in front:
// b.N proposals over C goroutines in a closed loop, as the API's handlers
// make them (an audit stamp on each). It reports the proposals per fsync
// (raft-wal appends a batch and syncs it once) and p50/p99 in ms; built
// with -tags writepathtrace, the commit's phases (PhaseTimes).
func BenchmarkApply(b *testing.B) {
	for _, kind := range []string{"kv", "job"} {
		for _, clients := range []int{1, 32} {
			b.Run(fmt.Sprintf("cmd=%s/clients=%d", kind, clients), func(b *testing.B) {
				var batches, entries atomic.Int64
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				s, err := Open(ctx, Config{Dir: b.TempDir(), MemberID: "bench", Logger: slog.New(slog.DiscardHandler),
					logHook: func(l []*raft.Log) { batches.Add(1); entries.Add(int64(len(l))) }})
				if err != nil {
					b.Fatal(err)
				}
				defer s.Close()
				cmd := func(i int) *storev1.Command {
					c := &storev1.Command{Time: timestamppb.Now(),
						Audit: &storev1.AuditStamp{Who: "bench", Method: "Bench", Target: "bench", Caller: "token:bench/1", CallerTokenId: "1"}}
					if kind == "kv" {
						c.Cmd = &storev1.Command_KvCommit{KvCommit: &storev1.KvCommit{Namespace: "bench",
							Writes: []*managerv1.KvWrite{{Key: fmt.Sprintf("k%08d", i), Op: &managerv1.KvWrite_Put{Put: make([]byte, 200)}}}}}
					} else {
						c.Cmd = &storev1.Command_CreateJob{CreateJob: &storev1.CreateJob{Job: &managerv1.Job{
							JobId: fmt.Sprintf("job-%08d", i), Description: "benchmark job", Tags: map[string]string{"team": "bench"},
							Services: []*managerv1.Service{{Name: "main", Image: "bench:dev"}}}}}
					}
					return c
				}
				batches.Store(0)
				entries.Store(0)
				var next atomic.Int64
				lat := make([][]time.Duration, clients)
				var wg sync.WaitGroup
				p0 := Phases()
				b.ResetTimer()
				for c := range clients {
					wg.Go(func() {
						for {
							i := int(next.Add(1) - 1)
							if i >= b.N {
								return
							}
							t0 := time.Now()
							res, err := s.Apply(context.Background(), cmd(i))
							if err == nil {
								err = res.Err
							}
							if err != nil {
								b.Error(err)
								return
							}
							lat[c] = append(lat[c], time.Since(t0))
						}
					})
				}
				wg.Wait()
				b.StopTimer()
				all := sortedDurations(lat)
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "applies/s")
				if n := batches.Load(); n > 0 {
					b.ReportMetric(float64(entries.Load())/float64(n), "entries/fsync")
				}
				b.ReportMetric(msAt(all, 50), "p50-ms")
				b.ReportMetric(msAt(all, 99), "p99-ms")
				reportPhases(b, p0)
			})
		}
	}
}
