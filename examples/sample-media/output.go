package main

import (
	"math"
	"sync"
	"time"

	"github.com/norsk-go/norsk-manager/examples/sample-media/frames"
	"github.com/norsk-go/norsk-manager/pkg/jobsocket"
)

// cutMargin is how long before the slot of a cut's frame a source's last
// frames stop being sendable (at most half a frame interval): the time a
// write takes and the disagreement of the two hosts' wall clocks that a
// frame-exact cutover assumes anyway (within 0.5 ms: decision 0055).
const cutMargin = time.Millisecond

// preciseFrames is how many frames either side of a cut are paced
// precisely: the source's last ones before its cut, the target's first
// ones from it. Together they make the gap the sink sees at the cut.
const preciseFrames = 2

// output is the stream's frame clock and its gate: which sequence number is
// next, when each frame is due, and whether it may be sent. The send loop
// (run) asks it for the next frame and claims it before writing it; the job
// socket's handler (handover.go) moves the clock and the gate. Safe for
// concurrent use.
//
// The clock: frame baseSeq is due at baseTime, frame n at
// baseTime + (n-baseSeq)/rate. Re-basing (after falling behind, on resume)
// moves the base to the next frame and now; it never changes a sequence
// number. baseTime carries a monotonic reading (it comes from time.Now, or
// from jobsocket.LocalTime for a target), so the schedule is paced on the
// monotonic clock and only expressed on the wall clock in a payload.
//
// The frames either side of a cut are precise: the send loop wakes
// preciseLead before one is due and hands the rest of the wait to its pacer
// (pace.go), since a timer's wake-up is late by up to a millisecond or more
// and the gap at the cut is made of exactly two frames' lateness.
//
// Order across the cut is not left to timing. The target sends the cut's
// frame at its slot, never before; the source sends no frame before the cut
// once the cut's deadline has passed (cutMargin before that slot: see
// claim). A source too late for it (a busy host descheduled it) drops the
// frames it has left before the cut, logged and counted, rather than send
// them after the target's first (decision 0064): a viewer may see a frame
// late, or miss one, but never one out of order or twice.
type output struct {
	mu       sync.Mutex
	rate     float64
	baseSeq  uint64
	baseTime time.Time
	// next is the first sequence number not sent nor being sent.
	next uint64
	// holding: a migration target before its apply sends nothing.
	holding bool
	// cut: a source told to stop sends no frame at or after cut.NextSeq.
	cut    *position
	cutMig string
	// cutDeadline is when the source's frames before the cut stop being
	// sendable (on this process's monotonic clock); missed are the frames
	// dropped for missing it.
	cutDeadline time.Time
	missed      []frames.Range
	// first: after an apply, the first frame's send time is awaited.
	firstSeq  uint64
	firstDone chan struct{} // closed once firstSeq went out; nil when none is awaited
	firstAt   time.Time
	// preciseLo <= seq < preciseHi are paced precisely (the frames either
	// side of the latest cut).
	preciseLo, preciseHi uint64
	// wake tells the send loop the gate or the clock changed.
	wake chan struct{}
}

func newOutput(rate float64, startSeq uint64, start time.Time, holding bool) *output {
	return &output{rate: rate, baseSeq: startSeq, baseTime: start, next: startSeq, holding: holding, wake: make(chan struct{}, 1)}
}

// dueLocked is when frame seq is due; o.mu held.
func (o *output) dueLocked(seq uint64) time.Time {
	n := float64(seq - o.baseSeq)
	if seq < o.baseSeq {
		n = -float64(o.baseSeq - seq)
	}
	return o.baseTime.Add(time.Duration(math.Round(n * float64(time.Second) / o.rate)))
}

// permittedLocked reports whether frame seq may be sent; o.mu held.
func (o *output) permittedLocked(seq uint64) bool {
	return !o.holding && (o.cut == nil || seq < o.cut.NextSeq)
}

func (o *output) signal() {
	select {
	case o.wake <- struct{}{}:
	default:
	}
}

// nextFrame returns the next frame, when it is due and whether it is to be
// paced precisely (it is next to a cut); ok is false while nothing may be
// sent (a target before its apply, a source at its cut).
func (o *output) nextFrame() (seq uint64, due time.Time, precise, ok bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.permittedLocked(o.next) {
		return 0, time.Time{}, false, false
	}
	return o.next, o.dueLocked(o.next), o.preciseLo <= o.next && o.next < o.preciseHi, true
}

