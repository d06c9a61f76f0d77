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
// fsync per batch, its defaults: the AutoManager runs), both on loopback,
// each in a process of its own.
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
// keep-alive connections), the Manager through the Go SDK (its default:
// the Connect protocol, binary protobuf, over HTTP/1.1 keep-alive
// connections; -sdk-grpc: gRPC over HTTP/2, decision 0067): JSON costs etcd
// a little that its native gRPC would not.
//
// # Where the time goes (decision 0058)
//
// Also reported: each side's CPU per call (cpu-µs/op, etcd-cpu-µs/op: this
// process, the clients included, plus the server's own process when it has
// one; member-cpu-µs/op and etcd-server-cpu-µs/op are the servers' own
// processes' part, client-cpu-µs/op the rest of the Manager's; with the
// member apart, member-alloc-KiB/op and member-faults/op, what it
// allocates per call and the page faults it takes), the
// client's mean latency, and the Manager's mean time in its API
// handlers and in its store's commits (handler-mean-ms, commit-mean-ms, from
// its own metrics). Built with -tags writepathtrace, the commit's phases too
// (store.PhaseTimes). The Manager member runs in a process of its own (this
// binary, re-executed), as etcd runs in its own; -separate=false runs it in
// the benchmark's process, beside its clients — needed for the phases and
// for -timed-cpuprofile FILE (a profile of the timed part only) to see it.
// -member-cpuprofile FILE profiles the member's own process over the timed
// part when it runs apart.
package compare

