package webhook_test

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/fastover/fastover/webhook"
)

// The rule on a pod as the API server passes it to the webhook: the
// DefaultTolerationSeconds plugin has already added its 300s tolerations.
func ExampleRule_Decide() {
	pod := webhook.Pod{Tolerations: []corev1.Toleration{
		{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](300)},
		{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](300)},
	}}
	d := webhook.DefaultRule().Decide(pod)
	for _, t := range d.Taints {
		fmt.Printf("%s: %s toleration %d\n", t.Name, t.Action, t.Index)
	}
	fmt.Println("mark:", d.Mark())

	doc, _ := webhook.DecodePod([]byte(`{"metadata":{},"spec":{"tolerations":[
		{"key":"node.kubernetes.io/unreachable","operator":"Exists","effect":"NoExecute","tolerationSeconds":300}]}}`))
	for _, op := range webhook.DefaultRule().Decide(doc.Pod).Patch(doc) {
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
	forever := webhook.Pod{Tolerations: []corev1.Toleration{
		{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
	}}
	fmt.Println(webhook.DefaultRule().Decide(forever).Mark())
	// Output: unreachable=user:forever
}

// Serving the webhook: certificates from a directory, reloaded when they
// change; metrics on :8080 and probes on :8081.
func ExampleNewServer() {
	rule := webhook.DefaultRule()
	rule.NotReadyTolerationSeconds = ptr.To[int64](0)
	srv, err := webhook.NewServer(webhook.Options{
		CertDir: "/tmp/k8s-webhook-server/serving-certs",
		Rule:    &rule,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = srv.Start(ctx) }()
}

// A webhook's rule, read back from the args of its Deployment's container;
// the flags of other options are skipped.
func ExampleRule_ParseArgs() {
	args := []string{"--port=9443", "--cert-dir=/etc/fastover/tls", "--toleration-seconds=5", "--not-ready-toleration-seconds", "30"}
	rule := webhook.DefaultRule()
	if err := rule.ParseArgs(args); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(rule.Flags())
	// Output: [--toleration-seconds=5 --not-ready-toleration-seconds=30 --default-toleration-seconds=300]
}
