package frames

import (
	"fmt"
	"maps"
	"sort"
	"strings"
	"sync"
	"time"
)

// Range is an inclusive range of sequence numbers, First <= Last.
type Range struct {
	First, Last uint64
}

// Len is the number of sequence numbers in r.
func (r Range) Len() uint64 { return r.Last - r.First + 1 }

// String renders r as "7" or "7-12".
func (r Range) String() string {
	if r.First == r.Last {
		return fmt.Sprint(r.First)
	}
	return fmt.Sprintf("%d-%d", r.First, r.Last)
}

// rangeSet is a set of sequence numbers held as sorted, disjoint,
// non-adjacent ranges, so a stream that is mostly continuous costs a few
// ranges whatever its length. Adding at the end is O(log n).
type rangeSet []Range

// add inserts x and reports whether it was absent.
func (s *rangeSet) add(x uint64) bool {
	rs := *s
	// i is the first range that ends at or after x.
	i := sort.Search(len(rs), func(i int) bool { return rs[i].Last >= x })
	if i < len(rs) && rs[i].First <= x {
		return false
	}
	// Here rs[i-1].Last < x < rs[i].First, so x-1 and x+1 cannot wrap.
	joinLeft := i > 0 && rs[i-1].Last == x-1
	joinRight := i < len(rs) && rs[i].First == x+1
	switch {
	case joinLeft && joinRight:
		rs[i-1].Last = rs[i].Last
		rs = append(rs[:i], rs[i+1:]...)
	case joinLeft:
		rs[i-1].Last = x
	case joinRight:
		rs[i].First = x
	default:
		rs = append(rs, Range{})
		copy(rs[i+1:], rs[i:])
		rs[i] = Range{x, x}
	}
	*s = rs
	return true
}

// gaps returns the ranges between the set's ranges.
func (s rangeSet) gaps() []Range {
	var out []Range
	for i := 1; i < len(s); i++ {
		out = append(out, Range{s[i-1].Last + 1, s[i].First - 1})
	}
	return out
}

// Checker consumes the frames of one stream as they arrive and reports the
// stream's continuity. The zero value is ready to use; it is safe for
// concurrent use (a receiver goroutine adds while a test reads reports).
//
// Memory is proportional to the number of discontinuities, not to the
// number of frames.
type Checker struct {
	mu          sync.Mutex
	seen        rangeSet
	dups        rangeSet
	count       uint64
	dupCount    uint64
	outOfOrder  uint64
	maxSeq      uint64
	lastArrival time.Time
	maxGap      time.Duration
	maxGapSeq   uint64
	streams     map[string]uint64
}

// Add records f as arrived at the given time. Arrival times should come
// from one clock and not go backwards (time.Now() from one receiver does);
// they are used only for Report.MaxGap.
func (c *Checker) Add(f Frame, arrived time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.streams == nil {
		c.streams = make(map[string]uint64)
	}
	c.streams[f.StreamID]++
	first := c.count == 0
	c.count++
	if !first {
		if gap := arrived.Sub(c.lastArrival); gap > c.maxGap {
			c.maxGap, c.maxGapSeq = gap, f.Seq
		}
	}
	c.lastArrival = arrived
	if !c.seen.add(f.Seq) {
		c.dupCount++
		c.dups.add(f.Seq)
		return
	}
	if !first && f.Seq < c.maxSeq {
		c.outOfOrder++
	}
	if first || f.Seq > c.maxSeq {
		c.maxSeq = f.Seq
	}
}

// Report is a checker's view of a stream so far.
type Report struct {
	// Count is the number of frames added, duplicates included.
	Count uint64
	// Unique is the number of distinct sequence numbers added.
	Unique uint64
	// First and Last are the lowest and highest sequence numbers added
	// (both 0 when Count is 0).
	First, Last uint64
	// Missing are the sequence numbers between First and Last never added,
	// in order; MissingCount is how many numbers they hold.
	Missing      []Range
	MissingCount uint64
	// Duplicates is the number of frames whose sequence number had already
	// been added; DuplicateRanges are the numbers concerned.
	Duplicates      uint64
	DuplicateRanges []Range
	// OutOfOrder is the number of frames, duplicates excepted, that arrived
	// after a frame with a higher sequence number.
	OutOfOrder uint64
	// MaxGap is the longest time between two consecutive arrivals, and
	// MaxGapBefore the sequence number of the frame that ended it.
	MaxGap       time.Duration
	MaxGapBefore uint64
	// Streams counts frames by stream id.
	Streams map[string]uint64
}

// Report returns the continuity of the frames added so far.
func (c *Checker) Report() Report {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := Report{
		Count:           c.count,
		Duplicates:      c.dupCount,
		DuplicateRanges: append([]Range(nil), c.dups...),
		OutOfOrder:      c.outOfOrder,
		MaxGap:          c.maxGap,
		MaxGapBefore:    c.maxGapSeq,
		Streams:         maps.Clone(c.streams),
		Missing:         c.seen.gaps(),
	}
	if len(c.seen) > 0 {
		r.First, r.Last = c.seen[0].First, c.seen[len(c.seen)-1].Last
	}
	for _, s := range c.seen {
		r.Unique += s.Len()
	}
	for _, m := range r.Missing {
		r.MissingCount += m.Len()
	}
	return r
}

// Continuous reports whether the stream so far is every number from First
// to Last exactly once (in any order), with at least one frame.
func (r Report) Continuous() bool {
	return r.Count > 0 && r.MissingCount == 0 && r.Duplicates == 0
}

// String renders the report on one line, for logs and the sink's output.
func (r Report) String() string {
	if r.Count == 0 {
		return "no frames"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "frames=%d unique=%d seq=%d-%d missing=%d", r.Count, r.Unique, r.First, r.Last, r.MissingCount)
	if len(r.Missing) > 0 {
		fmt.Fprintf(&b, " %s", rangesString(r.Missing))
	}
	fmt.Fprintf(&b, " duplicates=%d", r.Duplicates)
	if len(r.DuplicateRanges) > 0 {
		fmt.Fprintf(&b, " %s", rangesString(r.DuplicateRanges))
	}
	fmt.Fprintf(&b, " out_of_order=%d max_gap=%s", r.OutOfOrder, r.MaxGap.Round(time.Microsecond))
	if r.MaxGap > 0 {
		fmt.Fprintf(&b, " (before seq %d)", r.MaxGapBefore)
	}
	ids := make([]string, 0, len(r.Streams))
	for id := range r.Streams {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for i, id := range ids {
		ids[i] = fmt.Sprintf("%q:%d", id, r.Streams[id])
	}
	fmt.Fprintf(&b, " streams={%s}", strings.Join(ids, ","))
	return b.String()
}

// rangesString renders up to ten ranges as "[3 7-9 …+4]".
func rangesString(rs []Range) string {
	const show = 10
	parts := make([]string, 0, min(len(rs), show)+1)
	for i, r := range rs {
		if i == show {
			parts = append(parts, fmt.Sprintf("…+%d", len(rs)-show))
			break
		}
		parts = append(parts, r.String())
	}
	return "[" + strings.Join(parts, " ") + "]"
}
