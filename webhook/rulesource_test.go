package webhook

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/utils/ptr"

	"github.com/fastover/fastover/internal/install"
	"github.com/fastover/fastover/toleration"
)

const ruleHeader = "apiVersion: fastover.io/v1alpha1\nkind: Rule\n"

// writeRule writes a rule file, rule.yaml, into dir as the kubelet
// writes a volume, and returns the file's path. (The ConfigMap's own
// layout, a file per key, is read the same way: toleration's tests.)
func writeRule(t *testing.T, dir, content string) string {
	t.Helper()
	require.NoError(t, install.WriteKubeletDir(dir, map[string][]byte{"rule.yaml": []byte(content)}))
	return filepath.Join(dir, "rule.yaml")
}

func TestRuleSourceFlags(t *testing.T) {
	s, err := NewRuleSource(RuleSourceOptions{})
	require.NoError(t, err)
	assert.Equal(t, toleration.DefaultRule(), s.Rule())
	s.Watch(context.Background()) // no file: returns at once

	s, err = NewRuleSource(RuleSourceOptions{Rule: &toleration.Rule{TolerationSeconds: 4, DefaultTolerationSeconds: 300}})
	require.NoError(t, err)
	assert.Equal(t, int64(4), s.Rule().TolerationSeconds)

	_, err = NewRuleSource(RuleSourceOptions{Rule: &toleration.Rule{TolerationSeconds: -1}})
	assert.Error(t, err)
}

func TestRuleSourceStartErrors(t *testing.T) {
	dir := t.TempDir()
	_, err := NewRuleSource(RuleSourceOptions{File: filepath.Join(dir, "none.yaml")})
	assert.ErrorContains(t, err, "no such file")
	bad := writeRule(t, filepath.Join(dir, "bad"), ruleHeader+"tolerationSeconds: soon\n")
	_, err = NewRuleSource(RuleSourceOptions{File: bad})
	assert.ErrorContains(t, err, "tolerationSeconds: want a whole number")
	assert.ErrorContains(t, err, bad)
}

// TestRuleSourceReload: a changed file is applied, flags given win over
// it, a bad change keeps the last good rule and is counted, and the
// metrics show the rule in force.
func TestRuleSourceReload(t *testing.T) {
	dir := t.TempDir()
	path := writeRule(t, dir, ruleHeader+"tolerationSeconds: 5\n")
	reg := prometheus.NewRegistry()
	m, err := NewRuleMetrics(reg)
	require.NoError(t, err)
	flags := toleration.Rule{DefaultTolerationSeconds: 120}
	s, err := NewRuleSource(RuleSourceOptions{
		File:     path,
		Interval: 10 * time.Millisecond,
		Metrics:  m,
		// --default-toleration-seconds=120 given on the command line.
		Override: func(r toleration.Rule) toleration.Rule {
			return r.WithFlags(flags, func(name string) bool { return name == "default-toleration-seconds" })
		},
	})
	require.NoError(t, err)
	assert.Equal(t, toleration.Rule{TolerationSeconds: 5, DefaultTolerationSeconds: 120}, s.Rule())
	assertInfo(t, reg, `toleration_seconds="5"`, `not_ready_toleration_seconds=""`, `default_toleration_seconds="120"`, `source="file"`)

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.Watch(ctx)
	}()
	defer func() {
		cancel()
		<-done
	}()

	writeRule(t, dir, ruleHeader+"tolerationSeconds: 6\nnotReadyTolerationSeconds: 30\ndefaultTolerationSeconds: 1\n")
	select {
	case <-s.Changed():
	case <-time.After(10 * time.Second):
		t.Fatal("no change reported")
	}
	assert.Equal(t, toleration.Rule{TolerationSeconds: 6, NotReadyTolerationSeconds: ptr.To[int64](30), DefaultTolerationSeconds: 120}, s.Rule(),
		"the flag given still wins")
	assert.Equal(t, 1.0, counter(t, reg, "fastover_webhook_rule_reloads_total"))
	assertInfo(t, reg, `toleration_seconds="6"`, `not_ready_toleration_seconds="30"`)

	writeRule(t, dir, ruleHeader+"tolerationSeconds: -1\n")
	require.Eventually(t, func() bool { return counter(t, reg, "fastover_webhook_rule_reload_errors_total") == 1 }, 10*time.Second, 5*time.Millisecond)
	assert.Equal(t, int64(6), s.Rule().TolerationSeconds, "the last good rule stays")
	assertInfo(t, reg, `toleration_seconds="6"`)

	// A change that leaves the rule in force as it is: no reload counted.
	writeRule(t, dir, ruleHeader+"# a comment\ntolerationSeconds: 6\nnotReadyTolerationSeconds: 30\n")
	time.Sleep(100 * time.Millisecond)
	assert.Equal(t, 1.0, counter(t, reg, "fastover_webhook_rule_reloads_total"))
	assert.Equal(t, 1.0, counter(t, reg, "fastover_webhook_rule_reload_errors_total"))

	writeRule(t, dir, ruleHeader+"tolerationSeconds: 0\n")
	require.Eventually(t, func() bool { return s.Rule().TolerationSeconds == 0 }, 10*time.Second, 5*time.Millisecond)
	assert.Equal(t, 2.0, counter(t, reg, "fastover_webhook_rule_reloads_total"))
	assertInfo(t, reg, `toleration_seconds="0"`, `not_ready_toleration_seconds=""`)

	_, err = NewRuleMetrics(reg)
	assert.Error(t, err, "registered twice")
}

// assertInfo: the one series of fastover_webhook_rule_info has the labels.
func assertInfo(t *testing.T, reg *prometheus.Registry, labels ...string) {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	var series []string
	for _, f := range families {
		if f.GetName() != "fastover_webhook_rule_info" {
			continue
		}
		for _, m := range f.GetMetric() {
			var ls []string
			for _, l := range m.GetLabel() {
				ls = append(ls, l.GetName()+`="`+l.GetValue()+`"`)
			}
			assert.Equal(t, 1.0, m.GetGauge().GetValue())
			series = append(series, strings.Join(ls, ","))
		}
	}
	require.Len(t, series, 1)
	for _, l := range labels {
		assert.Contains(t, series[0], l)
	}
}

// counter is the value of the counter name in reg.
func counter(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() == name {
			return f.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}
