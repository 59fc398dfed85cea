package main

import (
	"context"
	"io"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"

	"github.com/fastover/fastover/internal/install"
	"github.com/fastover/fastover/retrofit"
	"github.com/fastover/fastover/toleration"
	"github.com/fastover/fastover/webhook"
)

func TestParseFlagsRuleFile(t *testing.T) {
	c, err := parseFlags([]string{"--rule-file=/r/rule.yaml", "--not-ready-toleration-seconds=9"}, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, "/r/rule.yaml", c.opts.RuleFile)
	file := toleration.Rule{TolerationSeconds: 5, DefaultTolerationSeconds: 120}
	assert.Equal(t, toleration.Rule{TolerationSeconds: 5, NotReadyTolerationSeconds: ptr.To[int64](9), DefaultTolerationSeconds: 120},
		c.opts.RuleOverride(file), "the flag given wins over the file, the others do not")

	c, err = parseFlags(nil, io.Discard)
	require.NoError(t, err)
	assert.Empty(t, c.opts.RuleFile, "no file by default: the flags alone")
	assert.Equal(t, file, c.opts.RuleOverride(file), "no rule flag given: the file's rule")
}

// TestRunBadRuleFile: a rule file that does not parse at start is a fatal error that names the file and the field.
func TestRunBadRuleFile(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, install.WriteKubeletDir(dir, map[string][]byte{"rule.yaml": []byte(ruleHeader + "tolerationSecond: 3\n")}))
	err := run([]string{"--rule-file=" + filepath.Join(dir, "rule.yaml"), "--cert-dir=" + dir,
		"--metrics-bind-address=0", "--health-probe-bind-address=0"}, io.Discard)
	require.Error(t, err)
	assert.Contains(t, err.Error(), filepath.Join(dir, "rule.yaml"))
	assert.Contains(t, err.Error(), `unknown field "tolerationSecond"`)
	// (A missing file: TestRuleSourceStartErrors. run registers its
	// metrics in controller-runtime's registry, once a process.)
}

const ruleHeader = "apiVersion: fastover.io/v1alpha1\nkind: Rule\n"

// TestReconcileFollowsTheRule: the reconciler fixes pods with the rule in
// force, and, when the rule file changes, starts again with the new rule.
func TestReconcileFollowsTheRule(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, install.WriteKubeletDir(dir, map[string][]byte{"rule.yaml": []byte(ruleHeader + "tolerationSeconds: 3\n")}))
	rules, err := webhook.NewRuleSource(webhook.RuleSourceOptions{File: filepath.Join(dir, "rule.yaml"), Interval: 10 * time.Millisecond})
	require.NoError(t, err)

	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop", Labels: map[string]string{toleration.NamespaceLabel: toleration.NamespaceLabelValue}}}
	pod := func(name string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name, ResourceVersion: "1"},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}}}
	}
	client := fake.NewClientset(ns, pod("before"))
	r := &reconcileRunner{
		rec: &retrofit.Reconciler{Client: client, Auditor: retrofit.Auditor{Rule: rules.Rule()}, QPS: 1000,
			EventRecorder: record.NewFakeRecorder(100), Logger: testr.New(t)},
		rules: rules,
		log:   logr.Discard(),
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.reconcile(ctx) }()
	go rules.Watch(ctx)

	mark := func(name string) string {
		p, err := client.CoreV1().Pods("shop").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return ""
		}
		return p.Annotations[toleration.AnnotationInjected]
	}
	require.Eventually(t, func() bool { return mark("before") == "unreachable=3s" }, 10*time.Second, 10*time.Millisecond)

	require.NoError(t, install.WriteKubeletDir(dir, map[string][]byte{"rule.yaml": []byte(ruleHeader + "tolerationSeconds: 4\n")}))
	require.Eventually(t, func() bool { return rules.Rule().TolerationSeconds == 4 }, 10*time.Second, 10*time.Millisecond)
	_, err = client.CoreV1().Pods("shop").Create(ctx, pod("after"), metav1.CreateOptions{})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return mark("after") == "unreachable=4s" }, 10*time.Second, 10*time.Millisecond)
	// The pod fixed under the old rule follows the new one too (its mark
	// says fastover set it).
	require.Eventually(t, func() bool { return mark("before") == "unreachable=4s" }, 10*time.Second, 10*time.Millisecond)

	cancel()
	select {
	case err := <-done:
		assert.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("reconcile did not return when its context ended")
	}
}
