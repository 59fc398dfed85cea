package webhook

import "github.com/prometheus/client_golang/prometheus"

// Metrics count the webhook's decisions. A nil *Metrics counts nothing.
type Metrics struct {
	mutated   prometheus.Counter
	unchanged prometheus.Counter
	skipped   *prometheus.CounterVec
	denied    prometheus.Counter
	invalid   prometheus.Counter
}

// NewMetrics makes the counters and registers them with reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		mutated: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fastover_webhook_pods_mutated_total",
			Help: "Pods whose tolerations the webhook changed.",
		}),
		unchanged: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fastover_webhook_pods_unchanged_total",
			Help: "Pods whose effective tolerations already were as wanted or chosen by the user (only the mark may be added).",
		}),
		skipped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fastover_webhook_pods_skipped_total",
			Help: "Pods left alone, by reason: daemonset, mirror, opt-out.",
		}, []string{"reason"}),
		denied: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fastover_webhook_pods_denied_total",
			Help: "Pods refused for an invalid fastover.io/toleration-seconds annotation.",
		}),
		invalid: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fastover_webhook_requests_invalid_total",
			Help: "Admission requests that could not be handled: not a pod, no object, undecodable.",
		}),
	}
	for _, r := range []SkipReason{SkipDaemonSet, SkipMirror, SkipOptOut} {
		m.skipped.WithLabelValues(string(r)) // export every reason from the start
	}
	for _, c := range []prometheus.Collector{m.mutated, m.unchanged, m.skipped, m.denied, m.invalid} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *Metrics) count(d Decision) {
	if m == nil {
		return
	}
	switch {
	case d.Skip != SkipNone:
		m.skipped.WithLabelValues(string(d.Skip)).Inc()
	case d.Deny != "":
		m.denied.Inc()
	case d.Changed():
		m.mutated.Inc()
	default:
		m.unchanged.Inc()
	}
}

func (m *Metrics) countInvalid() {
	if m != nil {
		m.invalid.Inc()
	}
}
