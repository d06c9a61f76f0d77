package cluster

import (
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/norsk-go/norsk-manager/internal/clock"
)

// The event log keeps what was recorded across a reopen, answers newest
// first filtered by kind and time, and skips a damaged line.
func TestEventsSurviveAReopen(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	clk := clock.NewFake(start)
	log := slog.New(slog.DiscardHandler)

	e := OpenEvents(dir, clk, log)
	e.Record("role-change", "became the primary", 2, 1)
	clk.Advance(time.Minute)
	e.Record("member-joined", "member m2 joined", 2, 1)
	clk.Advance(time.Minute)
	e.Record("role-change", "no longer the primary", 3, 1)
	e.Close()

	// A damaged line (a crash mid-write) is skipped, not fatal.
	f, err := os.OpenFile(filepath.Join(dir, EventsFile), os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("{\"at\": \"not a ti\n"); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()

	e = OpenEvents(dir, clk, log)
	defer e.Close()
	for _, tc := range []struct {
		name    string
		limit   int
		kinds   []string
		since   time.Time
		details []string
	}{
		{"all, newest first", 10, nil, time.Time{}, []string{"no longer the primary", "member m2 joined", "became the primary"}},
		{"limited", 2, nil, time.Time{}, []string{"no longer the primary", "member m2 joined"}},
		{"one kind", 10, []string{"role-change"}, time.Time{}, []string{"no longer the primary", "became the primary"}},
		{"since", 10, nil, start.Add(time.Minute), []string{"no longer the primary", "member m2 joined"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := e.Query(tc.limit, tc.kinds, tc.since)
			if len(got) != len(tc.details) {
				t.Fatalf("got %d events (%v), want %d", len(got), got, len(tc.details))
			}
			for i, ev := range got {
				if ev.GetDetail() != tc.details[i] {
					t.Errorf("event %d: %q, want %q", i, ev.GetDetail(), tc.details[i])
				}
			}
		})
	}
}

// A forwarded answer survives its wire form: messages as they are, counts
// and indexes wrapped and unwrapped to their Go types.
func TestForwardedValueRoundTrip(t *testing.T) {
	t.Parallel()
	for _, v := range []any{uint64(42), 7} {
		m, ok := ForwardedValue(v)
		if !ok {
			t.Fatalf("%T %v cannot be forwarded", v, v)
		}
		if back := FromForwarded(m); back != v {
			t.Errorf("%T %v came back as %T %v", v, v, back, back)
		}
	}
	if _, ok := ForwardedValue("a string"); ok {
		t.Error("a string was taken as a forwarded answer")
	}
}
