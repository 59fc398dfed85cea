package webhook

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fastover/fastover/toleration"
)

// Reasons of fastover_webhook_requests_invalid_total: what the webhook did
// not understand and allowed unchanged (except ReasonNoRequest, a review
// without a request, which no API server sends: it gets an error).
const (
	ReasonNoRequest   = "no-request"
	ReasonNotAPod     = "not-a-pod"
	ReasonNoObject    = "no-object"
	ReasonUndecodable = "undecodable"
	ReasonTooLarge    = "too-large"
)

// Reasons of fastover_webhook_requests_ignored_total: requests outside
// what the webhook acts on (its rule matches pod CREATEs only), allowed
// unchanged.
const (
	IgnoredSubResource = "subresource"
	IgnoredOperation   = "operation"
)

// Reasons of fastover_webhook_requests_refused_total: requests refused
// with an HTTP error before their body was read; the API server then
// applies the webhook's failurePolicy.
const (
	RefusedBodyTooLarge = "body-too-large"
	RefusedNoLength     = "no-content-length"
	RefusedBusy         = "too-many-in-flight"
)

// Metrics count the webhook's decisions. A nil *Metrics counts nothing.
type Metrics struct {
	mutated   prometheus.Counter
	unchanged prometheus.Counter
	skipped   *prometheus.CounterVec
	denied    prometheus.Counter
	invalid   *prometheus.CounterVec
	ignored   *prometheus.CounterVec
	refused   *prometheus.CounterVec
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
		invalid: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fastover_webhook_requests_invalid_total",
			Help: "Admission requests the webhook did not understand, by reason: allowed unchanged with a warning (not-a-pod, no-object, undecodable, too-large), or answered with an error (no-request).",
		}, []string{"reason"}),
		ignored: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fastover_webhook_requests_ignored_total",
			Help: "Admission requests allowed unchanged because the webhook acts on pod CREATEs only, by reason: subresource, operation.",
		}, []string{"reason"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fastover_webhook_requests_refused_total",
			Help: "HTTP requests refused unread, by reason: body-too-large, no-content-length, too-many-in-flight.",
		}, []string{"reason"}),
	}
	// Export every series from the start.
	for _, r := range []toleration.SkipReason{toleration.SkipDaemonSet, toleration.SkipMirror, toleration.SkipOptOut} {
		m.skipped.WithLabelValues(string(r))
	}
	for _, r := range []string{ReasonNoRequest, ReasonNotAPod, ReasonNoObject, ReasonUndecodable, ReasonTooLarge} {
		m.invalid.WithLabelValues(r)
	}
	for _, r := range []string{IgnoredSubResource, IgnoredOperation} {
		m.ignored.WithLabelValues(r)
	}
	for _, r := range []string{RefusedBodyTooLarge, RefusedNoLength, RefusedBusy} {
		m.refused.WithLabelValues(r)
	}
	for _, c := range []prometheus.Collector{m.mutated, m.unchanged, m.skipped, m.denied, m.invalid, m.ignored, m.refused} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *Metrics) count(d toleration.Decision) {
	if m == nil {
		return
	}
	switch {
	case d.Skip != toleration.SkipNone:
		m.skipped.WithLabelValues(string(d.Skip)).Inc()
	case d.Deny != "":
		m.denied.Inc()
	case d.Changed():
		m.mutated.Inc()
	default:
		m.unchanged.Inc()
	}
}

func (m *Metrics) countInvalid(reason string) {
	if m != nil {
		m.invalid.WithLabelValues(reason).Inc()
	}
}

func (m *Metrics) countIgnored(reason string) {
	if m != nil {
		m.ignored.WithLabelValues(reason).Inc()
	}
}

func (m *Metrics) countRefused(reason string) {
	if m != nil {
		m.refused.WithLabelValues(reason).Inc()
	}
}
