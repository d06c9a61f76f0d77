package state

import (
	"fmt"
	"testing"
)

// TestWatchesSweepStaleRegistrations: registrations whose keys never
// change do not accumulate without bound; a sweep closes them (a spurious
// wake, which readers allow) once they pass the threshold, and the
// threshold then doubles.
func TestWatchesSweepStaleRegistrations(t *testing.T) {
	t.Parallel()
	w := newWatches(schema(), 0)
	first := w.ch(w.keyFor(tableJobs, "id", "job-0"), 0)
	for i := 1; i <= minSweep; i++ {
		w.ch(w.keyFor(tableJobs, "id", fmt.Sprintf("job-%d", i)), 0)
	}
	select {
	case <-first:
	default:
		t.Fatal("a stale registration was not closed by the sweep")
	}
	if n := len(w.chans); n != 1 {
		t.Fatalf("%d channels registered after the sweep, want 1 (the one that triggered it)", n)
	}
	if w.sweepAt != 2*minSweep {
		t.Fatalf("next sweep at %d, want %d", w.sweepAt, 2*minSweep)
	}
	// A registration of the same key again is the same channel.
	k := w.keyFor(tableJobs, "id", "job-x")
	if w.ch(k, 0) != w.ch(k, 0) {
		t.Fatal("two registrations of one key got different channels")
	}
}
