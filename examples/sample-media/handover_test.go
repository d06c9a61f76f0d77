package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/norsk-go/norsk-manager/examples/exampletest"
	"github.com/norsk-go/norsk-manager/examples/sample-media/frames"
	"github.com/norsk-go/norsk-manager/pkg/jobsocket"
)

// recorder is a sink shared by several streams: it decodes every write (one
// frame) into a checker and keeps each frame's arrival time and sender.
// Writes are taken one at a time, each stamped and checked under one lock,
// so the checker sees the frames in the order they were written (two
// senders' writes cannot pass each other between the stamp and the check).
type recorder struct {
	chk frames.Checker

	mu      sync.Mutex
	arrived map[uint64]time.Time
	sender  map[uint64]string
	last    uint64
	order   []arrival
}

// arrival is one write as the recorder took it.
type arrival struct {
	seq      uint64
	sender   string
	sent, at time.Time
}

func newRecorder() *recorder {
	return &recorder{arrived: map[uint64]time.Time{}, sender: map[uint64]string{}}
}

func (r *recorder) Write(b []byte) (int, error) {
	f, err := frames.Decode(b)
	if err != nil {
		return 0, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	r.chk.Add(f, now)
	r.arrived[f.Seq] = now
	r.sender[f.Seq] = string(f.Payload)
	r.last = max(r.last, f.Seq)
	r.order = append(r.order, arrival{f.Seq, string(f.Payload), time.Unix(0, f.SentUnixNano), now})
	return len(b), nil
}

// lastFrom is the highest frame whose sender's payload starts with prefix.
func (r *recorder) lastFrom(prefix string) uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	var last uint64
	for _, a := range r.order {
		if strings.HasPrefix(a.sender, prefix) {
			last = max(last, a.seq)
		}
	}
	return last
}

// logAround logs the writes of frames first to last in the order they came.
func (r *recorder) logAround(t *testing.T, first, last uint64) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, a := range r.order {
		if first <= a.seq && a.seq <= last {
			t.Logf("frame %d from %q sent %s arrived %s", a.seq, a.sender, a.sent.Format("15:04:05.000000"), a.at.Format("15:04:05.000000"))
		}
	}
}

// checkAcrossCut checks the sink's stream across a handover whose source
// was src and whose cut was cut: every frame from first on at most once and
// in order, none missing but those the source reported dropping for missing
// the cut's deadline (a loaded host can hold the source up that long), the
// cut's frame and the ones after it there (the target's).
func checkAcrossCut(t *testing.T, rec *recorder, src *output, first uint64, cut position) frames.Report {
	t.Helper()
	r := rec.chk.Report()
	missed := src.missedCut()
	if r.Count == 0 || r.First != first || r.Duplicates != 0 || r.OutOfOrder != 0 ||
		fmt.Sprint(r.Missing) != fmt.Sprint(missed) || !rec.has(cut.NextSeq) {
		rec.logAround(t, cut.NextSeq-5, cut.NextSeq+5)
		t.Fatalf("stream %v across the cut at %d; the source dropped %v for missing the cut", r, cut.NextSeq, missed)
	}
	if len(missed) > 0 {
		t.Logf("the source missed the cut's deadline and dropped %v", missed)
	}
	return r
}

func (r *recorder) has(seq uint64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.arrived[seq]
	return ok
}

func (r *recorder) at(seq uint64) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.arrived[seq]
}

func (r *recorder) from(seq uint64) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sender[seq]
}

