package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/norsk-go/norsk-manager/examples/exampletest"
	"github.com/norsk-go/norsk-manager/examples/sample-media/frames"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func envMap(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestLoadConfig(t *testing.T) {
	ok := []struct {
		env  map[string]string
		want config
	}{
		{
			env:  map[string]string{"SINK": "-"},
			want: config{Sink: "-", FrameRate: 25, StreamID: "sample-media", CutoverLead: 400 * time.Millisecond, CutoverPriority: 10},
		},
		{
			env: map[string]string{"SINK": "udp://127.0.0.1:5000", "FRAME_RATE": "29.97", "START_SEQ": "1000",
				"FRAME_COUNT": "5", "NORSK_JOB_ID": "job-1", "NORSK_ROLE": "primary", "NORSK_RUNTIME_ROLE": "backup", "NORSK_NODE_ID": "n1"},
			want: config{Sink: "udp://127.0.0.1:5000", FrameRate: 29.97, StartSeq: 1000, FrameCount: 5, StreamID: "job-1",
				JobID: "job-1", Role: "primary", RuntimeRole: "backup", NodeID: "n1", CutoverLead: 400 * time.Millisecond, CutoverPriority: 10},
		},
		{
			env:  map[string]string{"SINK": "stdout", "STREAM_ID": "cam-1", "NORSK_JOB_ID": "job-1"},
			want: config{Sink: "stdout", FrameRate: 25, StreamID: "cam-1", JobID: "job-1", CutoverLead: 400 * time.Millisecond, CutoverPriority: 10},
		},
		{
			env: map[string]string{"SINK": "-", "NORSK_JOB_SOCKET": "/run/norsk/job.sock", "NORSK_MIGRATION_ID": "m-1",
				"NORSK_MIGRATION_HANDOVER": "1", "CUTOVER_LEAD": "250ms"},
			want: config{Sink: "-", FrameRate: 25, StreamID: "sample-media", JobSocket: "/run/norsk/job.sock", MigrationID: "m-1",
				Handover: true, CutoverLead: 250 * time.Millisecond, CutoverPriority: 10},
		},
		{
			env:  map[string]string{"SINK": "-", "CUTOVER_LEAD": "1200"},
			want: config{Sink: "-", FrameRate: 25, StreamID: "sample-media", CutoverLead: 1200 * time.Millisecond, CutoverPriority: 10},
		},
		{
			env:  map[string]string{"SINK": "-", "CUTOVER_PRIORITY": "0"},
			want: config{Sink: "-", FrameRate: 25, StreamID: "sample-media", CutoverLead: 400 * time.Millisecond},
		},
		{
			env:  map[string]string{"SINK": "-", "CUTOVER_PRIORITY": "50"},
			want: config{Sink: "-", FrameRate: 25, StreamID: "sample-media", CutoverLead: 400 * time.Millisecond, CutoverPriority: 50},
		},
	}
	for _, tt := range ok {
		got, err := loadConfig(envMap(tt.env))
		if err != nil {
			t.Errorf("loadConfig(%v): %v", tt.env, err)
			continue
		}
		if got != tt.want {
			t.Errorf("loadConfig(%v):\n got %+v\nwant %+v", tt.env, got, tt.want)
		}
	}
	bad := []map[string]string{
		{},
		{"SINK": "-", "FRAME_RATE": "0"},
		{"SINK": "-", "FRAME_RATE": "-5"},
		{"SINK": "-", "FRAME_RATE": "NaN"},
		{"SINK": "-", "FRAME_RATE": "1e9"},
		{"SINK": "-", "FRAME_RATE": "fast"},
		{"SINK": "-", "START_SEQ": "-1"},
		{"SINK": "-", "FRAME_COUNT": "x"},
		{"SINK": "-", "STREAM_ID": string(make([]byte, frames.MaxStreamIDLen+1))},
		{"SINK": "-", "CUTOVER_LEAD": "soon"},
		{"SINK": "-", "CUTOVER_LEAD": "-5ms"},
		{"SINK": "-", "CUTOVER_LEAD": "2h"},
		{"SINK": "-", "CUTOVER_PRIORITY": "100"},
		{"SINK": "-", "CUTOVER_PRIORITY": "-1"},
		{"SINK": "-", "CUTOVER_PRIORITY": "high"},
	}
	for _, env := range bad {
		if _, err := loadConfig(envMap(env)); err == nil {
			t.Errorf("loadConfig(%v) accepted a bad configuration", env)
		}
	}
}

func TestOpenSinkRejects(t *testing.T) {
	for _, spec := range []string{"tcp://127.0.0.1:1", "udp://127.0.0.1", "udp://:5000/x", "file://host/x", "file://", "nonsense"} {
		if _, _, _, err := openSink(spec, io.Discard); err == nil {
			t.Errorf("openSink(%q) accepted", spec)
		}
	}
}

// collect receives datagrams on conn into a checker until conn is closed.
func collect(t *testing.T, conn net.PacketConn) (*frames.Checker, func()) {
	t.Helper()
	var chk frames.Checker
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		buf := make([]byte, frames.MaxRecordLen+1)
		for {
			n, _, err := conn.ReadFrom(buf)
			if err != nil {
				return
			}
			f, err := frames.Decode(buf[:n])
			if err != nil {
				t.Errorf("datagram does not decode: %v", err)
				continue
			}
			chk.Add(f, time.Now())
		}
	}()
	return &chk, func() { conn.Close(); wg.Wait() }
}

