package main

import (
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
		if !src.claim(seq) {
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
		if !tgt.claim(seq) {
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
