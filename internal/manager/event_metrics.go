package manager

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/norsk-go/norsk-manager/internal/events"
	"github.com/norsk-go/norsk-manager/internal/store"
)

// registerEventMetrics exports what the member's event broker holds for
// resuming subscribers: its window (decision 0066). st is read at each
// scrape: a recovery replaces the store and its broker (and the early
// drops' count starts again, as a counter does when a process restarts).
func registerEventMetrics(reg prometheus.Registerer, st func() *store.Store) {
	stat := func(f func(events.Stats) float64) func() float64 {
		return storeValue(st, func(s *store.Store) events.Stats { return s.Broker().Stats() }, f)
	}
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "norsk_manager_events_held",
			Help: "Events this member holds for event-stream subscribers to resume from.",
		}, stat(func(s events.Stats) float64 { return float64(s.Events) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "norsk_manager_events_held_bytes",
			Help: "Estimated memory of the held events (what eventMaxMiB bounds).",
		}, stat(func(s events.Stats) float64 { return float64(s.Bytes) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "norsk_manager_events_oldest_age_seconds",
			Help: "How long ago the oldest held event was published: how far back a subscriber can resume without a resync.",
		}, stat(func(s events.Stats) float64 { return s.OldestAge.Seconds() })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "norsk_manager_events_dropped_early_total",
			Help: "Events dropped younger than eventRetention because the held events reached eventMaxMiB (or, with no window, the eventBuffer count).",
		}, stat(func(s events.Stats) float64 { return float64(s.EvictedEarly) })),
	)
}
