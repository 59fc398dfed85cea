package charts_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fastover/fastover/certs"
	"github.com/fastover/fastover/internal/cluster"
	"github.com/fastover/fastover/leader"
	"github.com/fastover/fastover/retrofit"
	"github.com/fastover/fastover/tests/charts"
	"github.com/fastover/fastover/webhook"
)

// targetLabels are the labels Prometheus (and the Prometheus Operator's
// PodMonitor) puts on every series of a target.
var targetLabels = []string{"job", "instance", "namespace", "pod", "container", "endpoint", "service"}

// othersMetrics are the metrics of others that the dashboard and the
// alerts read, with their labels: the API server's admission metrics
// (k8s.io/apiserver's admission/metrics), controller-runtime's webhook
// metrics (pkg/webhook/internal/metrics) and Prometheus' own up.
var othersMetrics = map[string][]string{
	"up": nil,
	"apiserver_admission_webhook_fail_open_count":       {"name", "type"},
	"apiserver_admission_webhook_rejection_count":       {"name", "type", "operation", "error_type", "rejection_code"},
	"controller_runtime_webhook_requests_total":         {"webhook", "code"},
	"controller_runtime_webhook_latency_seconds_bucket": {"webhook", "le"},
}

// exportedMetrics are the metrics fastover's code exports, each with its
// labels, read from the registries the webhook, the leader library and the
// reconciler register with (the webhook served once, so that every one of
// its series exists).
func exportedMetrics(t *testing.T) map[string][]string {
	t.Helper()
	ca, err := certs.NewCA("dashboard-test", time.Hour)
	require.NoError(t, err)
	kp, err := ca.Issue([]string{"127.0.0.1"}, time.Hour)
	require.NoError(t, err)
	dir := t.TempDir()
	require.NoError(t, certs.WriteDir(dir, kp, ca))

	hook := prometheus.NewRegistry()
	srv, err := webhook.NewServer(webhook.Options{
		Host: "127.0.0.1", Port: freeTCPPort(t), CertDir: dir,
		MetricsBindAddress: "0", HealthProbeBindAddress: "0", ShutdownDelay: -1, Registry: hook,
	})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- srv.Start(ctx) }()
	defer func() {
		cancel()
		assert.NoError(t, <-stopped)
	}()
	require.Eventually(t, func() bool {
		return slices.ContainsFunc(gather(t, hook), func(f *dto.MetricFamily) bool {
			return f.GetName() == "fastover_webhook_certificate_expiry_timestamp_seconds"
		})
	}, 10*time.Second, 10*time.Millisecond, "the webhook did not start serving")

	lib, rec := prometheus.NewRegistry(), prometheus.NewRegistry()
	_, err = leader.NewMetrics(lib)
	require.NoError(t, err)
	_, err = retrofit.NewMetrics(rec)
	require.NoError(t, err)

	out := map[string][]string{}
	for _, reg := range []*prometheus.Registry{hook, lib, rec} {
		for _, f := range gather(t, reg) {
			var labels []string
			for _, m := range f.GetMetric() {
				for _, l := range m.GetLabel() {
					if !slices.Contains(labels, l.GetName()) {
						labels = append(labels, l.GetName())
					}
				}
			}
			name := f.GetName()
			switch f.GetType() {
			case dto.MetricType_HISTOGRAM:
				out[name+"_bucket"] = append(slices.Clone(labels), "le")
				out[name+"_sum"], out[name+"_count"] = labels, labels
			case dto.MetricType_SUMMARY:
				out[name] = append(slices.Clone(labels), "quantile")
				out[name+"_sum"], out[name+"_count"] = labels, labels
			default:
				out[name] = labels
			}
		}
	}
	return out
}

func gather(t *testing.T, reg *prometheus.Registry) []*dto.MetricFamily {
	t.Helper()
	fs, err := reg.Gather()
	require.NoError(t, err)
	return fs
}

func freeTCPPort(t *testing.T) int {
	t.Helper()
	ports, err := cluster.FreePorts(1)
	require.NoError(t, err)
	return ports[0]
}