import (
	"bufio"
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
	"os"
	"os/exec"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/internal/auth"
	"github.com/norsk-go/norsk-manager/internal/manager"
	"github.com/norsk-go/norsk-manager/internal/store"
	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

var (
	etcdBin = flag.String("etcd", "etcd", "the etcd binary (benchmarks skip when it is not found)")
	// timedProfile profiles only the timed part of each benchmark (not the
	// start of etcd and the Manager, nor the preload), so that a profile of
	// stored=100000 shows the write path rather than the 100,000 creates
	// before it.
	timedProfile = flag.String("timed-cpuprofile", "", "write a CPU profile of the timed part only to this file (the last sub-benchmark run wins)")
	// memberProfile is the same for a member in a process of its own
	// (-separate): it profiles the member's process while the clock runs.
	memberProfile = flag.String("member-cpuprofile", "", "with -separate, write a CPU profile of the member process's timed part to this file (the last sub-benchmark run wins)")
)

// startTimer resets the benchmark's timer and, with -timed-cpuprofile,
// starts the CPU profile (and with -member-cpuprofile the member
// process's); the returned function stops them all.
func startTimer(b *testing.B, m *member) (stop func()) {
	b.Helper()
	var f *os.File
	if *timedProfile != "" {
		var err error
		if f, err = os.Create(*timedProfile); err != nil {
			b.Fatal(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			b.Fatal(err)
		}
	}
	remote := *memberProfile != "" && m.control != nil
	if remote {
		m.command(b, "profile "+*memberProfile)
	}
	b.ResetTimer()
	return func() {
		b.StopTimer()
		if f != nil {
			pprof.StopCPUProfile()
			_ = f.Close()
		}
		if remote {
			m.command(b, "stop")
		}
	}
}

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
func startEtcd(b *testing.B) (url string, pid int) {
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
				return client, cmd.Process.Pid
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

var benchToken = func() string {
	if t := os.Getenv(envMemberToken); t != "" {
		return t
	}
	return auth.NewToken()
}()

// separate runs the Manager member in a process of its own (this test
// binary, re-executed), as etcd runs in its own: the benchmark's clients
// then do not share the member's two Ps (decision 0058). -separate=false
// runs it in the benchmark's process, where -tags writepathtrace and
// -timed-cpuprofile see its commits.
// sdkGRPC makes the benchmark's SDK clients speak gRPC over HTTP/2 for
// every call (norsk.Settings.GRPC), as the SDK did before decision 0067.
var sdkGRPC = flag.Bool("sdk-grpc", false, "the SDK clients speak gRPC over HTTP/2 for unary calls too (norsk.Settings.GRPC)")

var separate = flag.Bool("separate", true, "run the Manager member in a process of its own, as etcd is (false: in this process, beside the clients)")

// The environment of a member process (TestMain).
const (
	envMemberDir    = "NORSK_BENCH_MEMBER_DIR"
	envMemberStored = "NORSK_BENCH_MEMBER_STORED"
	envMemberToken  = "NORSK_BENCH_MEMBER_TOKEN"
)

// member is the Manager under test: in this process (local) or in a
// process of its own (pid), which control and replies reach (memberMain's
// commands).
type member struct {
	url     string
	pid     int
	local   *manager.Server
	control io.Writer
	replies *bufio.Reader
}

func (m *member) URL() string { return m.url }

// command sends a command line to a member process and returns what
// follows its "ok".
func (m *member) command(b *testing.B, line string) string {
	b.Helper()
	if _, err := fmt.Fprintln(m.control, line); err != nil {
		b.Fatalf("member %q: %v", line, err)
	}
	reply, err := m.replies.ReadString('\n')
	rest, ok := strings.CutPrefix(strings.TrimSpace(reply), "ok")
	if err != nil || !ok {
		b.Fatalf("member %q: %q %v", line, reply, err)
	}
	return strings.TrimSpace(rest)
}

// runtimeStats are a member process's own runtime figures since it
// started: the bytes it has allocated (runtime/metrics) and its minor page
// faults (getrusage: the first touch of memory fresh from the kernel). (Its
// collector's CPU is better read from -member-cpuprofile: the runtime's
// own estimate, /cpu/classes/gc, counts the wall time of its workers, which
// on a loaded machine is well above the CPU they got.)
type runtimeStats struct {
	allocBytes  float64
	minorFaults float64
}

// readRuntimeStats reads this process's runtimeStats.
func readRuntimeStats() runtimeStats {
	s := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	metrics.Read(s)
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return runtimeStats{allocBytes: float64(s[0].Value.Uint64()), minorFaults: float64(ru.Minflt)}
}

// stats reads the member process's runtimeStats (zero in process, where
// the clients' figures would be mixed in).
func (m *member) stats(b *testing.B) runtimeStats {
	b.Helper()
	if m.control == nil {
		return runtimeStats{}
	}
	var st runtimeStats
	if _, err := fmt.Sscan(m.command(b, "stats"), &st.allocBytes, &st.minorFaults); err != nil {
		b.Fatalf("member stats: %v", err)
	}
	return st
}

// TestMain serves a member when re-executed as one (-separate).
func TestMain(m *testing.M) {
	if os.Getenv(envMemberDir) == "" {
		os.Exit(m.Run())
	}
	if err := memberMain(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(0)
}

// memberMain starts a member, preloads it and prints its URL, then obeys
// the command lines on its stdin until it closes: "profile FILE" starts a
// CPU profile to FILE, "stop" stops it, "stats" answers its runtimeStats;
// each is answered "ok" on stdout (with the figures after it).
// Each also writes the allocation profile so far (FILE.allocs-start,
// FILE.allocs-stop; after a forced collection, so that it is complete):
// `go tool pprof -diff_base FILE.allocs-start FILE.allocs-stop` is what the
// timed part allocated.
func memberMain() error {
	srv, err := newManager(os.Getenv(envMemberDir))
	if err != nil {
		return err
	}
	defer srv.Close()
	n, _ := strconv.Atoi(os.Getenv(envMemberStored))
	if err := preloadStore(srv, n); err != nil {
		return err
	}
	fmt.Println(srv.URL())
	var prof *os.File
	var profName string
	allocs := func(suffix string) error {
		runtime.GC() // the profile is of the last completed cycle
		f, err := os.Create(profName + ".allocs-" + suffix)
		if err != nil {
			return err
		}
		if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
			_ = f.Close()
			return err
		}
		return f.Close()
	}
	defer func() {
		if prof != nil {
			pprof.StopCPUProfile()
			_ = prof.Close()
		}
	}()
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		verb, arg, _ := strings.Cut(in.Text(), " ")
		switch {
		case verb == "profile" && prof == nil:
			profName = arg
			if err := allocs("start"); err != nil {
				return err
			}
			f, err := os.Create(arg)
			if err != nil {
				return err
			}
			if err := pprof.StartCPUProfile(f); err != nil {
				_ = f.Close()
				return err
			}
			prof = f
		case verb == "stop" && prof != nil:
			pprof.StopCPUProfile()
			err := prof.Close()
			prof = nil
			if err != nil {
				return err
			}
			if err := allocs("stop"); err != nil {
				return err
			}
		case verb == "stats":
			st := readRuntimeStats()
			fmt.Println("ok", st.allocBytes, st.minorFaults)
			continue
		default:
			return fmt.Errorf("member: unexpected command %q", in.Text())
		}
		fmt.Println("ok")
	}
	return in.Err()
}

func newManager(dir string) (*manager.Server, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv, err := manager.New(ctx, manager.Config{
		DataDir: dir, Listen: "127.0.0.1:0", NodeName: "bench",
		Logger: slog.New(slog.DiscardHandler), BootstrapToken: benchToken,
		RateLimit: 1e9, // measure the Manager, not its per-caller limit
	})
	if err != nil {
		return nil, fmt.Errorf("start manager: %w", err)
	}
	return srv, nil
}

// startMember starts a member holding stored jobs, in this process or
// (-separate) in its own; it is stopped when the benchmark ends.
func startMember(b *testing.B, stored int) *member {
	b.Helper()
	if !*separate {
		srv := startManager(b)
		preload(b, srv, stored)
		return &member{url: srv.URL(), local: srv}
	}
	cmd := exec.Command(os.Args[0], "-test.run", "^$")
	cmd.Env = append(os.Environ(), envMemberDir+"="+b.TempDir(), fmt.Sprintf("%s=%d", envMemberStored, stored), envMemberToken+"="+benchToken)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	var logs bytes.Buffer
	cmd.Stderr = &logs
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = stdin.Close()
		_ = cmd.Wait()
	})
	replies := bufio.NewReader(out)
	line, err := replies.ReadString('\n')
	if err != nil {
		b.Fatalf("member process: %v\n%s", err, logs.String())
	}
	return &member{url: strings.TrimSpace(line), pid: cmd.Process.Pid, control: stdin, replies: replies}
}

