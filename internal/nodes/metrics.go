package nodes

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the controller's Prometheus collectors.
type Metrics struct {
	Connected    prometheus.Gauge
	Dials        *prometheus.CounterVec // result=ok|error
	CommandsSent *prometheus.CounterVec // kind=start|start-prepared|stop|update|terminate
	CommandErrs  *prometheus.CounterVec // kind
	Reports      prometheus.Counter
	NodesLost    prometheus.Counter
}

// NewMetrics makes the collectors and registers them with reg (if not nil).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Connected: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "norsk_manager_workers_connected", Help: "Workers with a live NodeController stream.",
		}),
		Dials: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "norsk_manager_worker_dials_total", Help: "Attempts to open a worker's NodeController stream, by result.",
		}, []string{"result"}),
		CommandsSent: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "norsk_manager_worker_commands_total", Help: "Commands sent to workers, by kind.",
		}, []string{"kind"}),
		CommandErrs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "norsk_manager_worker_command_errors_total", Help: "Commands workers refused or failed, by kind.",
		}, []string{"kind"}),
		Reports: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "norsk_manager_worker_reports_total", Help: "Instance phase reports received from workers.",
		}),
		NodesLost: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "norsk_manager_nodes_lost_total", Help: "Nodes declared lost after their stream's grace ran out.",
		}),
	}
	// Every label value exists from the start (zero), so an alert on an
	// increase works on a fresh Manager.
	for _, r := range []string{"ok", "error"} {
		m.Dials.WithLabelValues(r)
	}
	for _, k := range []actionKind{actStart, actStartPrepared, actStop, actUpdate, actDiscovery, actAccessReplica, actControlPlanes} {
		m.CommandsSent.WithLabelValues(k.String())
		m.CommandErrs.WithLabelValues(k.String())
	}
	for _, k := range []string{"terminate", "migration"} {
		m.CommandsSent.WithLabelValues(k)
	}
	if reg != nil {
		reg.MustRegister(m.Connected, m.Dials, m.CommandsSent, m.CommandErrs, m.Reports, m.NodesLost)
	}
	return m
}
