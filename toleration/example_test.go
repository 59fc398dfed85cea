package toleration_test

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/fastover/fastover/toleration"
)

// The rule on a pod as the API server passes it to the webhook: the
// DefaultTolerationSeconds plugin has already added its 300s tolerations.
func ExampleRule_Decide() {
	pod := toleration.Pod{Tolerations: []corev1.Toleration{
		{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](300)},
		{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](300)},
	}}
	d := toleration.DefaultRule().Decide(pod)
	for _, t := range d.Taints {
		fmt.Printf("%s: %s toleration %d\n", t.Name, t.Action, t.Index)
	}
	fmt.Println("mark:", d.Mark())

	doc, _ := toleration.DecodePod([]byte(`{"metadata":{},"spec":{"tolerations":[
		{"key":"node.kubernetes.io/unreachable","operator":"Exists","effect":"NoExecute","tolerationSeconds":300}]}}`))
	for _, op := range toleration.DefaultRule().Decide(doc.Pod).Patch(doc) {
		fmt.Println(op.Json())
	}
	// Output:
	// unreachable: rewrite toleration 1
	// mark: unreachable=0s
	// {"op":"replace","path":"/spec/tolerations/0/tolerationSeconds","value":0}
	// {"op":"add","path":"/metadata/annotations","value":{"fastover.io/injected":"unreachable=0s"}}
}

// A user's own toleration is left alone, and the mark says so.
func ExampleRule_Decide_userChoice() {
	forever := toleration.Pod{Tolerations: []corev1.Toleration{
		{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
	}}
	fmt.Println(toleration.DefaultRule().Decide(forever).Mark())
	// Output: unreachable=user:forever
}

// A pod that exists (read from the API) is patched the same way: the
// retrofit and the reconciler start from DocumentOf.
func ExampleDocumentOf() {
	pod := &corev1.Pod{Spec: corev1.PodSpec{Tolerations: []corev1.Toleration{
		{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "db", Effect: corev1.TaintEffectNoSchedule},
	}}}
	rule := toleration.DefaultRule()
	rule.NotReadyTolerationSeconds = ptr.To[int64](30)
	doc := toleration.DocumentOf(pod)
	for _, op := range rule.Decide(doc.Pod).Patch(doc) {
		fmt.Println(op.Json())
	}
	// Output:
	// {"op":"add","path":"/spec/tolerations/-","value":{"key":"node.kubernetes.io/unreachable","operator":"Exists","effect":"NoExecute","tolerationSeconds":0}}
	// {"op":"add","path":"/spec/tolerations/-","value":{"key":"node.kubernetes.io/not-ready","operator":"Exists","effect":"NoExecute","tolerationSeconds":30}}
	// {"op":"add","path":"/metadata/annotations","value":{"fastover.io/injected":"unreachable=0s,not-ready=30s"}}
}

// Which toleration the taint-eviction controller applies to a taint: the
// first that matches, here a broad one before the API server's default.
func ExampleEffectiveToleration() {
	tols := []corev1.Toleration{
		{Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](120)},
		{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](300)},
	}
	fmt.Println(toleration.EffectiveToleration(tols, corev1.TaintNodeUnreachable))
	fmt.Println(toleration.EffectiveToleration(tols[1:], corev1.TaintNodeNotReady))
	// Output:
	// 0
	// -1
}

// The rule of the ConfigMap fastover-rule, one key per field, as the
// webhook, the reconciler, kubectl-fastover and the policy read it.
func ExampleParseRuleData() {
	rule, err := toleration.ParseRuleData(map[string]string{"tolerationSeconds": "5", "notReadyTolerationSeconds": "30"})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(rule.Flags())
	_, err = toleration.ParseRuleData(map[string]string{"tolerationSeconds": "-5"})
	fmt.Println(err)
	// Output:
	// [--toleration-seconds=5 --not-ready-toleration-seconds=30 --default-toleration-seconds=300]
	// tolerationSeconds: want a whole number of seconds, decimal digits only (at most 15), got "-5"
}

// A rule file, for a process given --rule-file outside the cluster.
func ExampleParseRuleConfig() {
	rule, err := toleration.ParseRuleConfig([]byte(`apiVersion: fastover.io/v1alpha1
kind: Rule
tolerationSeconds: 5
notReadyTolerationSeconds: 30
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(rule.Flags())
	_, err = toleration.ParseRuleConfig([]byte("apiVersion: fastover.io/v1alpha1\nkind: Rule\ntolerationSeconds: -5\n"))
	fmt.Println(err)
	// Output:
	// [--toleration-seconds=5 --not-ready-toleration-seconds=30 --default-toleration-seconds=300]
	// tolerationSeconds: must not be negative, got -5
}
