package main

import (
	"context"
	"flag"
	"fmt"
	"strings"

	"github.com/spf13/pflag"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/fastover/fastover/toleration"
)

// defaultWebhook is the webhook Deployment the manifests install.
const defaultWebhook = "fastover-system/fastover-webhook"

// webhookContainer is the container of that Deployment that runs
// fastover-webhook.
const webhookContainer = "webhook"

// resolveRule returns the rule audit and fix apply, and where it comes
// from: the webhook Deployment's args, with the rule flags given on the
// command line on top; the flags alone when --webhook is "" or, unless
// --webhook was given, when that Deployment cannot be read.
func (o *options) resolveRule(ctx context.Context, client kubernetes.Interface, flags *pflag.FlagSet) (toleration.Rule, string, error) {
	if o.webhook == "" {
		return o.rule, "the command line", nil
	}
	args, err := webhookArgs(ctx, client, o.webhook)
	if err != nil {
		if flags.Changed("webhook") {
			return toleration.Rule{}, "", err
		}
		return o.rule, fmt.Sprintf("the command line and fastover's defaults (%v; --webhook names the Deployment, --webhook='' uses the flags alone)", err), nil
	}
	rule := toleration.DefaultRule()
	if err := rule.ParseArgs(args); err != nil {
		return toleration.Rule{}, "", fmt.Errorf("the rule flags of Deployment %s: %w (give them here and --webhook='')", o.webhook, err)
	}
	// The rule flags given here win over the Deployment's.
	var given []string
	o.ruleFlags.VisitAll(func(f *flag.Flag) {
		if flags.Changed(f.Name) {
			given = append(given, "--"+f.Name+"="+f.Value.String())
		}
	})
	if err := rule.ParseArgs(given); err != nil {
		return toleration.Rule{}, "", err
	}
	from := "Deployment " + o.webhook
	if len(given) > 0 {
		from += " and the command line"
	}
	return rule, from, nil
}

// webhookArgs reads the command line of the webhook container of the
// Deployment ref (namespace/name).
func webhookArgs(ctx context.Context, client kubernetes.Interface, ref string) ([]string, error) {
	ns, name, ok := strings.Cut(ref, "/")
	if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		return nil, fmt.Errorf("--webhook %q: want namespace/name of the webhook's Deployment", ref)
	}
	d, err := client.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil, fmt.Errorf("no Deployment %s", ref)
	case err != nil:
		return nil, fmt.Errorf("read Deployment %s: %w", ref, err)
	}
	containers := d.Spec.Template.Spec.Containers
	for _, c := range containers {
		if c.Name == webhookContainer || len(containers) == 1 {
			var args []string
			if len(c.Command) > 1 {
				args = append(args, c.Command[1:]...)
			}
			return append(args, c.Args...), nil
		}
	}
	return nil, fmt.Errorf("the webhook Deployment %s has no container named %q", ref, webhookContainer)
}
