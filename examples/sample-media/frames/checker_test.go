package frames

import (
	"math"
	"math/rand/v2"
	"reflect"
	"sync"
	"testing"
	"time"
)

func TestCheckerTable(t *testing.T) {
	tests := []struct {
		name string
		seqs []uint64
		want Report // Streams and timing are checked separately
	}{
		{
			name: "empty",
			want: Report{},
		},
		{
			name: "continuous",
			seqs: []uint64{0, 1, 2, 3, 4},
			want: Report{Count: 5, Unique: 5, First: 0, Last: 4},
		},
		{
			name: "continuous from a start sequence",
			seqs: []uint64{100, 101, 102},
			want: Report{Count: 3, Unique: 3, First: 100, Last: 102},
		},
		{
			name: "one gap",
			seqs: []uint64{0, 1, 4, 5},
			want: Report{Count: 4, Unique: 4, First: 0, Last: 5, Missing: []Range{{2, 3}}, MissingCount: 2},
		},
		{
			name: "several gaps",
			seqs: []uint64{1, 3, 5, 9},
			want: Report{Count: 4, Unique: 4, First: 1, Last: 9,
				Missing: []Range{{2, 2}, {4, 4}, {6, 8}}, MissingCount: 5},
		},
		{
			name: "duplicate",
			seqs: []uint64{0, 1, 1, 2},
			want: Report{Count: 4, Unique: 3, First: 0, Last: 2, Duplicates: 1, DuplicateRanges: []Range{{1, 1}}},
		},
		{
			name: "overlap of source and target (migration duplicated output)",
			seqs: []uint64{0, 1, 2, 3, 4, 2, 3, 4, 5, 6},
			want: Report{Count: 10, Unique: 7, First: 0, Last: 6, Duplicates: 3, DuplicateRanges: []Range{{2, 4}}},
		},
		{
			name: "triplicate counts twice",
			seqs: []uint64{5, 5, 5},
			want: Report{Count: 3, Unique: 1, First: 5, Last: 5, Duplicates: 2, DuplicateRanges: []Range{{5, 5}}},
		},
		{
			name: "reorder without loss",
			seqs: []uint64{0, 2, 1, 3},
			want: Report{Count: 4, Unique: 4, First: 0, Last: 3, OutOfOrder: 1},
		},
		{
			name: "late frame fills a gap",
			seqs: []uint64{0, 1, 3, 4, 5, 2},
			want: Report{Count: 6, Unique: 6, First: 0, Last: 5, OutOfOrder: 1},
		},
		{
			name: "reverse order",
			seqs: []uint64{3, 2, 1, 0},
			want: Report{Count: 4, Unique: 4, First: 0, Last: 3, OutOfOrder: 3},
		},
		{
			name: "reordered duplicate counts as duplicate only",
			seqs: []uint64{0, 1, 2, 1},
			want: Report{Count: 4, Unique: 3, First: 0, Last: 2, Duplicates: 1, DuplicateRanges: []Range{{1, 1}}},
		},
		{
			name: "gap, duplicate and reorder",
			seqs: []uint64{10, 11, 14, 12, 12, 16},
			want: Report{Count: 6, Unique: 5, First: 10, Last: 16,
				Missing: []Range{{13, 13}, {15, 15}}, MissingCount: 2,
				Duplicates: 1, DuplicateRanges: []Range{{12, 12}}, OutOfOrder: 1},
		},
		{
			name: "extremes of the sequence space",
			seqs: []uint64{math.MaxUint64, 0, math.MaxUint64 - 1, 1},
			want: Report{Count: 4, Unique: 4, First: 0, Last: math.MaxUint64,
				Missing: []Range{{2, math.MaxUint64 - 2}}, MissingCount: math.MaxUint64 - 3, OutOfOrder: 3},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var c Checker
			t0 := time.Unix(1000, 0)
			for i, s := range tt.seqs {
				c.Add(Frame{Seq: s, StreamID: "s"}, t0.Add(time.Duration(i)*time.Millisecond))
			}
			got := c.Report()
			if len(tt.seqs) > 0 {
				if got.Streams["s"] != uint64(len(tt.seqs)) || len(got.Streams) != 1 {
					t.Errorf("Streams = %v", got.Streams)
				}
			}
			got.Streams = nil
			if len(tt.seqs) > 1 && (got.MaxGap != time.Millisecond) {
				t.Errorf("MaxGap = %v, want 1ms", got.MaxGap)
			}
			got.MaxGap, got.MaxGapBefore = 0, 0
			if len(got.DuplicateRanges) == 0 {
				got.DuplicateRanges = nil
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Report:\n got %+v\nwant %+v", got, tt.want)
			}
			wantContinuous := tt.want.Count > 0 && tt.want.MissingCount == 0 && tt.want.Duplicates == 0
			if got.Continuous() != wantContinuous {
				t.Errorf("Continuous() = %v, want %v", got.Continuous(), wantContinuous)
			}
			_ = got.String() // must not panic
		})
	}
}