// startStream runs the send loop of out into w until the test ends (or the
// returned stop is called).
func startStream(t *testing.T, cfg config, out *output, w io.Writer) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- stream(ctx, cfg, out, w, false, testLogger(io.Discard)) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("stream: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// untilTime waits until t has passed.
func untilTime(t time.Time) {
	if d := time.Until(t); d > 0 {
		<-time.After(d)
	}
}

type readyCall struct {
	id      string
	payload []byte
}

// fakeSession records the target's ready.
type fakeSession struct{ calls chan readyCall }

func (f fakeSession) Ready(id string, payload []byte) error {
	f.calls <- readyCall{id, payload}
	return nil
}

func mediaConfig(node string, rate float64, lead time.Duration) config {
	return config{Sink: "-", FrameRate: rate, StreamID: "cam", NodeID: node, RuntimeRole: "primary", CutoverLead: lead}
}

func decodePosition(t *testing.T, b []byte) position {
	t.Helper()
	var p position
	if err := json.Unmarshal(b, &p); err != nil || p.FrameRate <= 0 || p.NextDueUnixNano <= 0 {
		t.Fatalf("position %s: %v", b, err)
	}
	return p
}

// TestPayloadFormats pins the JSON field names the Manager side and
// docs/job-socket.md rely on.
func TestPayloadFormats(t *testing.T) {
	b, _ := json.Marshal(position{NextSeq: 7, NextDueUnixNano: 9, FrameRate: 25, AsOfUnixNano: 11})
	if string(b) != `{"nextSeq":7,"nextDueUnixNano":9,"frameRate":25,"asOfUnixNano":11}` {
		t.Errorf("position %s", b)
	}
	// A payload from before asOfUnixNano still reads.
	var p position
	if err := json.Unmarshal([]byte(`{"nextSeq":7,"nextDueUnixNano":9,"frameRate":25}`), &p); err != nil ||
		p != (position{NextSeq: 7, NextDueUnixNano: 9, FrameRate: 25}) {
		t.Errorf("an older position reads as %+v: %v", p, err)
	}
	b, _ = json.Marshal(applySummary{Applied: []string{"frames"}, Failed: []applyFailure{}, SkewMs: 1.5})
	if string(b) != `{"applied":["frames"],"failed":[],"skewMs":1.5}` {
		t.Errorf("summary %s", b)
	}
	b, _ = json.Marshal(applySummary{Applied: []string{}, Failed: []applyFailure{{ID: "frames", Reason: "late"}}})
	if string(b) != `{"applied":[],"failed":[{"id":"frames","reason":"late"}],"skewMs":0}` {
		t.Errorf("summary %s", b)
	}
}

// TestSourceCutsAheadAndResumesOnAbort: stop_output_at is answered at once
// with a cut at least CUTOVER_LEAD ahead; every frame before it goes out
// and none from it on; an abort resumes from the cut.
func TestSourceCutsAheadAndResumesOnAbort(t *testing.T) {
	const rate, lead = 100, 150 * time.Millisecond
	cfg := mediaConfig("source", rate, lead)
	out := newOutput(rate, 0, time.Now(), false)
	rec := newRecorder()
	startStream(t, cfg, out, rec)
	h := newHandover(out, cfg, testLogger(io.Discard))
	ctx := context.Background()
	exampletest.Eventually(t, 10*time.Second, "10 frames sent", func() bool { return rec.has(9) })

	state, refused := h.OnGetState(ctx, "m")
	if refused != "" {
		t.Fatalf("get-state refused: %s", refused)
	}
	before := time.Now()
	b, err := h.OnStopOutputAt(ctx, "m", []byte(`{"frameRate":100}`))
	after := time.Now()
	if err != nil {
		t.Fatal(err)
	}
	if after.Sub(before) >= lead/2 {
		t.Errorf("stop_output_at took %s: it must answer at once", after.Sub(before))
	}
	cut := decodePosition(t, b)
	due := time.Unix(0, cut.NextDueUnixNano)
	interval := time.Second / rate
	if due.Before(before.Add(lead)) || !due.Add(-interval).Before(after.Add(lead)) {
		t.Fatalf("cut %+v due %s: want the first frame due %s or more after %s", cut, due, lead, before)
	}
	if s := decodePosition(t, state); s.NextSeq > cut.NextSeq || s.FrameRate != rate {
		t.Fatalf("state %+v, cut %+v", s, cut)
	}
	if again, _ := h.OnStopOutputAt(ctx, "m", nil); string(again) != string(b) {
		t.Fatalf("a repeated stop moved the cut: %s, then %s", b, again)
	}

	// Every frame before the cut, none from it on.
	untilTime(due.Add(5 * interval))
	if r := rec.chk.Report(); !r.Continuous() || r.First != 0 || r.Last != cut.NextSeq-1 {
		t.Fatalf("at the cut %d: %v", cut.NextSeq, r)
	}
	t.Logf("the last frame before the cut went out %s after its slot (timing: see BenchmarkMigration)", rec.at(cut.NextSeq-1).Sub(due.Add(-interval)))

	// An abort of another migration changes nothing; of this one resumes.
	h.OnAbort(ctx, "other", "x")
	h.OnAbort(ctx, "m", "target failed")
	exampletest.Eventually(t, 10*time.Second, "output resumed", func() bool { return rec.has(cut.NextSeq + 10) })
	if r := rec.chk.Report(); !r.Continuous() || r.First != 0 || r.Duplicates != 0 {
		t.Fatalf("after the resume: %v", r)
	}
}

// TestHandoverContinuesTheStream: a source and a target in one process,
// the test relaying their payloads as the Manager does. The sink gets every
// frame once, the target starting exactly at the cut, one frame interval
// after the source's last.
func TestHandoverContinuesTheStream(t *testing.T) {
	const rate, lead = 50, 150 * time.Millisecond
	interval := time.Second / rate
	srcCfg := mediaConfig("source", rate, lead)
	srcCfg.StartSeq = 1000
	tgtCfg := mediaConfig("target", rate, lead)
	tgtCfg.JobSocket, tgtCfg.MigrationID, tgtCfg.Handover = "/unused", "m", true
	src := newOutput(rate, srcCfg.StartSeq, time.Now(), false)
	tgt := newOutput(rate, 0, time.Now(), true)
	rec := newRecorder()
	stopSrc := startStream(t, srcCfg, src, rec)
	stopTgt := startStream(t, tgtCfg, tgt, rec)
	hs := newHandover(src, srcCfg, testLogger(io.Discard))
	ht := newHandover(tgt, tgtCfg, testLogger(io.Discard))
	sess := fakeSession{calls: make(chan readyCall, 4)}
	ht.setSession(sess)
	ctx := context.Background()
	exampletest.Eventually(t, 10*time.Second, "the source streams", func() bool { return rec.has(1005) })

	// A target has no state to give and nothing to stop.
	if _, refused := ht.OnGetState(ctx, "x"); refused == "" {
		t.Error("a holding target answered get-state")
	}
	if _, err := ht.OnStopOutputAt(ctx, "x", nil); err == nil {
		t.Error("a holding target accepted a stop")
	}

	ht.OnAttached(ctx, jobsocket.Identity{JobID: "cam", Role: "primary@m", MigrationID: "m", Handover: true})
	state, _ := hs.OnGetState(ctx, "m")
	ht.OnInitialState(ctx, "m", state)
	var ready readyCall
	select {
	case ready = <-sess.calls:
	case <-time.After(10 * time.Second):
		t.Fatal("the target did not send ready")
	}
	if ready.id != "m" || !strings.Contains(string(ready.payload), `"frameRate":50`) {
		t.Fatalf("ready %+v", ready)
	}
	stopped, err := hs.OnStopOutputAt(ctx, "m", ready.payload)
	if err != nil {
		t.Fatal(err)
	}
	cut := decodePosition(t, stopped)
	b, err := ht.OnApplyFrom(ctx, "m", stopped)
	if err != nil {
		t.Fatal(err)
	}
	var sum applySummary
	// Never early: the first frame goes out at or after its slot.
	if err := json.Unmarshal(b, &sum); err != nil || len(sum.Applied) != 1 || sum.Applied[0] != "frames" || len(sum.Failed) != 0 ||
		sum.SkewMs < 0 {
		t.Fatalf("summary %s: %v", b, err)
	}
	if again, _ := ht.OnApplyFrom(ctx, "m", stopped); string(again) != string(b) {
		t.Errorf("a repeated apply answered %s, then %s", b, again)
	}
	exampletest.Eventually(t, 10*time.Second, "the target streams", func() bool { return rec.has(cut.NextSeq + 10) })
	// A source its host holds up may not have reached its cut yet (sent or
	// dropped what it had left): stopped now, it would send nothing more.
	exampletest.Eventually(t, 10*time.Second, "the source at its cut", func() bool { return src.nextSeq() == cut.NextSeq })
	stopSrc()
	stopTgt()

	r := checkAcrossCut(t, rec, src, 1000, cut)
	for _, seq := range []uint64{1000, cut.NextSeq - 1} {
		if rec.has(seq) && !strings.HasPrefix(rec.from(seq), "node=source ") {
			t.Errorf("frame %d came from %q", seq, rec.from(seq))
		}
	}
	for _, seq := range []uint64{cut.NextSeq, r.Last} {
		if !strings.HasPrefix(rec.from(seq), "node=target ") {
			t.Errorf("frame %d came from %q", seq, rec.from(seq))
		}
	}
	if rec.has(cut.NextSeq - 1) {
		t.Logf("the gap at the cut is %s; one frame interval is %s (timing: see BenchmarkMigration)",
			rec.at(cut.NextSeq).Sub(rec.at(cut.NextSeq-1)), interval)
	}
}

// stallWriter passes each write to w; once armed, the first write returns
// only when release is closed: a source that its host descheduled just
// after it wrote a frame, long enough for the target to start.
type stallWriter struct {
	w       io.Writer
	armed   atomic.Bool
	once    sync.Once
	stalled atomic.Uint64 // the frame after which it stalled
	release chan struct{}
}

func (s *stallWriter) Write(b []byte) (int, error) {
	n, err := s.w.Write(b)
	if s.armed.Load() {
		s.once.Do(func() {
			f, _ := frames.Decode(b)
			s.stalled.Store(f.Seq)
			<-s.release
		})
	}
	return n, err
}

// TestSourceTooLateForTheCutDropsRatherThanReorders: a source held up
// past its cut (here: stalled in its first write after the cut is set,
// until the target has sent two frames) sends none of the frames it has
// left before the cut: the sink
// sees those missing, reported by the source, and nothing out of order
// or twice. Sent late, they would arrive after the target's.
func TestSourceTooLateForTheCutDropsRatherThanReorders(t *testing.T) {
	t.Parallel()
	const rate, lead = 50, 150 * time.Millisecond
	srcCfg := mediaConfig("source", rate, lead)
	srcCfg.StartSeq = 1000
	tgtCfg := mediaConfig("target", rate, lead)
	src := newOutput(rate, srcCfg.StartSeq, time.Now(), false)
	tgt := newOutput(rate, 0, time.Now(), true)
	rec := newRecorder()
	stall := &stallWriter{w: rec, release: make(chan struct{})}
	var releaseOnce sync.Once
	release := func() { releaseOnce.Do(func() { close(stall.release) }) }
	startStream(t, srcCfg, src, stall)
	startStream(t, tgtCfg, tgt, rec)
	t.Cleanup(release) // before the streams stop: cleanups run last first
	hs := newHandover(src, srcCfg, testLogger(io.Discard))
	ht := newHandover(tgt, tgtCfg, testLogger(io.Discard))
	ctx := context.Background()
	exampletest.Eventually(t, 10*time.Second, "the source streams", func() bool { return rec.has(1002) })

	// The next frame the source writes is its last before the stall; the
	// cut is seven or more frames after it.
	stall.armed.Store(true)
	stopped, err := hs.OnStopOutputAt(ctx, "m", nil)
	if err != nil {
		t.Fatal(err)
	}
	cut := decodePosition(t, stopped)
	if _, err := ht.OnApplyFrom(ctx, "m", stopped); err != nil {
		t.Fatal(err)
	}
	exampletest.Eventually(t, 10*time.Second, "the target's second frame", func() bool { return rec.has(cut.NextSeq + 1) })
	release()
	exampletest.Eventually(t, 10*time.Second, "the source at its cut", func() bool { return src.nextSeq() == cut.NextSeq })

	r := checkAcrossCut(t, rec, src, 1000, cut)
	// The source stalled after its last frame; a host loaded enough may
	// have held it up before it wrote any after the arming, and then it
	// dropped from there. Either way the cut is far enough ahead (seven
	// frames or more) that frames were left.
	last := rec.lastFrom("node=source ")
	if s := stall.stalled.Load(); s != 0 && s != last {
		t.Fatalf("the source stalled after frame %d but sent up to %d", s, last)
	}
	if last+1 >= cut.NextSeq {
		t.Fatalf("the source sent up to frame %d, the cut is %d: want frames left between", last, cut.NextSeq)
	}
	want := []frames.Range{{First: last + 1, Last: cut.NextSeq - 1}}
	if got := src.missedCut(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("the source reports dropping %v, want %v", got, want)
	}
	if r.MissingCount != want[0].Len() {
		t.Errorf("stream %v: want %v missing", r, want)
	}
}

// TestTargetStartsAtOnceWhenTheCutIsPast: a cut relayed after it was due
// starts the target at once; the summary's skew says how late.
func TestTargetStartsAtOnceWhenTheCutIsPast(t *testing.T) {
	const rate = 100
	cfg := mediaConfig("target", rate, 0)
	tgt := newOutput(rate, 0, time.Now(), true)
	rec := newRecorder()
	startStream(t, cfg, tgt, rec)
	h := newHandover(tgt, cfg, testLogger(io.Discard))
	due := time.Now().Add(-200 * time.Millisecond)
	payload, _ := json.Marshal(position{NextSeq: 500, NextDueUnixNano: due.UnixNano(), FrameRate: rate})
	b, err := h.OnApplyFrom(context.Background(), "m", payload)
	if err != nil {
		t.Fatal(err)
	}
	var sum applySummary
	if err := json.Unmarshal(b, &sum); err != nil || sum.SkewMs < 200 || len(sum.Failed) != 0 {
		t.Fatalf("summary %s: %v", b, err)
	}
	exampletest.Eventually(t, 10*time.Second, "the target catches up", func() bool { return rec.has(540) })
	if r := rec.chk.Report(); !r.Continuous() || r.First != 500 {
		t.Fatalf("stream %v", r)
	}
}

// TestAbortedTargetStaysSilent: an aborted target refuses the apply and
// sends nothing; one the worker no longer calls a target starts on its own.
func TestAbortedTargetStaysSilent(t *testing.T) {
	cfg := mediaConfig("target", 100, 0)
	cfg.JobSocket, cfg.MigrationID, cfg.Handover = "/unused", "m", true
	tgt := newOutput(100, 0, time.Now(), true)
	h := newHandover(tgt, cfg, testLogger(io.Discard))
	ctx := context.Background()
	h.OnAttached(ctx, jobsocket.Identity{MigrationID: "m", Handover: true})
	h.OnAbort(ctx, "m", "operator")
	payload, _ := json.Marshal(position{NextSeq: 5, NextDueUnixNano: time.Now().UnixNano(), FrameRate: 100})
	if _, err := h.OnApplyFrom(ctx, "m", payload); err == nil {
		t.Fatal("an aborted target applied")
	}
	h.OnAttached(ctx, jobsocket.Identity{MigrationID: "m", Handover: true}) // a reconnect: still silent
	if !tgt.isHolding() {
		t.Fatal("an aborted target started output")
	}

	other := newOutput(100, 0, time.Now(), true)
	h2 := newHandover(other, cfg, testLogger(io.Discard))
	h2.OnAttached(ctx, jobsocket.Identity{}) // started as a target, applied before a restart
	if other.isHolding() {
		t.Fatal("a job the worker no longer calls a target is still silent")
	}
}

// TestOnlyAHandoverTargetHolds: a target of another strategy (no
// NORSK_MIGRATION_HANDOVER), or any job without a job socket, starts as
// usual.
func TestOnlyAHandoverTargetHolds(t *testing.T) {
	for _, tt := range []struct {
		socket, migration string
		handover          bool
		want              bool
	}{
		{"/s", "m", true, true},
		{"/s", "m", false, false},
		{"", "m", true, false},
		{"/s", "", true, false},
	} {
		cfg := config{JobSocket: tt.socket, MigrationID: tt.migration, Handover: tt.handover}
		if got := cfg.handoverTarget(); got != tt.want {
			t.Errorf("%+v: handover target %v, want %v", tt, got, tt.want)
		}
	}
}
