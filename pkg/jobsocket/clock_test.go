package jobsocket

import (
	"strings"
	"testing"
	"time"
)

func TestWallClockRoundTrip(t *testing.T) {
	t.Parallel()
	now := time.Now()
	for _, tc := range []struct {
		name string
		d    time.Duration
	}{
		{"now", 0},
		{"next frame", 40 * time.Millisecond},
		{"a cut ahead", 400 * time.Millisecond},
		{"a slot past", -3 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			at := now.Add(tc.d)
			wall := WallUnixNano(at, now)
			if want := now.UnixNano() + int64(tc.d); wall != want {
				t.Fatalf("WallUnixNano = %d, want %d", wall, want)
			}
			local := LocalTime(wall, now)
			if !strings.Contains(local.String(), "m=") {
				t.Errorf("LocalTime(%d) = %s carries no monotonic reading", wall, local)
			}
			if got := local.Sub(now); got != tc.d {
				t.Errorf("LocalTime(WallUnixNano(now%+v)) is now%+v", tc.d, got)
			}
			if local.UnixNano() != wall {
				t.Errorf("LocalTime(%d).UnixNano() = %d", wall, local.UnixNano())
			}
		})
	}
}

// A wall-only instant (as a payload decodes) still maps onto the
// monotonic clock.
func TestLocalTimeOfADecodedInstant(t *testing.T) {
	t.Parallel()
	now := time.Now()
	due := now.Round(0).Add(time.Second).UnixNano()
	local := LocalTime(due, now)
	if d := local.Sub(now); d != time.Second {
		t.Fatalf("a second ahead on the wall clock is %s ahead locally", d)
	}
}
