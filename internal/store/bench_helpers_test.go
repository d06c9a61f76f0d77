package store

import (
	"slices"
	"testing"
	"time"
)

// reportPhases reports the mean of each commit phase since p0 (only in a
// build with -tags writepathtrace: otherwise Phases stays zero).
func reportPhases(b *testing.B, p0 PhaseTimes) {
	p := Phases()
	n := p.Proposals - p0.Proposals
	if n <= 0 {
		return
	}
	ms := func(d, d0 time.Duration) float64 {
		return float64((d*time.Duration(p.Proposals) - d0*time.Duration(p0.Proposals)).Microseconds()) / float64(n) / 1000
	}
	b.ReportMetric(ms(p.ToLogWrite, p0.ToLogWrite), "to-logwrite-ms")
	b.ReportMetric(ms(p.LogWrite, p0.LogWrite), "logwrite-ms")
	b.ReportMetric(ms(p.ToFSM, p0.ToFSM), "to-fsm-ms")
	b.ReportMetric(ms(p.FSM, p0.FSM), "fsm-ms")
	b.ReportMetric(ms(p.Back, p0.Back), "back-ms")
}

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