// startManager starts a Manager member on an empty store (its defaults,
// the AutoManager on), stopped when the benchmark ends.
func startManager(b *testing.B) *manager.Server {
	b.Helper()
	srv, err := newManager(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = srv.Close() })
	return srv
}

func connect(b *testing.B, srv *member) *norsk.Manager {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m, err := norsk.Connect(ctx, norsk.Settings{URL: srv.URL(), Token: benchToken, ClientLabel: "bench", GRPC: *sdkGRPC, Logger: slog.New(slog.DiscardHandler)})
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
	if err := preloadStore(srv, n); err != nil {
		b.Fatal(err)
	}
}

func preloadStore(srv *manager.Server, n int) error {
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
		return fmt.Errorf("preload: %w", *err)
	}
	return nil
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
	// pid, if set, is a server process outside this one (etcd) whose CPU
	// time counts for this side too; cpu is the CPU time spent during this
	// side's rounds (this process's, the client's included, and pid's), and
	// serverCPU pid's share of it.
	pid       int
	cpu       time.Duration
	serverCPU time.Duration
}

// interleave runs n calls of each side over clients goroutines, in rounds
// alternating between them, and returns each side's rate and sorted
// latencies.
func interleave(b *testing.B, clients, n int, sides ...*side) {
	b.Helper()
	for r := range rounds {
		lo, hi := n*r/rounds, n*(r+1)/rounds
		for _, sd := range sides {
			c0, s0 := cpuTime(b, sd.pid)
			el, lat := closedLoop(b, clients, hi-lo, func(c, i int) error { return sd.op(c, lo+i) })
			c1, s1 := cpuTime(b, sd.pid)
			sd.cpu += c1 - c0
			sd.serverCPU += s1 - s0
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
func conns(b *testing.B, srv *member, clients int) []*norsk.Manager {
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
	b.ReportMetric(mean(lat), "mean-ms")
	// CPU per call (client and server): on a machine whose cores are
	// shared, the side that needs more CPU per call falls behind.
	b.ReportMetric(float64(etcd.cpu.Microseconds())/float64(len(etcdLat)), "etcd-cpu-µs/op")
	b.ReportMetric(float64(mgr.cpu.Microseconds())/float64(len(lat)), "cpu-µs/op")
	// With the server in a process of its own, the same split by process:
	// the server's, and the rest (this process: the clients).
	if etcd.pid != 0 {
		b.ReportMetric(float64(etcd.serverCPU.Microseconds())/float64(len(etcdLat)), "etcd-server-cpu-µs/op")
	}
	if mgr.pid != 0 {
		b.ReportMetric(float64(mgr.serverCPU.Microseconds())/float64(len(lat)), "member-cpu-µs/op")
		b.ReportMetric(float64((mgr.cpu-mgr.serverCPU).Microseconds())/float64(len(lat)), "client-cpu-µs/op")
	}
	b.Logf("%s: %.0f/s (p99 %.1f ms) vs etcd put %.0f/s (p99 %.1f ms): ratio %.2f",
		what, rate, percentile(lat, 99), etcdRate, percentile(etcdLat, 99), rate/etcdRate)
}

func BenchmarkCreateJob(b *testing.B) {
	for _, stored := range []int{0, 100_000} {
		for _, clients := range []int{1, 32} {
			b.Run(fmt.Sprintf("stored=%d/clients=%d", stored, clients), func(b *testing.B) {
				url, pid := startEtcd(b)
				srv := startMember(b, stored)
				cs := conns(b, srv, clients)
				ctx := context.Background()
				for c, m := range cs { // warm the connections
					if _, err := m.CreateJob(ctx, job(fmt.Sprintf("warm-%d", c))); err != nil {
						b.Fatal(err)
					}
				}
				etcd := etcdPut(b, url, clients, "jobs")
				etcd.pid = pid
				mgr := &side{op: func(c, i int) error {
					_, err := cs[c].CreateJob(ctx, job(fmt.Sprintf("job-%08d", i)))
					return err
				}, pid: srv.pid}
				t0, p0, r0 := readServerTimes(b, srv, "CreateJob"), store.Phases(), srv.stats(b)
				stop := startTimer(b, srv)
				interleave(b, clients, b.N, etcd, mgr)
				stop()
				report(b, "creates", mgr, etcd)
				reportRuntimeStats(b, r0, srv.stats(b), len(mgr.lat))
				reportServerTimes(b, t0, readServerTimes(b, srv, "CreateJob"), p0)
			})
		}
	}
}

func BenchmarkKvCommit(b *testing.B) {
	for _, clients := range []int{1, 32} {
		b.Run(fmt.Sprintf("clients=%d", clients), func(b *testing.B) {
			url, pid := startEtcd(b)
			srv := startMember(b, 0)
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
			etcd, mgr := etcdPut(b, url, clients, "kv"), &side{op: commit, pid: srv.pid}
			etcd.pid = pid
			t0, p0, r0 := readServerTimes(b, srv, "KvCommit"), store.Phases(), srv.stats(b)
			stop := startTimer(b, srv)
			interleave(b, clients, b.N, etcd, mgr)
			stop()
			report(b, "commits", mgr, etcd)
			reportRuntimeStats(b, r0, srv.stats(b), len(mgr.lat))
			reportServerTimes(b, t0, readServerTimes(b, srv, "KvCommit"), p0)
		})
	}
}

func job(id string) *norsk.Job {
	return &norsk.Job{JobId: id, Description: "benchmark job", Tags: map[string]string{"team": "bench", "channel": "news"},
		Services: []*norsk.Service{{Name: "main", Image: "bench:dev"}}}
}

// cpuTime is the CPU time (user and system) this process has used, plus
// process pid's if pid is not 0 (read from /proc); server is pid's part.
func cpuTime(b *testing.B, pid int) (total, server time.Duration) {
	b.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	t := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	if pid == 0 {
		return t, 0
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	// The fields after the command name (which may hold spaces), from the
	// state (field 3): utime and stime are fields 14 and 15, in clock
	// ticks (USER_HZ, 100 on Linux).
	f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	if len(f) < 13 {
		b.Fatalf("/proc/%d/stat: %q", pid, stat)
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	server = time.Duration(ut+st) * 10 * time.Millisecond
	return t + server, server
}

// serverTimes is what the Manager's own metrics say of the calls so far:
// the summed time in its API handlers for method (from the metrics
// interceptor: decoding and transport excluded) and in its store's commits
// (proposal to applied), and how many of each.
type serverTimes struct {
	rpc, commit   float64
	rpcN, commitN float64
}

func readServerTimes(b *testing.B, srv *member, method string) serverTimes {
	b.Helper()
	resp, err := http.Get(srv.URL() + "/metrics")
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	text, err := io.ReadAll(resp.Body)
	if err != nil {
		b.Fatal(err)
	}
	var t serverTimes
	for line := range strings.Lines(string(text)) {
		name, val, ok := strings.Cut(strings.TrimSpace(line), " ")
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(val, 64)
		if err != nil {
			continue
		}
		switch name {
		case `norsk_manager_rpc_duration_seconds_sum{method="` + method + `"}`:
			t.rpc = v
		case `norsk_manager_rpc_duration_seconds_count{method="` + method + `"}`:
			t.rpcN = v
		case "norsk_manager_raft_commit_seconds_sum":
			t.commit = v
		case "norsk_manager_raft_commit_seconds_count":
			t.commitN = v
		}
	}
	return t
}

// reportServerTimes reports the mean time of a call in the Manager's
// handlers and in its commits between two readings: the rest of a call's
// latency is the client, the transport and the queueing before a handler
// runs.
func reportServerTimes(b *testing.B, before, after serverTimes, p0 store.PhaseTimes) {
	if n := after.rpcN - before.rpcN; n > 0 {
		b.ReportMetric((after.rpc-before.rpc)/n*1000, "handler-mean-ms")
	}
	if n := after.commitN - before.commitN; n > 0 {
		b.ReportMetric((after.commit-before.commit)/n*1000, "commit-mean-ms")
	}
	// Built with -tags writepathtrace, the commit's phases (store.PhaseTimes).
	p := store.Phases()
	if n := p.Proposals - p0.Proposals; n > 0 {
		ms := func(d, d0 time.Duration) float64 {
			return float64((d*time.Duration(p.Proposals) - d0*time.Duration(p0.Proposals)).Microseconds()) / float64(n) / 1000
		}
		b.ReportMetric(ms(p.ToLogWrite, p0.ToLogWrite), "to-logwrite-ms")
		b.ReportMetric(ms(p.LogWrite, p0.LogWrite), "logwrite-ms")
		b.ReportMetric(ms(p.ToFSM, p0.ToFSM), "to-fsm-ms")
		b.ReportMetric(ms(p.FSM, p0.FSM), "fsm-ms")
		b.ReportMetric(ms(p.Back, p0.Back), "back-ms")
	}
}

// reportRuntimeStats reports a member process's allocation per call
// between two readings (nothing in process). What it allocates is what
// its collector must clear: with a large heap a cycle comes seldom and
// costs much (at 100,000 jobs about a third of a second of CPU), so over a
// short run a cycle more or less moves member-cpu-µs/op, while the
// allocation per call says what the collector costs in the long run.
func reportRuntimeStats(b *testing.B, before, after runtimeStats, calls int) {
	if after.allocBytes == 0 || calls == 0 {
		return
	}
	b.ReportMetric((after.allocBytes-before.allocBytes)/float64(calls)/1024, "member-alloc-KiB/op")
	b.ReportMetric((after.minorFaults-before.minorFaults)/float64(calls), "member-faults/op")
}

func mean(lat []time.Duration) float64 {
	if len(lat) == 0 {
		return 0
	}
	var sum time.Duration
	for _, l := range lat {
		sum += l
	}
	return float64(sum) / float64(len(lat)) / float64(time.Millisecond)
}
