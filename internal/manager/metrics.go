package manager

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/internal/store/state"
	"github.com/norsk-go/norsk-manager/pkg/apiauth"
)

// metrics are the daemon's Prometheus collectors, on its own registry.
type metrics struct {
	reg              *prometheus.Registry
	rpcs             *prometheus.CounterVec
	rpcSeconds       *prometheus.HistogramVec
	applies          *prometheus.CounterVec
	eventsSent       prometheus.Counter
	eventSubscribers prometheus.Gauge
	storeIndex       prometheus.Gauge
	// gateRefused counts the calls the gate turned away before reading
	// their bodies, by code; unauthWaiting is how many requests wait
	// unauthenticated (gate.go).
	gateRefused   *prometheus.CounterVec
	unauthWaiting prometheus.Gauge
	// commitSeconds times a write from its proposal on the primary to its
	// commit and apply; eventDrops counts subscribers cut off for falling
	// behind.
	commitSeconds prometheus.Histogram
	eventDrops    prometheus.Counter
	// eventResyncs counts subscribers that asked to resume after an index
	// whose events were no longer held (decision 0066).
	eventResyncs prometheus.Counter
}

func newMetrics() *metrics {
	reg := prometheus.NewRegistry()
	m := &metrics{
		reg: reg,
		rpcs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "norsk_manager_rpcs_total", Help: "API calls handled, by method and status code.",
		}, []string{"method", "code"}),
		rpcSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "norsk_manager_rpc_duration_seconds", Help: "API call latency (unary calls), by method.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}, []string{"method"}),
		applies: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "norsk_manager_store_commands_total", Help: "Store commands applied, by command and result.",
		}, []string{"command", "result"}),
		eventsSent: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "norsk_manager_events_sent_total", Help: "Events sent to event-stream subscribers.",
		}),
		eventSubscribers: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "norsk_manager_event_subscribers", Help: "Live event-stream subscribers.",
		}),
		storeIndex: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "norsk_manager_store_applied_index", Help: "The store's last applied raft index.",
		}),
		gateRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "norsk_manager_api_refused_unread_total", Help: "API requests refused from their headers, before their bodies were read (unauthenticated, not permitted, over a rate or a bound), by code.",
		}, []string{"code"}),
		unauthWaiting: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "norsk_manager_api_unauthenticated_waiting", Help: "Requests waiting unauthenticated (a credential being checked after catching up, a public health or reflection call).",
		}),
	}
	m.commitSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "norsk_manager_raft_commit_seconds", Help: "Time from a write's proposal on the primary to its commit and apply (the store's write latency).",
		Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
	})
	m.eventDrops = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "norsk_manager_event_subscribers_dropped_total", Help: "Event-stream subscribers cut off for falling too far behind (they reconnect with afterIndex and miss nothing).",
	})
	m.eventResyncs = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "norsk_manager_event_resyncs_total", Help: "Event-stream subscribers that asked to resume after an index whose events were no longer held, and were sent a snapshot instead (see eventRetention).",
	})
	for _, c := range []connect.Code{connect.CodeUnauthenticated, connect.CodePermissionDenied, connect.CodeResourceExhausted, connect.CodeInvalidArgument} {
		m.gateRefused.WithLabelValues(c.String())
	}
	reg.MustRegister(m.rpcs, m.rpcSeconds, m.applies, m.eventsSent, m.eventSubscribers, m.storeIndex, m.gateRefused, m.unauthWaiting,
		m.commitSeconds, m.eventDrops, m.eventResyncs,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// onApply counts applied commands.
func (m *metrics) onApply(cmd *storev1.Command, res state.Result) {
	name := "unknown"
	if c := cmd.GetCmd(); c != nil {
		name = strings.TrimPrefix(strings.TrimPrefix(typeName(c), "*storev1.Command_"), "Command_")
	}
	result := "ok"
	if res.Err != nil {
		result = "refused"
	}
	m.applies.WithLabelValues(name, result).Inc()
	m.storeIndex.Set(float64(res.Index))
}

func typeName(v any) string {
	return strings.TrimPrefix(strings.TrimPrefix(fmtType(v), "*"), "storev1.")
}

// interceptor counts and times API calls.
func (m *metrics) interceptor() connect.UnaryInterceptorFunc {
	return func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			start := time.Now()
			resp, err := next(ctx, req)
			method := apiauth.MethodName(req.Spec().Procedure)
			code := "ok"
			if err != nil {
				var ce *connect.Error
				if errors.As(err, &ce) {
					code = ce.Code().String()
				} else {
					code = connect.CodeUnknown.String()
				}
			}
			m.rpcs.WithLabelValues(method, code).Inc()
			m.rpcSeconds.WithLabelValues(method).Observe(time.Since(start).Seconds())
			return resp, err
		}
	}
}

func fmtType(v any) string { return fmt.Sprintf("%T", v) }
