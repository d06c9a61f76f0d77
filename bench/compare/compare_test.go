// Package compare runs the Manager's store benchmarks beside etcd's on the
// same machine, in the same run, and prints the ratio (issue 17).
//
//	go test ./bench/compare -run '^$' -bench . -benchtime=3000x
//	go test ./bench/compare -run '^$' -bench 'CreateJob/stored=100000/clients=32' -benchtime=3000x
//
// etcd is Debian's etcd-server (`apt-get install etcd-server`); every
// benchmark is skipped when no `etcd` binary is on the PATH (or -etcd names
// none). Each run starts a fresh single-member etcd in a temporary
// directory (fsync on, its defaults) and a fresh Manager member (raft-wal,
// fsync per batch, its defaults: the AutoManager runs), both on loopback.
//
// # BenchmarkCreateJob/stored=S/clients=C
//
// b.N puts of a 200-byte value to etcd (distinct keys) and b.N CreateJob
// calls to the Manager (a small valid job each), each over C client
// goroutines calling as fast as they are answered (closed loop), one
// connection per client, in four alternating rounds (etcd, Manager, etcd,
// …) so that both sides see the same machine. The Manager holds S jobs before the clock starts
// (S = 0 or 100,000, created through raft). Reported: etcd-puts/s,
// creates/s, ratio (creates/s ÷ puts/s: ≥ 1 means the Manager keeps up
// with etcd), and each side's p50/p99 in ms.
//
// # BenchmarkKvCommit/clients=C
//
// The same, with the Manager's KvCommit (one key, no guard) in place of
// CreateJob.
//
// etcd is spoken to through its JSON gateway (POST /v3/kv/put over HTTP/1.1
// keep-alive connections), the Manager through the Go SDK (connect, HTTP/2):
// JSON costs etcd a little that its native gRPC would not.
package compare

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os/exec"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/internal/auth"
	"github.com/norsk-go/norsk-manager/internal/manager"
	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

var etcdBin = flag.String("etcd", "etcd", "the etcd binary (benchmarks skip when it is not found)")

// freePort returns a loopback port nothing listens on now.
func freePort(b *testing.B) int {
	b.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startEtcd starts a single-member etcd in a temporary directory and
// returns its client URL; it is stopped when the benchmark ends.
func startEtcd(b *testing.B) string {
	b.Helper()
	bin, err := exec.LookPath(*etcdBin)
	if err != nil {
		b.Skipf("no etcd binary (%v): install Debian's etcd-server to compare", err)
	}
	client := fmt.Sprintf("http://127.0.0.1:%d", freePort(b))
	peer := fmt.Sprintf("http://127.0.0.1:%d", freePort(b))
	cmd := exec.Command(bin, "--name", "bench", "--data-dir", b.TempDir(),
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
		"--initial-cluster", "bench="+peer)
	var logs bytes.Buffer // shown only if it does not start
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		b.Fatalf("start etcd: %v", err)
	}
	b.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get(client + "/health")
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return client
			}
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			b.Fatalf("etcd did not become healthy: %v\n%s", err, logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

var benchToken = auth.NewToken()

// startManager starts a Manager member on an empty store (its defaults,
// the AutoManager on), stopped when the benchmark ends.
func startManager(b *testing.B) *manager.Server {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv, err := manager.New(ctx, manager.Config{
		DataDir: b.TempDir(), Listen: "127.0.0.1:0", NodeName: "bench",
		Logger: slog.New(slog.DiscardHandler), BootstrapToken: benchToken,
		RateLimit: 1e9, // measure the Manager, not its per-caller limit
	})
	if err != nil {
		b.Fatalf("start manager: %v", err)
	}
	b.Cleanup(func() { _ = srv.Close() })
	return srv
}

func connect(b *testing.B, srv *manager.Server) *norsk.Manager {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m, err := norsk.Connect(ctx, norsk.Settings{URL: srv.URL(), Token: benchToken, ClientLabel: "bench", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatalf("connect: %v", err)
	}
	b.Cleanup(func() { _ = m.Close() })
	return m
}

// preload creates n jobs through raft (64 proposals in flight), as
// CreateJob would store them.
func preload(b *testing.B, srv *manager.Server, n int) {
	b.Helper()
	st := srv.Store()
	ctx := context.Background()
	sem := make(chan struct{}, 64)
	var wg sync.WaitGroup
	var failed atomic.Pointer[error]
	for i := range n {
		cmd := &storev1.Command{Time: timestamppb.Now(), Cmd: &storev1.Command_CreateJob{CreateJob: &storev1.CreateJob{Job: &managerv1.Job{
			JobId: fmt.Sprintf("stored-%07d", i), Description: "stored job", Tags: map[string]string{"team": "bench"},
			Services: []*managerv1.Service{{Name: "main", Image: "bench:dev"}},
		}}}}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			res, err := st.Apply(ctx, cmd)
			if err == nil {
				err = res.Err
			}
			if err != nil {
				failed.CompareAndSwap(nil, &err)
			}
		})
	}
	wg.Wait()
	if err := failed.Load(); err != nil {
		b.Fatalf("preload: %v", *err)
	}
}