// dashboard is what the test reads of the Grafana dashboard.
type dashboard struct {
	Title  string  `json:"title"`
	UID    string  `json:"uid"`
	Panels []panel `json:"panels"`
	Vars   struct {
		List []struct {
			Name       string `json:"name"`
			Type       string `json:"type"`
			Definition string `json:"definition"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	Title   string  `json:"title"`
	Type    string  `json:"type"`
	Panels  []panel `json:"panels"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
}

// grafanaVar is a variable in a query: Grafana's interval variables become
// durations, the dashboard's own a regular expression.
var grafanaVar = regexp.MustCompile(`\$\{?(\w+)\}?`)

func expandGrafana(q string) string {
	return grafanaVar.ReplaceAllStringFunc(q, func(v string) string {
		switch strings.Trim(v, "${}") {
		case "__rate_interval", "__interval", "__range":
			return "5m"
		default:
			return ".*"
		}
	})
}

// queryNames returns the metric names a query reads and the label names it
// uses (in selectors, groupings and vector matching).
func queryNames(q string) (metrics, labels []string, err error) {
	expr, err := parser.NewParser(parser.Options{}).ParseExpr(expandGrafana(q))
	if err != nil {
		return nil, nil, fmt.Errorf("query does not parse: %s: %w", q, err)
	}
	parser.Inspect(expr, func(n parser.Node, _ []parser.Node) error {
		switch n := n.(type) {
		case *parser.VectorSelector:
			if n.Name != "" {
				metrics = append(metrics, n.Name)
			}
			for _, m := range n.LabelMatchers {
				if m.Name != "__name__" {
					labels = append(labels, m.Name)
				}
			}
		case *parser.AggregateExpr:
			labels = append(labels, n.Grouping...)
		case *parser.BinaryExpr:
			if n.VectorMatching != nil {
				labels = append(labels, n.VectorMatching.MatchingLabels...)
				labels = append(labels, n.VectorMatching.Include...)
			}
		}
		return nil
	})
	return metrics, labels, nil
}

// reporter is what checkNames reports to: a *testing.T, or a recorder.
type reporter interface {
	Helper()
	Errorf(format string, args ...any)
}

// checkNames fails for each metric the query reads that neither
// fastover's code nor the short list of others' exports, and for each
// label that none of the query's metrics has.
func checkNames(t reporter, where, q string, exported map[string][]string) {
	t.Helper()
	metrics, labels, err := queryNames(q)
	if err != nil {
		t.Errorf("%s: %v", where, err)
		return
	}
	assert.NotEmpty(t, metrics, "%s: %s reads no metric", where, q)
	known := slices.Clone(targetLabels)
	for _, m := range metrics {
		ls, ok := exported[m]
		if !ok {
			ls, ok = othersMetrics[m]
		}
		if !assert.True(t, ok, "%s: metric %s is not exported (query %s)", where, m, q) {
			continue
		}
		known = append(known, ls...)
	}
	for _, l := range labels {
		assert.Contains(t, known, l, "%s: label %s is on none of %v (query %s)", where, l, metrics, q)
	}
}

// TestDashboardQueries parses every query of the Grafana dashboard and
// every expression of the alerting rules with Prometheus' PromQL parser,
// and checks that they name only metrics and labels that fastover's code
// exports (or the few of others' they mean to read): a renamed metric
// breaks this test, not the dashboard or an alert.
func TestDashboardQueries(t *testing.T) {
	exported := exportedMetrics(t)
	require.Contains(t, exported, "fastover_leader_is_leader")
	require.Contains(t, exported, "fastover_webhook_pods_mutated_total")

	dir, err := charts.Dir(charts.Webhook)
	require.NoError(t, err)
	data, err := os.ReadFile(filepath.Join(dir, "files", "dashboard.json"))
	require.NoError(t, err)
	var d dashboard
	require.NoError(t, json.Unmarshal(data, &d))
	assert.Equal(t, "fastover", d.UID)
	var queries int
	var walk func(ps []panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			walk(p.Panels)
			if p.Type == "row" {
				continue
			}
			assert.NotEmpty(t, p.Targets, "panel %q has no query", p.Title)
			for _, tg := range p.Targets {
				checkNames(t, fmt.Sprintf("panel %q", p.Title), tg.Expr, exported)
				queries++
			}
		}
	}
	walk(d.Panels)
	labelValues := regexp.MustCompile(`^label_values\((.+),\s*(\w+)\)$`)
	for _, v := range d.Vars.List {
		if v.Type != "query" {
			continue
		}
		m := labelValues.FindStringSubmatch(v.Definition)
		require.NotNil(t, m, "variable %s: %s is not label_values(selector, label)", v.Name, v.Definition)
		checkNames(t, "variable "+v.Name, fmt.Sprintf("group by (%s) (%s)", m[2], m[1]), exported)
	}
	t.Logf("%d dashboard queries checked", queries)

	var rules int
	_, files := renderRuleFiles(t)
	for _, rs := range files {
		for _, r := range rs {
			checkNames(t, "alert "+r.Alert, r.Expr, exported)
			rules++
		}
	}
	t.Logf("%d alert expressions checked", rules)
}

// A query that names a metric nobody exports, or a label its metric does
// not have, fails the check: the test can fail.
func TestDashboardQueriesCatchRenames(t *testing.T) {
	exported := map[string][]string{"fastover_leader_is_leader": nil}
	for _, q := range []string{
		`max(fastover_leader_is_leader_renamed)`,
		`max by (lease) (fastover_leader_is_leader)`,
		`fastover_leader_is_leader{holder="x"}`,
		`max(fastover_leader_is_leader`,
	} {
		var r recorder
		checkNames(&r, "probe", q, exported)
		assert.NotEmpty(t, r.errors, "%s passed the check", q)
	}
	metrics, labels, err := queryNames(`sum by (namespace, job) (rate(x{a="1"}[5m])) and on (pod) y`)
	require.NoError(t, err)
	assert.ElementsMatch(t, []string{"x", "y"}, metrics)
	assert.ElementsMatch(t, []string{"namespace", "job", "a", "pod"}, labels)
}

// recorder records what a check reports.
type recorder struct{ errors []string }

func (r *recorder) Helper() {}

func (r *recorder) Errorf(format string, args ...any) {
	r.errors = append(r.errors, fmt.Sprintf(format, args...))
}
