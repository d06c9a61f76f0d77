package main

import (
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/norsk-go/norsk-manager/pkg/jobsocket"
)

// TestPayloadCarriesTheClock: the source's position and cut carry the
// wall-clock time of the next frame's slot and the rate, and a target
// applied from the cut schedules its first frame in exactly that slot and
// the following ones on the same clock; the frames either side of the cut
// are the precise ones.
func TestPayloadCarriesTheClock(t *testing.T) {
	t.Parallel()
	const rate = 25
	interval := time.Second / rate
	base := time.Now()
	src := newOutput(rate, 100, base, false)
	for seq := uint64(100); seq < 103; seq++ {
		if ok, _ := src.claim(seq, base); !ok {
			t.Fatalf("claim %d", seq)
		}
	}
	now := base.Add(90 * time.Millisecond)
	p := src.position(now)
	if p.NextSeq != 103 || p.FrameRate != rate || p.AsOfUnixNano != now.UnixNano() ||
		p.NextDueUnixNano != base.Add(3*interval).UnixNano() {
		t.Fatalf("position %+v: want frame 103 due %d (base + 3 intervals), as of %d", p, base.Add(3*interval).UnixNano(), now.UnixNano())
	}

	cut := src.cutAt("m", 200*time.Millisecond, now) // 290 ms from base: frame 108 is the first at or after
	if cut.NextSeq != 108 || cut.NextDueUnixNano != base.Add(8*interval).UnixNano() || cut.FrameRate != rate {
		t.Fatalf("cut %+v: want frame 108 due %d", cut, base.Add(8*interval).UnixNano())
	}
	for seq, want := range map[uint64]bool{105: false, 106: true, 107: true} {
		src.mu.Lock()
		src.next = seq
		src.mu.Unlock()
		if _, _, precise, ok := src.nextFrame(); !ok || precise != want {
			t.Errorf("source frame %d: precise %v (ok %v), want %v", seq, precise, ok, want)
		}
	}
	src.mu.Lock()
	src.next = 108
	src.mu.Unlock()
	if _, _, _, ok := src.nextFrame(); ok {
		t.Error("the source may send the cut's frame")
	}

	tgt := newOutput(rate, 0, time.Now(), true)
	if _, _, _, ok := tgt.nextFrame(); ok {
		t.Fatal("a holding target may send")
	}
	applyAt := time.Now()
	if _, ok := tgt.apply(cut, applyAt); !ok {
		t.Fatal("apply refused")
	}
	slot := jobsocket.LocalTime(cut.NextDueUnixNano, applyAt)
	for i, want := range []bool{true, true, false} {
		seq, due, precise, ok := tgt.nextFrame()
		if !ok || seq != 108+uint64(i) || !due.Equal(slot.Add(time.Duration(i)*interval)) || precise != want {
			t.Errorf("target frame %d: seq %d due %s precise %v, want seq %d due %s precise %v",
				i, seq, due, precise, 108+i, slot.Add(time.Duration(i)*interval), want)
		}
		if ok, _ := tgt.claim(seq, time.Now()); !ok {
			t.Fatalf("claim %d", seq)
		}
	}
}

// TestPacerNeverEarly: a precise frame's wait ends at or after its slot,
// with or without real-time priority (which this host may refuse).
func TestPacerNeverEarly(t *testing.T) {
	t.Parallel()
	for _, priority := range []int{0, defaultCutoverPriority} {
		p := newPacer(priority, testLogger(io.Discard))
		for range 3 {
			at := time.Now().Add(5 * time.Millisecond)
			release := p.await(at)
			if now := time.Now(); now.Before(at) {
				t.Errorf("priority %d: await returned %s early", priority, at.Sub(now))
			}
			release()
		}
	}
}

// TestClaimDropsWhatMissedTheCut: a source's frame before its cut is sent
// however late it is until the cut's deadline, cutMargin before the
// cut's slot; from then on the frames left before the cut are
// dropped (reported), the gate stays shut at the cut, and an abort resumes
// from the cut.
func TestClaimDropsWhatMissedTheCut(t *testing.T) {
	t.Parallel()
	const rate = 25
	interval := time.Second / rate
	base := time.Now()
	src := newOutput(rate, 100, base, false)
	cut := src.cutAt("m", 200*time.Millisecond, base.Add(90*time.Millisecond)) // frame 108, due base + 8 intervals
	deadline := base.Add(8*interval - cutMargin)
	if cut.NextSeq != 108 {
		t.Fatalf("cut %+v, want frame 108", cut)
	}
	for seq := uint64(100); seq < 104; seq++ {
		if ok, missed := src.claim(seq, deadline.Add(-time.Nanosecond)); !ok || missed != 0 {
			t.Fatalf("frame %d just before the deadline: claimed %v, missed %d", seq, ok, missed)
		}
	}
	if ok, missed := src.claim(104, deadline); ok || missed != 4 {
		t.Fatalf("frame 104 at the deadline: claimed %v, missed %d; want 104-107 dropped", ok, missed)
	}
	if got := fmt.Sprint(src.missedCut()); got != "[104-107]" {
		t.Errorf("missed %s, want [104-107]", got)
	}
	if _, _, _, ok := src.nextFrame(); ok || src.nextSeq() != 108 {
		t.Errorf("after the drop: a frame may be sent (%v), next %d; want none, next 108", ok, src.nextSeq())
	}
	if !src.resume("m", deadline.Add(time.Second)) {
		t.Fatal("the abort did not resume")
	}
	if seq, _, _, ok := src.nextFrame(); !ok || seq != 108 {
		t.Errorf("after the abort: next frame %d (%v), want 108", seq, ok)
	}
}
