package charts_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/fastover/fastover/internal/cluster"
	"github.com/fastover/fastover/tests/charts"
)

// ruleFiles are the rule files the promtool tests of testdata/alerts
// read, each the fastover chart's PrometheusRule rendered with its values.
var ruleFiles = map[string][]string{
	"rules.yaml":      {"monitoring.prometheusRule.enabled=true", "reconciler.enabled=true"},
	"rules-fail.yaml": {"monitoring.prometheusRule.enabled=true", "reconciler.enabled=true", "webhook.failurePolicy=Fail"},
}

// promtool returns the path of the pinned promtool (make tools).
func promtool(t *testing.T) string {
	t.Helper()
	dir, err := cluster.BinDir()
	require.NoError(t, err)
	path := filepath.Join(dir, "promtool")
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("%s: %v (tests/tools/build.sh prometheus builds it)", path, err)
	}
	return path
}

// ruleSpec renders the chart and returns its PrometheusRule's spec (a
// Prometheus rule file: groups), as YAML.
func ruleSpec(t *testing.T, sets ...string) []byte {
	t.Helper()
	objs := render(t, charts.Webhook, "fastover-system", sets...)
	rule := charts.Find(objs, "PrometheusRule", "fastover")
	require.NotNil(t, rule, "no PrometheusRule rendered with %v", sets)
	spec, ok, err := unstructured.NestedMap(rule.Object, "spec")
	require.NoError(t, err)
	require.True(t, ok)
	out, err := yaml.Marshal(spec)
	require.NoError(t, err)
	return out
}

// promtoolTest is the part of a promtool test file that says which
// alerts a test fires and which it holds back.
type promtoolTest struct {
	Tests []struct {
		Name  string `json:"name"`
		Cases []struct {
			Alert string `json:"alertname"`
			Exp   []any  `json:"exp_alerts"`
		} `json:"alert_rule_test"`
	} `json:"tests"`
}

// alertRule is an alerting rule of a rendered rule file.
type alertRule struct {
	Alert       string            `json:"alert"`
	Expr        string            `json:"expr"`
	Annotations map[string]string `json:"annotations"`
}

// renderRuleFiles renders the chart once for each of ruleFiles: each
// file's YAML, and its alerting rules.
func renderRuleFiles(t *testing.T) (map[string][]byte, map[string][]alertRule) {
	t.Helper()
	specs, rules := map[string][]byte{}, map[string][]alertRule{}
	for name, sets := range ruleFiles {
		specs[name] = ruleSpec(t, sets...)
		var spec struct {
			Groups []struct {
				Rules []alertRule `json:"rules"`
			} `json:"groups"`
		}
		require.NoError(t, yaml.Unmarshal(specs[name], &spec), name)
		for _, g := range spec.Groups {
			rules[name] = append(rules[name], g.Rules...)
		}
	}
	return specs, rules
}

// TestAlertRules checks the chart's alerting rules with the tools
// operators run: `promtool check rules` on the rendered PrometheusRule,
// and `promtool test rules` on testdata/alerts, where every alert is fired
// by one test and held back by another (a planned handover pages nobody).
// Every alert has a runbook section in docs/operations.md, the one its
// runbook_url names.
func TestAlertRules(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tool := promtool(t)
	dir := t.TempDir()
	specs, rules := renderRuleFiles(t)
	for name, spec := range specs {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), spec, 0o600))
		out, err := exec.CommandContext(ctx, tool, "check", "rules", filepath.Join(dir, name)).CombinedOutput()
		require.NoError(t, err, "promtool check rules %s:\n%s", name, out)
	}
	tests, err := filepath.Glob(filepath.Join("testdata", "alerts", "*.test.yaml"))
	require.NoError(t, err)
	require.NotEmpty(t, tests)
	fired, held := map[string][]string{}, map[string][]string{}
	var args []string
	for _, src := range tests {
		data, err := os.ReadFile(src)
		require.NoError(t, err)
		var pt promtoolTest
		require.NoError(t, yaml.Unmarshal(data, &pt), src)
		for _, tc := range pt.Tests {
			for _, c := range tc.Cases {
				if len(c.Exp) > 0 {
					fired[c.Alert] = append(fired[c.Alert], tc.Name)
				} else {
					held[c.Alert] = append(held[c.Alert], tc.Name)
				}
			}
		}
		dst := filepath.Join(dir, filepath.Base(src))
		require.NoError(t, os.WriteFile(dst, data, 0o600))
		args = append(args, dst)
	}
	cmd := exec.CommandContext(ctx, tool, append([]string{"test", "rules"}, args...)...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "promtool test rules:\n%s", out)

	docs, err := os.ReadFile(filepath.Join(repoRoot(t), "docs", "operations.md"))
	require.NoError(t, err)
	alerts := renderedAlerts(rules)
	require.NotEmpty(t, alerts)
	for _, a := range alerts {
		assert.NotEmpty(t, fired[a.name], "%s: no promtool test fires it", a.name)
		assert.NotEmpty(t, held[a.name], "%s: no promtool test holds it back", a.name)
		anchor := strings.ToLower(a.name)
		assert.True(t, strings.HasSuffix(a.runbook, "docs/operations.md#"+anchor), "%s: runbook_url %s", a.name, a.runbook)
		assert.Regexp(t, regexp.MustCompile(`(?m)^#+ `+regexp.QuoteMeta(a.name)+`$`), string(docs), "%s: no runbook section in docs/operations.md", a.name)
	}
	for name := range fired {
		assert.Contains(t, names(alerts), name, "testdata/alerts tests an alert the chart does not render")
	}
}

type renderedAlert struct{ name, runbook string }

// renderedAlerts are the alerts of every rule file, once each, by name.
func renderedAlerts(rules map[string][]alertRule) []renderedAlert {
	seen := map[string]renderedAlert{}
	for _, rs := range rules {
		for _, r := range rs {
			seen[r.Alert] = renderedAlert{name: r.Alert, runbook: r.Annotations["runbook_url"]}
		}
	}
	out := make([]renderedAlert, 0, len(seen))
	for _, a := range seen {
		out = append(out, a)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

func names(as []renderedAlert) []string {
	out := make([]string, len(as))
	for i, a := range as {
		out[i] = a.name
	}
	return out
}

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := cluster.ModuleRoot()
	require.NoError(t, err)
	return root
}