func listenUDP(t *testing.T) net.PacketConn {
	t.Helper()
	conn, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return conn
}

func testLogger(w io.Writer) *slog.Logger { return slog.New(slog.NewTextHandler(w, nil)) }

// TestRunUDP sends a short stream at a high rate to a UDP listener and checks
// that every frame arrived once, paced no faster than the rate.
func TestRunUDP(t *testing.T) {
	conn := listenUDP(t)
	chk, stop := collect(t, conn)
	defer stop()

	const rate, count = 2000, 400
	cfg := config{Sink: "udp://" + conn.LocalAddr().String(), FrameRate: rate, FrameCount: count, StreamID: "udp-test", NodeID: "n1", RuntimeRole: "primary"}
	var log exampletest.Log
	start := time.Now()
	if err := run(context.Background(), cfg, io.Discard, testLogger(&log)); err != nil {
		t.Fatalf("run: %v", err)
	}
	elapsed := time.Since(start)
	// Frame n is due at n/rate after the start, never before.
	if min := time.Duration(count-1) * time.Second / rate; elapsed < min {
		t.Errorf("sent %d frames in %v, faster than %d/s allows (%v)", count, elapsed, rate, min)
	}
	exampletest.Eventually(t, 10*time.Second, "all frames received", func() bool { return chk.Report().Count >= count })
	r := chk.Report()
	if !r.Continuous() || r.First != 0 || r.Last != count-1 || r.Count != count || r.OutOfOrder != 0 {
		t.Fatalf("stream not continuous: %v", r)
	}
	if r.Streams["udp-test"] != count {
		t.Errorf("streams %v", r.Streams)
	}
	if log.Find(regexp.MustCompile(`msg="sample-media stopped" .*last_seq=399 .*cause="frame count reached" frames_sent=400 send_errors=0 next_seq=400`)) == nil {
		t.Errorf("no stop line with last_seq=399; log:\n%s", log.String())
	}
}

// TestRunFileContinues runs the program twice against one file sink, the
// second time from where the first stopped, as a migration target would.
func TestRunFileContinues(t *testing.T) {
	path := filepath.Join(t.TempDir(), "frames.bin")
	sink := "file://" + path
	first := config{Sink: sink, FrameRate: 5000, FrameCount: 30, StreamID: "s", NodeID: "source"}
	if err := run(context.Background(), first, io.Discard, testLogger(io.Discard)); err != nil {
		t.Fatal(err)
	}
	second := config{Sink: sink, FrameRate: 5000, FrameCount: 20, StartSeq: 30, StreamID: "s", NodeID: "target"}
	if err := run(context.Background(), second, io.Discard, testLogger(io.Discard)); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var chk frames.Checker
	rd := frames.NewReader(f)
	senders := map[uint64]string{}
	for {
		fr, err := rd.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		chk.Add(fr, time.Now())
		senders[fr.Seq] = string(fr.Payload)
	}
	if r := chk.Report(); !r.Continuous() || r.First != 0 || r.Last != 49 {
		t.Fatalf("report %v", r)
	}
	pid := strconv.Itoa(os.Getpid())
	if senders[29] != "node=source role= pid="+pid || senders[30] != "node=target role= pid="+pid {
		t.Errorf("payloads at the switch: %q, %q", senders[29], senders[30])
	}
}

