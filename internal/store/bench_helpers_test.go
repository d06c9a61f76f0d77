package store

import (
	"slices"
	"time"
)

// sortedDurations joins per-goroutine samples and sorts them.
func sortedDurations(parts [][]time.Duration) []time.Duration {
	all := slices.Concat(parts...)
	slices.Sort(all)
	return all
}

// msAt is the p-th percentile of sorted, in milliseconds.
func msAt(sorted []time.Duration, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := min(max(int(float64(len(sorted))*p/100+0.999999)-1, 0), len(sorted)-1)
	return float64(sorted[i]) / float64(time.Millisecond)
}
