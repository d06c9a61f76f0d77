package bench

// What a heartbeat costs, to weigh a shorter heartbeat interval (decision
// 0048):
//
//	go test ./bench -run '^$' -bench HeartbeatCost -benchtime=1x
//
// # BenchmarkHeartbeatCost/interval=1s, /interval=500ms, /interval=100ms
//
// A Manager member and 20 idle workers in this process (testcluster,
// process runtime, no jobs), heartbeating at the interval, for 10 s after
// the cluster settles. Reported: cpu-ms/s, the CPU time the whole process
// (Manager and workers) used per second of the window, and heartbeats/s,
// the heartbeats the workers were told to send (20 / interval). The cost
// of one heartbeat — the worker's send, the Manager's receive, its lease
// grant back — is the slope between two intervals:
// Δcpu-ms/s ÷ Δheartbeats/s. Idle work that does not depend on the
// interval (the AutoManager's resync, metrics) cancels out in the slope.

import (
	"fmt"
	"testing"
	"time"

	"github.com/norsk-go/norsk-manager/internal/testcluster"
)

func BenchmarkHeartbeatCost(b *testing.B) {
	const workers, window = 20, 10 * time.Second
	for _, interval := range []time.Duration{time.Second, 500 * time.Millisecond, 100 * time.Millisecond} {
		b.Run(fmt.Sprintf("interval=%s", interval), func(b *testing.B) {
			var cpu, wall time.Duration
			for range b.N {
				c := testcluster.New(b, testcluster.Options{Workers: workers, HeartbeatInterval: interval})
				time.Sleep(2 * time.Second) // settle: first pass, first grants
				start, cpu0 := time.Now(), cpuTime()
				time.Sleep(window)
				cpu += cpuTime() - cpu0
				wall += time.Since(start)
				c.Close()
			}
			b.ReportMetric(float64(cpu.Milliseconds())/wall.Seconds(), "cpu-ms/s")
			b.ReportMetric(float64(workers)/interval.Seconds(), "heartbeats/s")
		})
	}
}
