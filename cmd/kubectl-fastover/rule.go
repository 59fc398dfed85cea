package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/pflag"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/fastover/fastover/toleration"
)

// defaultRuleConfig is the ConfigMap that holds the installed rule: the
// rule's one published home, which the webhook and the reconciler read
// too.
const defaultRuleConfig = toleration.RuleConfigMapNamespace + "/" + toleration.RuleConfigMapName

// resolveRule returns the rule audit and fix apply, and where it comes
// from: the ConfigMap --rule-config (its keys, toleration.ParseRuleData), with the rule flags
// given on the command line on top; the flags alone (over fastover's
// defaults) when --rule-config is "". A ConfigMap that is missing,
// unreadable or bad is an error that says so and how to go on.
func (o *options) resolveRule(ctx context.Context, client kubernetes.Interface, flags *pflag.FlagSet) (toleration.Rule, string, error) {
	if o.ruleConfig == "" {
		return o.rule, "the command line", nil
	}
	ns, name, ok := strings.Cut(o.ruleConfig, "/")
	if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		return toleration.Rule{}, "", fmt.Errorf("--rule-config %q: want namespace/name of the rule's ConfigMap (default %s)", o.ruleConfig, defaultRuleConfig)
	}
	cm, err := client.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return toleration.Rule{}, "", fmt.Errorf("no ConfigMap %s, the rule fastover installs: install fastover (kubectl apply -k manifests/, or the chart), "+
			"or give --rule-config=namespace/name of yours, or --rule-config=\"\" to apply the rule flags given here over fastover's defaults", o.ruleConfig)
	case apierrors.IsForbidden(err):
		return toleration.Rule{}, "", fmt.Errorf("read the rule, ConfigMap %s: %w (kubectl fastover needs get on that ConfigMap; or pass --rule-config=\"\" and the rule flags)", o.ruleConfig, err)
	case err != nil:
		return toleration.Rule{}, "", fmt.Errorf("read the rule, ConfigMap %s: %w", o.ruleConfig, err)
	}
	rule, err := toleration.ParseRuleData(cm.Data)
	if err != nil {
		return toleration.Rule{}, "", fmt.Errorf("ConfigMap %s: %w", o.ruleConfig, err)
	}
	// The rule flags given here win over the ConfigMap's.
	var given bool
	o.ruleFlags.VisitAll(func(f *pflag.Flag) { given = given || flags.Changed(f.Name) })
	rule = rule.WithFlags(o.rule, flags.Changed)
	if err := rule.Validate(); err != nil {
		return toleration.Rule{}, "", err
	}
	from := "ConfigMap " + o.ruleConfig
	if given {
		from += " and the command line"
	}
	return rule, from, nil
}