// claim takes frame seq for sending at now, which the caller reads just
// before it writes the frame; false when the gate or the clock changed
// since nextFrame (the caller asks again), or when seq is before a cut
// whose deadline is not after now. Then every frame left before the cut is
// dropped, never to be sent: missed is how many (seq to seq+missed-1).
//
// The deadline is cutMargin (at most half a frame interval) before the
// slot of the cut's frame, which the target sends at or after that slot:
// the margin is left for the write itself and for the two hosts' clocks
// disagreeing. A source frame is otherwise sent however late it is.
func (o *output) claim(seq uint64, now time.Time) (ok bool, missed uint64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.next != seq || !o.permittedLocked(seq) {
		return false, 0
	}
	if o.cut != nil && !now.Before(o.cutDeadline) {
		missed = o.cut.NextSeq - seq
		o.missed = append(o.missed, frames.Range{First: seq, Last: o.cut.NextSeq - 1})
		o.next = o.cut.NextSeq
		return false, missed
	}
	o.next++
	return true, 0
}

// missedCut returns the frames a source dropped for missing its cut's
// deadline (see claim), in order.
func (o *output) missedCut() []frames.Range {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]frames.Range(nil), o.missed...)
}

// sent records that frame seq went out at t.
func (o *output) sent(seq uint64, t time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.firstDone != nil && seq == o.firstSeq {
		o.firstAt = t
		close(o.firstDone)
		o.firstDone = nil
	}
}

// rebase makes frame seq due at t.
func (o *output) rebase(seq uint64, t time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.baseSeq, o.baseTime = seq, t
}

// position is where the stream is at now: its next frame, when that is due
// on the wall clock as it reads now, and the frame rate.
func (o *output) position(now time.Time) position {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.positionLocked(o.next, now)
}

// positionLocked is the stream's clock at frame seq, as a payload: the
// slot's wall-clock time and the rate, stamped with now; o.mu held.
func (o *output) positionLocked(seq uint64, now time.Time) position {
	return position{NextSeq: seq, NextDueUnixNano: jobsocket.WallUnixNano(o.dueLocked(seq), now), FrameRate: o.rate,
		AsOfUnixNano: now.UnixNano()}
}

// nextSeq is the first sequence number not sent.
func (o *output) nextSeq() uint64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.next
}

// isHolding reports whether the stream waits for an apply.
func (o *output) isHolding() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.holding
}

// cutAt sets the cut of migration id: the first frame not yet sent that is
// due at or after now+lead. Frames before it are still sent, on time;
// none from it on. A second cut of the same migration returns the first.
func (o *output) cutAt(id string, lead time.Duration, now time.Time) position {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.cut != nil && o.cutMig == id {
		return *o.cut
	}
	t := now.Add(lead)
	n := o.next
	if d := t.Sub(o.baseTime); d > 0 {
		if k := o.baseSeq + uint64(math.Ceil(d.Seconds()*o.rate)); k > n {
			n = k
		}
	}
	for o.dueLocked(n).Before(t) { // rounding
		n++
	}
	for n > o.next && !o.dueLocked(n-1).Before(t) {
		n--
	}
	p := o.positionLocked(n, now)
	o.cut = &p
	o.cutMig = id
	o.cutDeadline = o.dueLocked(n).Add(-min(cutMargin, time.Duration(float64(time.Second)/o.rate/2)))
	o.preciseLo, o.preciseHi = n-min(n, preciseFrames), n
	o.signal()
	return *o.cut
}

// resume lifts the cut of migration id; false when there is none. Output
// goes on from the first frame not sent; if that one is already late, the
// clock is re-based on now so that the stream resumes at its rate.
func (o *output) resume(id string, now time.Time) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.cut == nil || o.cutMig != id {
		return false
	}
	o.cut, o.cutMig = nil, ""
	if o.dueLocked(o.next).Before(now) {
		o.baseSeq, o.baseTime = o.next, now
	}
	o.signal()
	return true
}

// apply starts a holding stream at p: frame p.NextSeq first, due at
// p.NextDueUnixNano on the wall clock (mapped onto this process's monotonic
// clock as read at now), at p.FrameRate (when given): the source's clock,
// continued. It returns a channel closed once that frame went out (see
// firstSent), and false when the stream was not holding.
func (o *output) apply(p position, now time.Time) (<-chan struct{}, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.holding {
		return nil, false
	}
	if p.FrameRate > 0 {
		o.rate = p.FrameRate
	}
	o.next, o.baseSeq, o.baseTime = p.NextSeq, p.NextSeq, jobsocket.LocalTime(p.NextDueUnixNano, now)
	o.preciseLo, o.preciseHi = p.NextSeq, p.NextSeq+preciseFrames
	o.holding = false
	o.firstSeq, o.firstDone = p.NextSeq, make(chan struct{})
	done := o.firstDone
	o.signal()
	return done, true
}

// firstSent is when the apply's first frame went out.
func (o *output) firstSent() time.Time {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.firstAt
}

// release starts a holding stream on its own clock from now: the job was
// started as a migration target but is not one (any more).
func (o *output) release(now time.Time) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.holding {
		return false
	}
	o.holding = false
	o.baseSeq, o.baseTime = o.next, now
	o.signal()
	return true
}
