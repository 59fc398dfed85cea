package leader

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the elector's Prometheus metrics. A nil *Metrics records
// nothing.
type Metrics struct {
	isLeader      prometheus.Gauge
	ready         prometheus.Gauge
	transitions   prometheus.Counter
	renewErrors   prometheus.Counter
	publish       prometheus.Histogram
	publishErrors prometheus.Counter
	crashes       prometheus.Counter
	leaderless    *prometheus.HistogramVec
}

// NewMetrics makes the metrics and registers them with reg:
// fastover_leader_is_leader, fastover_leader_ready (1 once the elector
// runs with its caches synced and Config.Prepare returned: a warm standby,
// or the leader; the same as Ready), fastover_leader_transitions_total
// (times this replica became the leader),
// fastover_leader_renew_errors_total (renewals that failed and were
// retried within the renew deadline),
// fastover_leader_endpoint_publish_seconds (from acquiring the Lease to
// the endpoint published) and
// fastover_leader_endpoint_publish_errors_total, and
// fastover_leader_crash_takeovers_total (terms begun on the Lease of a
// leader whose process had ended, before it expired), and
// fastover_leader_leaderless_seconds{began} (for each term this replica
// began: from the previous holder's last renewal, or its release, to the
// acquisition, by how the term began: handover, crash-takeover, expiry,
// or first, observed as 0). The alerting rules and the dashboard of the
// fastover chart (docs/operations.md) read them.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		isLeader: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "fastover_leader_is_leader",
			Help: "1 while this replica is the leader, else 0.",
		}),
		ready: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "fastover_leader_ready",
			Help: "1 once the elector runs, its caches are synced and Config.Prepare has returned (a warm standby, or the leader), else 0.",
		}),
		transitions: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fastover_leader_transitions_total",
			Help: "Times this replica became the leader.",
		}),
		renewErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fastover_leader_renew_errors_total",
			Help: "Renewals of the Lease that failed and were retried (the leader steps down when none succeeds within the renew deadline).",
		}),
		publish: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "fastover_leader_endpoint_publish_seconds",
			Help:    "Time from acquiring the Lease to the leader's endpoint being published.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}),
		publishErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fastover_leader_endpoint_publish_errors_total",
			Help: "Failed attempts to publish the leader's endpoint.",
		}),
		crashes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fastover_leader_crash_takeovers_total",
			Help: "Times this replica took the Lease from a leader whose process the kubelet reported ended, before the Lease expired.",
		}),
	}
	m.leaderless = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "fastover_leader_leaderless_seconds",
		Help:    "For each term this replica began: the time from the previous holder's last renewal (or its release) to the acquisition, by how the term began (handover, crash-takeover, expiry; first: no previous holder, observed as 0).",
		Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 15, 20, 30, 45, 60, 120},
	}, []string{"began"})
	for _, b := range []string{beganHandover, beganCrashTakeover, beganExpiry, beganFirst} {
		m.leaderless.WithLabelValues(b)
	}
	for _, c := range []prometheus.Collector{m.isLeader, m.ready, m.transitions, m.renewErrors, m.publish, m.publishErrors, m.crashes, m.leaderless} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *Metrics) setLeader(leading bool) {
	if m == nil {
		return
	}
	if leading {
		m.isLeader.Set(1)
		m.transitions.Inc()
	} else {
		m.isLeader.Set(0)
	}
}

func (m *Metrics) setReady(ready bool) {
	if m == nil {
		return
	}
	if ready {
		m.ready.Set(1)
	} else {
		m.ready.Set(0)
	}
}

func (m *Metrics) renewError() {
	if m != nil {
		m.renewErrors.Inc()
	}
}

func (m *Metrics) termBegan(b termBeginning) {
	if m != nil {
		m.leaderless.WithLabelValues(b.kind()).Observe(b.leaderless.Seconds())
	}
}

func (m *Metrics) observePublish(d time.Duration) {
	if m != nil {
		m.publish.Observe(d.Seconds())
	}
}

func (m *Metrics) publishError() {
	if m != nil {
		m.publishErrors.Inc()
	}
}

func (m *Metrics) crashTakeover() {
	if m != nil {
		m.crashes.Inc()
	}
}
