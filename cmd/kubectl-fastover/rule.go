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

	"github.com/fastover/fastover/webhook"
)

// defaultWebhook is the webhook Deployment the manifests install.
const defaultWebhook = "fastover-system/fastover-webhook"

// webhookContainer is the container of that Deployment that runs
// fastover-webhook.
const webhookContainer = "webhook"

// ruleFlagNames are the flags webhook.Rule.AddFlags defines.
func ruleFlagNames() []string {
	fs := flag.NewFlagSet("rule", flag.ContinueOnError)
	r := webhook.DefaultRule()
	r.AddFlags(fs)
	var names []string
	fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
	return names
}

// resolveRule returns the rule audit and fix apply, and where it comes
// from: the webhook Deployment's args, with the rule flags given on the
// command line on top; the flags alone when --webhook is "" or, unless
// --webhook was given, when that Deployment cannot be read.
func (o *options) resolveRule(ctx context.Context, client kubernetes.Interface, flags *pflag.FlagSet) (webhook.Rule, string, error) {
	given := map[string]string{}
	for _, name := range ruleFlagNames() {
		if f := flags.Lookup(name); f != nil && f.Changed {
			given[name] = f.Value.String()
		}
	}
	if o.webhook == "" {
		return o.rule, "the command line", nil
	}
	explicit := flags.Changed("webhook")
	args, err := webhookArgs(ctx, client, o.webhook)
	if err != nil {
		if explicit {
			return webhook.Rule{}, "", err
		}
		return o.rule, fmt.Sprintf("the command line and fastover's defaults (%v; --webhook names the Deployment, --webhook='' uses the flags alone)", err), nil
	}
	rule := webhook.DefaultRule()
	if err := rule.ParseArgs(args); err != nil {
		return webhook.Rule{}, "", fmt.Errorf("the rule flags of Deployment %s: %w (give them here and --webhook='')", o.webhook, err)
	}
	// The flags given here win over the Deployment's.
	fs := flag.NewFlagSet("rule", flag.ContinueOnError)
	rule.AddFlags(fs)
	for name, value := range given {
		if err := fs.Set(name, value); err != nil {
			return webhook.Rule{}, "", fmt.Errorf("--%s: %w", name, err)
		}
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
