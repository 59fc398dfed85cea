package webhook

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fastover/fastover/toleration"
)

// RuleSourceOptions say where the rule in force comes from.
type RuleSourceOptions struct {
	// Rule is the rule when File is empty; default toleration.DefaultRule().
	Rule *toleration.Rule
	// File, if set, is the rule: the directory the ConfigMap
	// fastover-rule is mounted as (toleration.ParseRuleData), or a rule
	// file (toleration.ParseRuleConfig). It is read at start (a missing or bad
	// file is an error of NewRuleSource) and again every Interval: a
	// change is applied without a restart; a change that does not parse
	// is logged and counted, and the last good rule stays in force.
	File string
	// Interval between reads of File; default
	// toleration.DefaultRuleFileInterval.
	Interval time.Duration
	// Override, if not nil, is applied to each rule read from File: the
	// rule flags given on the command line win over the file, for this
	// process only.
	Override func(toleration.Rule) toleration.Rule
	// Metrics, if not nil, count the reloads and show the rule in force.
	Metrics *RuleMetrics
	// Logger logs the changes and the errors.
	Logger logr.Logger
}

// RuleSource holds the rule in force, read without a lock (an atomic
// pointer) by each admission request, and replaced as its file changes.
type RuleSource struct {
	current atomic.Pointer[toleration.Rule]
	changed chan struct{}
	watcher *toleration.RuleWatcher
	opts    RuleSourceOptions
}

// NewRuleSource reads the rule: Options.Rule, or File's with Override.
func NewRuleSource(opts RuleSourceOptions) (*RuleSource, error) {
	s := &RuleSource{changed: make(chan struct{}, 1), opts: opts}
	if opts.Logger.GetSink() == nil {
		s.opts.Logger = logr.Discard()
	}
	if opts.File == "" {
		r := toleration.DefaultRule()
		if opts.Rule != nil {
			r = *opts.Rule
		}
		if err := r.Validate(); err != nil {
			return nil, err
		}
		s.store(r, "flags")
		return s, nil
	}
	s.watcher = &toleration.RuleWatcher{
		Path:     opts.File,
		Interval: opts.Interval,
		Changed:  s.reload,
		Failed:   s.failed,
	}
	r, err := s.watcher.Load()
	if err != nil {
		return nil, err
	}
	r, err = s.override(r)
	if err != nil {
		return nil, err
	}
	s.store(r, "file")
	return s, nil
}

// Rule returns the rule in force.
func (s *RuleSource) Rule() toleration.Rule { return *s.current.Load() }

// Changed receives a value after the rule in force changed (it holds one
// pending change at most).
func (s *RuleSource) Changed() <-chan struct{} { return s.changed }

// Watch follows the rule file until ctx ends; without one, it returns.
func (s *RuleSource) Watch(ctx context.Context) {
	if s.watcher != nil {
		s.watcher.Watch(ctx)
	}
}

func (s *RuleSource) override(r toleration.Rule) (toleration.Rule, error) {
	if s.opts.Override != nil {
		r = s.opts.Override(r)
	}
	if err := r.Validate(); err != nil {
		return toleration.Rule{}, fmt.Errorf("rule file %s with the rule flags: %w", s.opts.File, err)
	}
	return r, nil
}

func (s *RuleSource) reload(r toleration.Rule) {
	r, err := s.override(r)
	if err != nil {
		s.failed(err)
		return
	}
	if old := s.Rule(); sameRule(old, r) {
		s.opts.Logger.Info("rule file changed; the rule in force is the same", "file", s.opts.File)
		return
	}
	s.store(r, "file")
	s.opts.Metrics.reloaded()
	s.opts.Logger.Info("rule changed", append([]any{"file", s.opts.File}, ruleKeys(r)...)...)
	select {
	case s.changed <- struct{}{}:
	default:
	}
}

func (s *RuleSource) failed(err error) {
	s.opts.Metrics.reloadFailed()
	s.opts.Logger.Error(err, "rule file not applied; the last good rule stays in force", ruleKeys(s.Rule())...)
}

func (s *RuleSource) store(r toleration.Rule, from string) {
	s.current.Store(&r)
	s.opts.Metrics.inForce(r, from)
}

func sameRule(a, b toleration.Rule) bool {
	return a.TolerationSeconds == b.TolerationSeconds && a.DefaultTolerationSeconds == b.DefaultTolerationSeconds &&
		(a.NotReadyTolerationSeconds == nil) == (b.NotReadyTolerationSeconds == nil) &&
		(a.NotReadyTolerationSeconds == nil || *a.NotReadyTolerationSeconds == *b.NotReadyTolerationSeconds)
}

// ruleKeys are the rule's fields as log keys and values.
func ruleKeys(r toleration.Rule) []any {
	kv := []any{"tolerationSeconds", r.TolerationSeconds, "defaultTolerationSeconds", r.DefaultTolerationSeconds}
	if r.NotReadyTolerationSeconds != nil {
		kv = append(kv, "notReadyTolerationSeconds", *r.NotReadyTolerationSeconds)
	}
	return kv
}

// RuleMetrics show the rule in force and count its reloads. A nil
// *RuleMetrics counts nothing.
type RuleMetrics struct {
	reloads prometheus.Counter
	errors  prometheus.Counter
	info    *prometheus.GaugeVec
}

// NewRuleMetrics makes the rule's metrics and registers them with reg.
func NewRuleMetrics(reg prometheus.Registerer) (*RuleMetrics, error) {
	m := &RuleMetrics{
		reloads: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fastover_webhook_rule_reloads_total",
			Help: "Changes of the rule file (--rule-file) applied without a restart.",
		}),
		errors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fastover_webhook_rule_reload_errors_total",
			Help: "Changes of the rule file that were not applied (it did not parse or could not be read); the last good rule stays in force.",
		}),
		info: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "fastover_webhook_rule_info",
			Help: `The rule in force (value 1): its seconds, not_ready_toleration_seconds "" when not-ready is left alone, and where it comes from (file: --rule-file, with any rule flag given on top; flags: the flags alone).`,
		}, []string{"toleration_seconds", "not_ready_toleration_seconds", "default_toleration_seconds", "source"}),
	}
	for _, c := range []prometheus.Collector{m.reloads, m.errors, m.info} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *RuleMetrics) reloaded() {
	if m != nil {
		m.reloads.Inc()
	}
}

func (m *RuleMetrics) reloadFailed() {
	if m != nil {
		m.errors.Inc()
	}
}

func (m *RuleMetrics) inForce(r toleration.Rule, from string) {
	if m == nil {
		return
	}
	notReady := ""
	if r.NotReadyTolerationSeconds != nil {
		notReady = strconv.FormatInt(*r.NotReadyTolerationSeconds, 10)
	}
	m.info.Reset()
	m.info.WithLabelValues(strconv.FormatInt(r.TolerationSeconds, 10), notReady,
		strconv.FormatInt(r.DefaultTolerationSeconds, 10), from).Set(1)
}
