package hostagent

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics an operator pages on, served at the agent's /metrics:
//
//	norsk_host_agent_vms{state}              VMs by state (Lost: the VMM no longer answers)
//	norsk_host_agent_unaccounted_vmms        VMMs answering on a socket with no VM record
//	norsk_host_agent_vcpus{kind=total|used}  the room the VMs may take, and what they take
//	norsk_host_agent_memory_bytes{kind=…}
//	norsk_host_agent_vm_creates_total{outcome=ok|capacity|failed}
//	norsk_host_agent_tls_certificate_expiry_timestamp_seconds  when the served certificate expires (absent: cleartext)
//	norsk_host_agent_tls_renewals_total{outcome=ok|failed}
type metrics struct {
	a       *Agent
	vms     *prometheus.Desc
	unacc   *prometheus.Desc
	vcpus   *prometheus.Desc
	memory  *prometheus.Desc
	creates *prometheus.CounterVec
	expiry  *prometheus.Desc
	renew   *prometheus.CounterVec
}

func newMetrics(a *Agent) *metrics {
	return &metrics{
		a:      a,
		vms:    prometheus.NewDesc("norsk_host_agent_vms", "The host's VMs by state (Lost: its VMM no longer answers on its API socket).", []string{"state"}, nil),
		unacc:  prometheus.NewDesc("norsk_host_agent_unaccounted_vmms", "VMMs answering on an API socket with no VM record beside it (left running).", nil, nil),
		vcpus:  prometheus.NewDesc("norsk_host_agent_vcpus", "vCPUs the VMs may take in all (total) and take now (used).", []string{"kind"}, nil),
		memory: prometheus.NewDesc("norsk_host_agent_memory_bytes", "Memory the VMs may take in all (total) and take now (used).", []string{"kind"}, nil),
		creates: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "norsk_host_agent_vm_creates_total",
			Help: "VM creates by outcome: ok, capacity (the host had no room), failed."}, []string{"outcome"}),
		expiry: prometheus.NewDesc("norsk_host_agent_tls_certificate_expiry_timestamp_seconds",
			"When the certificate the agent serves its API with expires (Unix seconds); absent while it serves cleartext.", nil, nil),
		renew: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "norsk_host_agent_tls_renewals_total",
			Help: "Certificate renewals with the Manager by outcome: ok, failed."}, []string{"outcome"}),
	}
}

// Describe implements prometheus.Collector.
func (m *metrics) Describe(ch chan<- *prometheus.Desc) {
	ch <- m.vms
	ch <- m.unacc
	ch <- m.vcpus
	ch <- m.memory
	m.creates.Describe(ch)
	ch <- m.expiry
	m.renew.Describe(ch)
}

// Collect implements prometheus.Collector: it asks each VM's VMM its
// state.
func (m *metrics) Collect(ch chan<- prometheus.Metric) {
	a := m.a
	a.mu.Lock()
	ids := make([]string, 0, len(a.vms))
	for id := range a.vms {
		ids = append(ids, id)
	}
	uv, um, _ := a.used()
	unacc := len(a.unaccounted)
	a.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	by := map[string]int{"Running": 0, StateLost: 0}
	for _, id := range ids {
		by[a.state(ctx, id)]++
	}
	for state, n := range by {
		ch <- prometheus.MustNewConstMetric(m.vms, prometheus.GaugeValue, float64(n), state)
	}
	ch <- prometheus.MustNewConstMetric(m.unacc, prometheus.GaugeValue, float64(unacc))
	ch <- prometheus.MustNewConstMetric(m.vcpus, prometheus.GaugeValue, float64(a.cfg.VCPUs), "total")
	ch <- prometheus.MustNewConstMetric(m.vcpus, prometheus.GaugeValue, float64(uv), "used")
	ch <- prometheus.MustNewConstMetric(m.memory, prometheus.GaugeValue, float64(a.cfg.MemoryBytes), "total")
	ch <- prometheus.MustNewConstMetric(m.memory, prometheus.GaugeValue, float64(um), "used")
	m.creates.Collect(ch)
	if exp := a.served.Expires(); !exp.IsZero() {
		ch <- prometheus.MustNewConstMetric(m.expiry, prometheus.GaugeValue, float64(exp.Unix()))
	}
	m.renew.Collect(ch)
}
