package retrofit

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/fastover/fastover/toleration"
)

func noExecute(key string, seconds *int64) corev1.Toleration {
	return corev1.Toleration{Key: key, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: seconds}
}

// defaulted is a pod as the API server stores it without fastover: both
// default 300 s tolerations.
func defaulted(name string, created time.Time) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", CreationTimestamp: metav1.NewTime(created)},
		Spec: corev1.PodSpec{Tolerations: []corev1.Toleration{
			noExecute(corev1.TaintNodeNotReady, ptr.To[int64](300)),
			noExecute(corev1.TaintNodeUnreachable, ptr.To[int64](300)),
		}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
}

func TestClassify(t *testing.T) {
	installed := time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC)
	a := Auditor{Rule: toleration.DefaultRule(), InstalledAt: installed}
	before, after := installed.Add(-time.Hour), installed.Add(time.Hour)

	injected := defaulted("injected", after)
	injected.Spec.Tolerations[1].TolerationSeconds = ptr.To[int64](0)
	injected.Annotations = map[string]string{toleration.AnnotationInjected: "unreachable=0s"}
	optOut := defaulted("opt-out", before)
	optOut.Annotations = map[string]string{toleration.AnnotationInject: "false"}
	user := defaulted("user", before)
	user.Spec.Tolerations[1].TolerationSeconds = ptr.To[int64](600)
	forever := defaulted("forever", before)
	forever.Spec.Tolerations = []corev1.Toleration{{Operator: corev1.TolerationOpExists}}
	daemon := defaulted("daemon", before)
	daemon.OwnerReferences = []metav1.OwnerReference{{Kind: "DaemonSet", Name: "d", APIVersion: "apps/v1"}}
	badOverride := defaulted("bad", before)
	badOverride.Annotations = map[string]string{toleration.AnnotationTolerationSeconds: "soon"}
	finished := defaulted("finished", before)
	finished.Status.Phase = corev1.PodSucceeded
	changed := defaulted("changed", after)
	changed.Annotations = map[string]string{toleration.AnnotationInjected: "unreachable=0s"}
	// Injected under a rule of 60 s; the rule is 0 s now.
	ruleChanged := defaulted("rule-changed", after)
	ruleChanged.Spec.Tolerations[1].TolerationSeconds = ptr.To[int64](60)
	ruleChanged.Annotations = map[string]string{toleration.AnnotationInjected: "unreachable=60s"}

	for _, tc := range []struct {
		pod         *corev1.Pod
		enabled     bool
		status      Status
		reason      string
		unreachable string
	}{
		{defaulted("old", before), true, StatusNeedsFix, "created before fastover was installed", "300s (default)"},
		{defaulted("missed", after), true, StatusNeedsFix, "missed by the webhook (down, or namespace labelled later)", "300s (default)"},
		{changed, true, StatusNeedsFix, "tolerations changed since injection", "300s (default)"},
		{ruleChanged, true, StatusNeedsFix, "set by fastover under another rule (unreachable=60s)", "60s"},
		{injected, true, StatusFast, "injected", "0s"},
		{optOut, true, StatusKept, `opted out (fastover.io/inject: "false")`, "300s (default)"},
		{user, true, StatusKept, "user's own unreachable toleration", "600s"},
		{forever, true, StatusKept, "user's own unreachable toleration", "forever"},
		{daemon, true, StatusKept, "DaemonSet pod", "300s (default)"},
		{badOverride, true, StatusKept, "invalid fastover.io/toleration-seconds annotation", "300s (default)"},
		{finished, true, StatusOutOfScope, "finished", "300s (default)"},
		{defaulted("elsewhere", before), false, StatusOutOfScope, "namespace not enabled", "300s (default)"},
	} {
		t.Run(tc.pod.Name, func(t *testing.T) {
			f := a.Classify(tc.pod, tc.enabled)
			assert.Equal(t, tc.status, f.Status)
			assert.Equal(t, tc.reason, f.Reason)
			assert.Equal(t, tc.unreachable, f.Unreachable.String())
			notReady := "300s (default)"
			if tc.pod.Name == "forever" {
				notReady = "forever" // a toleration of every taint wins for both
			}
			assert.Equal(t, notReady, f.NotReady.String(), "not-ready is reported as it is")
		})
	}

	// Without the install time, the audit does not guess why.
	f := Auditor{Rule: toleration.DefaultRule()}.Classify(defaulted("old", before), true)
	assert.Equal(t, "not injected", f.Reason)
	assert.Equal(t, "unreachable=0s", f.Mark)
}

func TestEnabled(t *testing.T) {
	ns := func(name, label string) *corev1.Namespace {
		n := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if label != "" {
			n.Labels = map[string]string{toleration.NamespaceLabel: label}
		}
		return n
	}
	assert.True(t, Enabled(ns("shop", "enabled")))
	assert.False(t, Enabled(ns("shop", "")))
	assert.False(t, Enabled(ns("shop", "Enabled")))
	assert.False(t, Enabled(ns("kube-system", "enabled")), "excluded as by the webhook configuration")
	assert.False(t, Enabled(ns("fastover-system", "enabled")))
}
