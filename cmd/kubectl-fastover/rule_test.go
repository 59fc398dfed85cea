package main

import (
	"context"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/fastover/fastover/toleration"
)

func webhookDeployment(ns, name string, containers ...corev1.Container) *appsv1.Deployment {
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	d.Spec.Template.Spec.Containers = containers
	return d
}

func TestResolveRule(t *testing.T) {
	tuned := webhookDeployment("fastover-system", "fastover-webhook",
		corev1.Container{Name: "webhook", Args: []string{"--port=9443", "--toleration-seconds=5", "--not-ready-toleration-seconds=30"}})
	envArgs := webhookDeployment("other", "env", corev1.Container{Name: "webhook", Args: []string{"--toleration-seconds=$(SECONDS)"}})
	sidecar := webhookDeployment("other", "sidecar",
		corev1.Container{Name: "proxy", Args: []string{"--toleration-seconds=7"}},
		corev1.Container{Name: "webhook", Command: []string{"/fastover-webhook", "--toleration-seconds=8"}, Args: []string{"--default-toleration-seconds=200"}})
	unnamed := webhookDeployment("other", "unnamed",
		corev1.Container{Name: "a"}, corev1.Container{Name: "b"})
	for _, tc := range []struct {
		name    string
		objects []runtime.Object
		args    []string
		want    string // the rule's flags
		from    string
		err     string
	}{
		{name: "the installed webhook's rule", objects: []runtime.Object{tuned},
			want: "--toleration-seconds=5 --not-ready-toleration-seconds=30 --default-toleration-seconds=300", from: "Deployment fastover-system/fastover-webhook"},
		{name: "flags given here win", objects: []runtime.Object{tuned}, args: []string{"--toleration-seconds=10"},
			want: "--toleration-seconds=10 --not-ready-toleration-seconds=30 --default-toleration-seconds=300", from: "Deployment fastover-system/fastover-webhook and the command line"},
		{name: "no webhook installed: the defaults, said so", args: []string{"--not-ready-toleration-seconds=0"},
			want: "--toleration-seconds=0 --not-ready-toleration-seconds=0 --default-toleration-seconds=300", from: "no Deployment fastover-system/fastover-webhook"},
		{name: "--webhook='': the flags alone", objects: []runtime.Object{tuned}, args: []string{"--webhook="},
			want: "--toleration-seconds=0 --default-toleration-seconds=300", from: "the command line"},
		{name: "command and args, the webhook container", objects: []runtime.Object{sidecar}, args: []string{"--webhook=other/sidecar"},
			want: "--toleration-seconds=8 --default-toleration-seconds=200", from: "Deployment other/sidecar"},
		{name: "a named Deployment must exist", args: []string{"--webhook=other/none"}, err: "no Deployment other/none"},
		{name: "namespace/name", args: []string{"--webhook=fastover-webhook"}, err: `want namespace/name`},
		{name: "values from the environment", objects: []runtime.Object{envArgs}, args: []string{"--webhook=other/env"}, err: "comes from the container's environment"},
		{name: "which container", objects: []runtime.Object{unnamed}, args: []string{"--webhook=other/unnamed"}, err: `no container named "webhook"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := &options{config: genericclioptions.NewConfigFlags(true), rule: toleration.DefaultRule()}
			flags := pflag.NewFlagSet("test", pflag.ContinueOnError)
			o.addFlags(flags)
			require.NoError(t, flags.Parse(tc.args))
			rule, from, err := o.resolveRule(context.Background(), fake.NewClientset(tc.objects...), flags)
			if tc.err != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, strings.Join(rule.Flags(), " "))
			assert.Contains(t, from, tc.from)
		})
	}
}
