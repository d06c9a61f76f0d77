package manager

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/norsk-go/norsk-manager/internal/store"
	"github.com/norsk-go/norsk-manager/pkg/apierr"
)

// storeHealth is what /healthz says of this member's own store: "" while it
// takes writes, else a short status ("store halted", "disk full", "store
// log failed") and the store's explanation (which entry is damaged, which
// disk is full and what it needs).
func storeHealth(st *store.Store) (status, detail string) {
	if st == nil {
		return "", ""
	}
	if err := st.Halted(); err != nil {
		return "store halted", err.Error()
	}
	if err := st.Disk().Err; err != nil {
		if apierr.Is(err, apierr.ResourceExhausted) {
			return "disk full", err.Error()
		}
		return "store log failed", err.Error()
	}
	return "", ""
}

// storeValue is a metric's value read from the member's current store at
// each scrape (st: a recovery replaces the store): f of what read returns,
// 0 while the member has no store.
func storeValue[T any](st func() *store.Store, read func(*store.Store) T, f func(T) float64) func() float64 {
	return func() float64 {
		s := st()
		if s == nil {
			return 0
		}
		return f(read(s))
	}
}

// registerStoreMetrics exports the state of the member's disk and store
// (st is read at each scrape: a recovery replaces the store).
func registerStoreMetrics(reg prometheus.Registerer, st func() *store.Store) {
	disk := func(f func(store.DiskStatus) float64) func() float64 {
		return storeValue(st, (*store.Store).Disk, f)
	}
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "norsk_manager_store_disk_free_bytes",
			Help: "Free space on the filesystem holding the store's raft log.",
		}, disk(func(d store.DiskStatus) float64 { return float64(d.Free) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "norsk_manager_store_disk_needed_bytes",
			Help: "Free space the store keeps to take writes (a raft-log segment and a reserve); below it writes are refused.",
		}, disk(func(d store.DiskStatus) float64 { return float64(d.Need) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "norsk_manager_store_writes_refused",
			Help: "1 while this member's store refuses writes because of its disk (full, or its raft log failed a write).",
		}, disk(func(d store.DiskStatus) float64 {
			if d.Err != nil {
				return 1
			}
			return 0
		})),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "norsk_manager_store_halted",
			Help: "1 once this member stopped applying its raft log because an entry failed its checksum (restart it).",
		}, func() float64 {
			if s := st(); s != nil && s.Halted() != nil {
				return 1
			}
			return 0
		}),
	)
}
