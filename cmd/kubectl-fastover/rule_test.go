package main

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/fastover/fastover/toleration"
)

func ruleConfigMap(ns, name string, data map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: data}
}

func TestResolveRule(t *testing.T) {
	tuned := ruleConfigMap("fastover-system", "fastover-rule", map[string]string{
		"tolerationSeconds": "5", "notReadyTolerationSeconds": "30"})
	other := ruleConfigMap("other", "rule", map[string]string{"tolerationSeconds": "8", "defaultTolerationSeconds": "200"})
	bad := ruleConfigMap("other", "bad", map[string]string{"tolerationSeconds": "-8"})
	legacy := ruleConfigMap("other", "legacy", map[string]string{"rule.yaml": "apiVersion: fastover.io/v1alpha1\nkind: Rule\n"})
	for _, tc := range []struct {
		name    string
		objects []runtime.Object
		args    []string
		want    string // the rule's flags
		from    string
		err     []string
	}{
		{name: "the installed rule", objects: []runtime.Object{tuned},
			want: "--toleration-seconds=5 --not-ready-toleration-seconds=30 --default-toleration-seconds=300", from: "ConfigMap fastover-system/fastover-rule"},
		{name: "flags given here win", objects: []runtime.Object{tuned}, args: []string{"--toleration-seconds=10"},
			want: "--toleration-seconds=10 --not-ready-toleration-seconds=30 --default-toleration-seconds=300", from: "ConfigMap fastover-system/fastover-rule and the command line"},
		{name: "--rule-config='': the flags alone", objects: []runtime.Object{tuned}, args: []string{"--rule-config="},
			want: "--toleration-seconds=0 --default-toleration-seconds=300", from: "the command line"},
		{name: "--rule-config='' and a flag", args: []string{"--rule-config=", "--not-ready-toleration-seconds=0"},
			want: "--toleration-seconds=0 --not-ready-toleration-seconds=0 --default-toleration-seconds=300", from: "the command line"},
		{name: "another ConfigMap", objects: []runtime.Object{other}, args: []string{"--rule-config=other/rule"},
			want: "--toleration-seconds=8 --default-toleration-seconds=200", from: "ConfigMap other/rule"},
		{name: "not installed: an error that says what to do", args: []string{"--not-ready-toleration-seconds=0"},
			err: []string{"no ConfigMap fastover-system/fastover-rule", "install fastover", `--rule-config=""`}},
		{name: "a named ConfigMap must exist", args: []string{"--rule-config=other/none"}, err: []string{"no ConfigMap other/none"}},
		{name: "namespace/name", args: []string{"--rule-config=fastover-rule"}, err: []string{"want namespace/name"}},
		{name: "a bad rule", objects: []runtime.Object{bad}, args: []string{"--rule-config=other/bad"},
			err: []string{"ConfigMap other/bad: ", `tolerationSeconds: want a whole number of seconds, decimal digits only (at most 15), got "-8"`}},
		{name: "the former format", objects: []runtime.Object{legacy}, args: []string{"--rule-config=other/legacy"},
			err: []string{"ConfigMap other/legacy: key rule.yaml: the rule is no longer one YAML document"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := &options{config: genericclioptions.NewConfigFlags(true), rule: toleration.DefaultRule()}
			flags := pflag.NewFlagSet("test", pflag.ContinueOnError)
			o.addFlags(flags)
			require.NoError(t, flags.Parse(tc.args))
			rule, from, err := o.resolveRule(context.Background(), fake.NewClientset(tc.objects...), flags)
			if len(tc.err) > 0 {
				require.Error(t, err)
				for _, e := range tc.err {
					assert.Contains(t, err.Error(), e)
				}
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, strings.Join(rule.Flags(), " "))
			assert.Equal(t, tc.from, from)
		})
	}
}

// TestResolveRuleForbidden: without get on the ConfigMap, the error says
// which right is missing.
func TestResolveRuleForbidden(t *testing.T) {
	client := fake.NewClientset()
	client.PrependReactor("get", "configmaps", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(corev1.Resource("configmaps"), "fastover-rule", errors.New("no RBAC"))
	})
	o := &options{config: genericclioptions.NewConfigFlags(true), rule: toleration.DefaultRule()}
	flags := pflag.NewFlagSet("test", pflag.ContinueOnError)
	o.addFlags(flags)
	require.NoError(t, flags.Parse(nil))
	_, _, err := o.resolveRule(context.Background(), client, flags)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "needs get on that ConfigMap")
	assert.True(t, apierrors.IsForbidden(err))
}