func TestRunStdout(t *testing.T) {
	var out bytes.Buffer
	cfg := config{Sink: "-", FrameRate: 10000, FrameCount: 10, StartSeq: 7, StreamID: "s"}
	if err := run(context.Background(), cfg, &out, testLogger(io.Discard)); err != nil {
		t.Fatal(err)
	}
	var chk frames.Checker
	rd := frames.NewReader(&out)
	for {
		fr, err := rd.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		chk.Add(fr, time.Now())
	}
	if r := chk.Report(); !r.Continuous() || r.First != 7 || r.Last != 16 {
		t.Fatalf("report %v", r)
	}
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestRunSinkFailure(t *testing.T) {
	cfg := config{Sink: "-", FrameRate: 1000, FrameCount: 10, StreamID: "s"}
	err := run(context.Background(), cfg, failingWriter{}, testLogger(io.Discard))
	if err == nil {
		t.Fatal("run succeeded with a failing stdout sink")
	}
}

// TestRunUDPNoReceiver: a UDP sink with nobody listening loses frames but
// keeps the stream going.
func TestRunUDPNoReceiver(t *testing.T) {
	conn := listenUDP(t)
	addr := conn.LocalAddr().String()
	conn.Close() // now nobody listens there
	cfg := config{Sink: "udp://" + addr, FrameRate: 2000, FrameCount: 50, StreamID: "s"}
	var log exampletest.Log
	if err := run(context.Background(), cfg, io.Discard, testLogger(&log)); err != nil {
		t.Fatalf("run: %v", err)
	}
	if log.Find(regexp.MustCompile(`msg="sample-media stopped" .*last_seq=49 .*send_errors=[1-9]`)) == nil {
		t.Errorf("log:\n%s", log.String())
	}
}

func TestRunStopsOnCancel(t *testing.T) {
	conn := listenUDP(t)
	chk, stop := collect(t, conn)
	defer stop()
	ctx, cancel := context.WithCancel(context.Background())
	cfg := config{Sink: "udp://" + conn.LocalAddr().String(), FrameRate: 1000, StreamID: "s"}
	var log exampletest.Log
	done := make(chan error, 1)
	go func() { done <- run(ctx, cfg, io.Discard, testLogger(&log)) }()
	exampletest.Eventually(t, 10*time.Second, "20 frames received", func() bool { return chk.Report().Count >= 20 })
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("run did not return after cancel")
	}
	m := log.WaitFor(t, regexp.MustCompile(`msg="sample-media stopped" .*last_seq=(\d+) cause="context canceled"`), time.Second)
	last, _ := strconv.ParseUint(m[1], 10, 64)
	exampletest.Eventually(t, 10*time.Second, "last frame received", func() bool { return chk.Report().Last == last })
	if r := chk.Report(); !r.Continuous() || r.First != 0 || r.Count != last+1 {
		t.Fatalf("report %v, last_seq %d", r, last)
	}
}

// TestBinarySIGTERM builds the program, streams to a UDP listener, SIGTERMs
// it, and checks exit status 0 and that the receiver got every frame up to
// the last_seq the stop line reports.
func TestBinarySIGTERM(t *testing.T) {
	bin := exampletest.Build(t, exampletest.SampleMediaPackage)
	conn := listenUDP(t)
	chk, stop := collect(t, conn)
	defer stop()

	var log exampletest.Log
	cmd := exec.Command(bin)
	cmd.Env = exampletest.Env("SINK=udp://"+conn.LocalAddr().String(), "FRAME_RATE=500", "START_SEQ=1000",
		"NORSK_JOB_ID=media-test", "NORSK_ROLE=primary", "NORSK_RUNTIME_ROLE=primary", "NORSK_NODE_ID=node-1")
	cmd.Stdout, cmd.Stderr = &log, &log
	proc := exampletest.Start(t, cmd)

	log.WaitFor(t, regexp.MustCompile(`msg="sample-media started" job=media-test .*start_seq=1000`), 10*time.Second)
	exampletest.Eventually(t, 10*time.Second, "50 frames received", func() bool { return chk.Report().Count >= 50 })
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := proc.Wait(t, 10*time.Second); err != nil {
		t.Fatalf("exit after SIGTERM: %v; log:\n%s", err, log.String())
	}
	m := log.WaitFor(t, regexp.MustCompile(`msg="sample-media stopped" .*last_seq=(\d+) cause="terminated signal received".* next_seq=(\d+)`), time.Second)
	last, _ := strconv.ParseUint(m[1], 10, 64)
	next, _ := strconv.ParseUint(m[2], 10, 64)
	if next != last+1 {
		t.Errorf("next_seq %d, last_seq %d", next, last)
	}
	exampletest.Eventually(t, 10*time.Second, "last frame received", func() bool { return chk.Report().Last >= last })
	r := chk.Report()
	if !r.Continuous() || r.First != 1000 || r.Last != last || r.Count != last-1000+1 {
		t.Fatalf("report %v, last_seq %d", r, last)
	}
	if r.Streams["media-test"] != r.Count {
		t.Errorf("streams %v", r.Streams)
	}
}

func TestBinaryBadConfig(t *testing.T) {
	bin := exampletest.Build(t, exampletest.SampleMediaPackage)
	var log exampletest.Log
	cmd := exec.Command(bin)
	cmd.Env = exampletest.Env() // no SINK
	cmd.Stdout, cmd.Stderr = &log, &log
	err := exampletest.Start(t, cmd).Wait(t, 10*time.Second)
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 2 {
		t.Fatalf("exit: %v, want status 2; log:\n%s", err, log.String())
	}
}