func TestCheckerMaxGap(t *testing.T) {
	var c Checker
	t0 := time.Unix(1000, 0)
	arrivals := []time.Duration{0, 40, 80, 400, 440} // ms
	for i, a := range arrivals {
		c.Add(Frame{Seq: uint64(i)}, t0.Add(a*time.Millisecond))
	}
	r := c.Report()
	if r.MaxGap != 320*time.Millisecond || r.MaxGapBefore != 3 {
		t.Fatalf("MaxGap = %v before %d, want 320ms before 3", r.MaxGap, r.MaxGapBefore)
	}
}

func TestCheckerStreams(t *testing.T) {
	var c Checker
	now := time.Now()
	c.Add(Frame{Seq: 0, StreamID: "a"}, now)
	c.Add(Frame{Seq: 1, StreamID: "a"}, now)
	c.Add(Frame{Seq: 2, StreamID: "b"}, now)
	r := c.Report()
	if want := map[string]uint64{"a": 2, "b": 1}; !reflect.DeepEqual(r.Streams, want) {
		t.Fatalf("Streams = %v, want %v", r.Streams, want)
	}
	// The report is a copy.
	r.Streams["a"] = 99
	if c.Report().Streams["a"] != 2 {
		t.Fatal("Report shares its Streams map with the checker")
	}
}

// TestCheckerRandomPermutation checks the range set against a plain map on
// random input with gaps, duplicates and reordering.
func TestCheckerRandomPermutation(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for round := 0; round < 200; round++ {
		var c Checker
		seen := map[uint64]int{}
		n := rng.IntN(300)
		for i := 0; i < n; i++ {
			s := uint64(rng.IntN(200))
			seen[s]++
			c.Add(Frame{Seq: s}, time.Unix(0, 0))
		}
		r := c.Report()
		var unique, dups uint64
		lo, hi := uint64(math.MaxUint64), uint64(0)
		for s, k := range seen {
			unique++
			dups += uint64(k - 1)
			lo, hi = min(lo, s), max(hi, s)
		}
		if n == 0 {
			lo = 0
		}
		if r.Unique != unique || r.Duplicates != dups || r.Count != uint64(n) || r.First != lo || r.Last != hi {
			t.Fatalf("round %d: report %+v; want unique=%d dups=%d first=%d last=%d", round, r, unique, dups, lo, hi)
		}
		var missing uint64
		for _, m := range r.Missing {
			for s := m.First; s <= m.Last; s++ {
				if seen[s] > 0 {
					t.Fatalf("round %d: %d reported missing but was added", round, s)
				}
				missing++
			}
		}
		if n > 0 && missing != (hi-lo+1)-unique {
			t.Fatalf("round %d: missing %d, want %d", round, missing, (hi-lo+1)-unique)
		}
	}
}

func TestCheckerConcurrent(t *testing.T) {
	var c Checker
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 1000; i++ {
				c.Add(Frame{Seq: uint64(w*1000 + i)}, time.Now())
				_ = c.Report()
			}
		}()
	}
	wg.Wait()
	if r := c.Report(); !r.Continuous() || r.Count != 4000 {
		t.Fatalf("report %v", r)
	}
}