// rounds is how many alternating rounds a comparison runs: etcd, the
// Manager, etcd, … so that both see the same machine (the load of other
// processes changes over a run).
const rounds = 4

// side is one side of a comparison: op(c, i) is client c's call number i.
type side struct {
	op      func(c, i int) error
	elapsed time.Duration
	lat     []time.Duration
}

// interleave runs n calls of each side over clients goroutines, in rounds
// alternating between them, and returns each side's rate and sorted
// latencies.
func interleave(b *testing.B, clients, n int, sides ...*side) {
	b.Helper()
	for r := range rounds {
		lo, hi := n*r/rounds, n*(r+1)/rounds
		for _, sd := range sides {
			el, lat := closedLoop(b, clients, hi-lo, func(c, i int) error { return sd.op(c, lo+i) })
			sd.elapsed += el
			sd.lat = append(sd.lat, lat...)
		}
	}
	for _, sd := range sides {
		slices.Sort(sd.lat)
	}
}

func (sd *side) rate() float64 { return float64(len(sd.lat)) / sd.elapsed.Seconds() }

// closedLoop makes n calls of op over clients goroutines (client c uses
// op(c, i)) and returns the time taken and the latencies.
func closedLoop(b *testing.B, clients, n int, op func(c, i int) error) (time.Duration, []time.Duration) {
	b.Helper()
	var next atomic.Int64
	var failed atomic.Pointer[error]
	samples := make([][]time.Duration, clients)
	var wg sync.WaitGroup
	start := time.Now()
	for c := range clients {
		wg.Go(func() {
			lat := make([]time.Duration, 0, n/clients+1)
			for {
				i := int(next.Add(1) - 1)
				if i >= n || failed.Load() != nil {
					break
				}
				t0 := time.Now()
				err := op(c, i)
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
	if err := failed.Load(); err != nil {
		b.Fatalf("%v", *err)
	}
	return elapsed, slices.Concat(samples...)
}

func percentile(sorted []time.Duration, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(float64(len(sorted))*p/100+0.999999) - 1
	return float64(sorted[min(max(rank, 0), len(sorted)-1)]) / float64(time.Millisecond)
}

// etcdPut is a side of puts to etcd, one connection per client, warmed.
func etcdPut(b *testing.B, url string, clients int, prefix string) *side {
	value := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte("v"), 200))
	hc := make([]*http.Client, clients)
	for c := range hc {
		hc[c] = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
	}
	put := func(c, i int) error {
		body, _ := json.Marshal(map[string]string{
			"key": base64.StdEncoding.EncodeToString(fmt.Appendf(nil, "%s/%08d", prefix, i)), "value": value,
		})
		resp, err := hc[c].Post(url+"/v3/kv/put", "application/json", bytes.NewReader(body))
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("etcd put: %s", resp.Status)
		}
		return nil
	}
	for c := range clients { // warm the connections
		if err := put(c, -1-c); err != nil {
			b.Fatal(err)
		}
	}
	return &side{op: put}
}

// conns opens one SDK connection per client.
func conns(b *testing.B, srv *manager.Server, clients int) []*norsk.Manager {
	out := make([]*norsk.Manager, clients)
	for c := range out {
		out[c] = connect(b, srv)
	}
	return out
}

func report(b *testing.B, what string, mgr, etcd *side) {
	rate, lat, etcdRate, etcdLat := mgr.rate(), mgr.lat, etcd.rate(), etcd.lat
	b.ReportMetric(etcdRate, "etcd-puts/s")
	b.ReportMetric(rate, what+"/s")
	b.ReportMetric(rate/etcdRate, "ratio")
	b.ReportMetric(percentile(etcdLat, 50), "etcd-p50-ms")
	b.ReportMetric(percentile(etcdLat, 99), "etcd-p99-ms")
	b.ReportMetric(percentile(lat, 50), "p50-ms")
	b.ReportMetric(percentile(lat, 99), "p99-ms")
	b.Logf("%s: %.0f/s (p99 %.1f ms) vs etcd put %.0f/s (p99 %.1f ms): ratio %.2f",
		what, rate, percentile(lat, 99), etcdRate, percentile(etcdLat, 99), rate/etcdRate)
}

func BenchmarkCreateJob(b *testing.B) {
	for _, stored := range []int{0, 100_000} {
		for _, clients := range []int{1, 32} {
			b.Run(fmt.Sprintf("stored=%d/clients=%d", stored, clients), func(b *testing.B) {
				url := startEtcd(b)
				srv := startManager(b)
				preload(b, srv, stored)
				cs := conns(b, srv, clients)
				ctx := context.Background()
				for c, m := range cs { // warm the connections
					if _, err := m.CreateJob(ctx, job(fmt.Sprintf("warm-%d", c))); err != nil {
						b.Fatal(err)
					}
				}
				etcd := etcdPut(b, url, clients, "jobs")
				mgr := &side{op: func(c, i int) error {
					_, err := cs[c].CreateJob(ctx, job(fmt.Sprintf("job-%08d", i)))
					return err
				}}
				b.ResetTimer()
				interleave(b, clients, b.N, etcd, mgr)
				b.StopTimer()
				report(b, "creates", mgr, etcd)
			})
		}
	}
}

func BenchmarkKvCommit(b *testing.B) {
	for _, clients := range []int{1, 32} {
		b.Run(fmt.Sprintf("clients=%d", clients), func(b *testing.B) {
			url := startEtcd(b)
			srv := startManager(b)
			cs := conns(b, srv, clients)
			ctx := context.Background()
			value := bytes.Repeat([]byte("v"), 200)
			commit := func(c, i int) error {
				_, err := cs[c].KvCommit(ctx, "bench", []norsk.KvWrite{norsk.KvPut(fmt.Sprintf("k%08d", i), value)}, norsk.KvCommitOptions{})
				return err
			}
			for c := range cs {
				if err := commit(c, -1-c); err != nil {
					b.Fatal(err)
				}
			}
			etcd, mgr := etcdPut(b, url, clients, "kv"), &side{op: commit}
			b.ResetTimer()
			interleave(b, clients, b.N, etcd, mgr)
			b.StopTimer()
			report(b, "commits", mgr, etcd)
		})
	}
}

func job(id string) *norsk.Job {
	return &norsk.Job{JobId: id, Description: "benchmark job", Tags: map[string]string{"team": "bench", "channel": "news"},
		Services: []*norsk.Service{{Name: "main", Image: "bench:dev"}}}
}
