package retrofit

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics count what the reconciler does. A nil *Metrics counts nothing.
type Metrics struct {
	fixed  prometheus.Counter
	errors prometheus.Counter
	queued prometheus.Gauge
	age    prometheus.Histogram
}

// NewMetrics makes the reconciler's metrics and registers them with reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		fixed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fastover_retrofit_pods_fixed_total",
			Help: "Pods whose tolerations the reconciler fixed in place.",
		}),
		errors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fastover_retrofit_errors_total",
			Help: "Failed attempts to fix a pod (each is retried with backoff).",
		}),
		queued: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "fastover_retrofit_queue_length",
			Help: "Pods waiting to be fixed.",
		}),
		age: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "fastover_retrofit_pod_age_seconds",
			Help:    "Age of a pod when the reconciler fixed it: how long it was on the slow path at most.",
			Buckets: prometheus.ExponentialBuckets(0.5, 2, 16),
		}),
	}
	for _, c := range []prometheus.Collector{m.fixed, m.errors, m.queued, m.age} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *Metrics) countFixed(age time.Duration) {
	if m == nil {
		return
	}
	m.fixed.Inc()
	m.age.Observe(age.Seconds())
}

func (m *Metrics) countError() {
	if m != nil {
		m.errors.Inc()
	}
}

func (m *Metrics) setQueued(n int) {
	if m != nil {
		m.queued.Set(float64(n))
	}
}
