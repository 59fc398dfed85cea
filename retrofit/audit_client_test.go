package retrofit

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/fastover/fastover/toleration"
)

func namespace(name string, enabled bool) *corev1.Namespace {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if enabled {
		ns.Labels = map[string]string{toleration.NamespaceLabel: toleration.NamespaceLabelValue}
	}
	return ns
}

// podIn is a pod of the namespace as the API server stores it without
// fastover (both default tolerations), at resourceVersion 1.
func podIn(ns, name string) *corev1.Pod {
	p := defaulted(name, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	p.Namespace, p.UID, p.ResourceVersion = ns, types.UID("uid-"+ns+"-"+name), "1"
	return p
}

func names(findings []Finding) []string {
	var out []string
	for _, f := range findings {
		out = append(out, f.Namespace+"/"+f.Name+":"+string(f.Status))
	}
	return out
}

func TestAudit(t *testing.T) {
	objs := []runtime.Object{
		namespace("shop", true), namespace("batch", true), namespace("other", false),
		namespace("kube-system", true), // labelled, but excluded
		podIn("shop", "b"), podIn("shop", "a"), podIn("batch", "x"), podIn("other", "o"), podIn("kube-system", "dns"),
	}
	injected := podIn("batch", "fast")
	injected.Spec.Tolerations[1].TolerationSeconds = new(int64)
	injected.Annotations = map[string]string{toleration.AnnotationInjected: "unreachable=0s"}
	objs = append(objs, injected)
	a := Auditor{Rule: toleration.DefaultRule()}
	ctx := context.Background()

	for _, tc := range []struct {
		name  string
		scope Scope
		want  []string
	}{
		{"enabled namespaces, sorted", Scope{}, []string{"batch/fast:fast", "batch/x:needs-fix", "shop/a:needs-fix", "shop/b:needs-fix"}},
		{"every namespace", Scope{AllNamespaces: true}, []string{
			"batch/fast:fast", "batch/x:needs-fix", "kube-system/dns:out-of-scope", "other/o:out-of-scope",
			"shop/a:needs-fix", "shop/b:needs-fix",
		}},
		{"one enabled namespace", Scope{Namespace: "shop"}, []string{"shop/a:needs-fix", "shop/b:needs-fix"}},
		{"one namespace not enabled", Scope{Namespace: "other"}, []string{"other/o:out-of-scope"}},
		{"an empty namespace", Scope{Namespace: "empty"}, nil},
		{"a namespace selector", Scope{NamespaceSelector: selector(t, toleration.NamespaceLabel+"="+toleration.NamespaceLabelValue)}, []string{
			"batch/fast:fast", "batch/x:needs-fix", "kube-system/dns:out-of-scope", "shop/a:needs-fix", "shop/b:needs-fix",
		}},
		{"a selector of namespaces not enabled", Scope{NamespaceSelector: selector(t, "!"+toleration.NamespaceLabel)}, []string{"other/o:out-of-scope"}},
		{"a selector narrows -A", Scope{AllNamespaces: true, NamespaceSelector: selector(t, "!"+toleration.NamespaceLabel)}, []string{"other/o:out-of-scope"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client := fake.NewClientset(append(objs, namespace("empty", true))...)
			findings, err := a.Audit(ctx, client, tc.scope)
			require.NoError(t, err)
			assert.Equal(t, tc.want, names(findings))
			assert.Equal(t, countStatus(tc.want, StatusNeedsFix), NeedsFix(findings))
			for _, f := range findings {
				require.NotNil(t, f.Pod(), "the finding keeps its pod")
				assert.Equal(t, f.Name, f.Pod().Name)
			}
		})
	}

	_, err := a.Audit(ctx, fake.NewClientset(objs...), Scope{Namespace: "nowhere"})
	assert.EqualError(t, err, `namespace "nowhere" not found`)
	_, err = a.Audit(ctx, fake.NewClientset(objs...), Scope{Namespace: "shop", NamespaceSelector: selector(t, "team=a")})
	assert.EqualError(t, err, `a namespace ("shop") and a namespace selector ("team=a"): give one`)
}

func selector(t *testing.T, s string) labels.Selector {
	t.Helper()
	sel, err := labels.Parse(s)
	require.NoError(t, err)
	return sel
}

func TestSummarize(t *testing.T) {
	findings := []Finding{
		{Namespace: "shop", Status: StatusNeedsFix}, {Namespace: "batch", Status: StatusFast},
		{Namespace: "shop", Status: StatusFast}, {Namespace: "shop", Status: StatusKept},
		{Namespace: "other", Status: StatusOutOfScope},
	}
	assert.Equal(t, []NamespaceSummary{
		{Namespace: "batch", Pods: 1, Fast: 1},
		{Namespace: "other", Pods: 1, OutOfScope: 1},
		{Namespace: "shop", Pods: 3, Fast: 1, NeedsFix: 1, Kept: 1},
	}, Summarize(findings))
	assert.Nil(t, Summarize(nil))
}

func countStatus(entries []string, s Status) int {
	n := 0
	for _, e := range entries {
		if strings.HasSuffix(e, ":"+string(s)) {
			n++
		}
	}
	return n
}

// TestAuditPages: the pods of a namespace are read in pages of 500, as
// many as the API server says there are.
func TestAuditPages(t *testing.T) {
	client := fake.NewClientset(namespace("shop", true))
	var limits []int64
	var continues []string
	client.PrependReactor("list", "pods", func(action k8stesting.Action) (bool, runtime.Object, error) {
		opts := action.(k8stesting.ListActionImpl).ListOptions
		limits = append(limits, opts.Limit)
		continues = append(continues, opts.Continue)
		page := &corev1.PodList{}
		switch opts.Continue {
		case "":
			page.Items = []corev1.Pod{*podIn("shop", "p1"), *podIn("shop", "p2")}
			page.Continue = "page-2"
		case "page-2":
			page.Items = []corev1.Pod{*podIn("shop", "p3")}
		default:
			return true, nil, errors.New("unexpected continue token " + opts.Continue)
		}
		return true, page, nil
	})
	findings, err := Auditor{Rule: toleration.DefaultRule()}.Audit(context.Background(), client, Scope{})
	require.NoError(t, err)
	assert.Equal(t, []string{"shop/p1:needs-fix", "shop/p2:needs-fix", "shop/p3:needs-fix"}, names(findings))
	assert.Equal(t, []int64{500, 500}, limits)
	assert.Equal(t, []string{"", "page-2"}, continues)
}

func TestAuditErrors(t *testing.T) {
	fail := func(verb, resource string, err error) *fake.Clientset {
		client := fake.NewClientset(namespace("shop", true), podIn("shop", "a"))
		client.PrependReactor(verb, resource, func(k8stesting.Action) (bool, runtime.Object, error) { return true, nil, err })
		return client
	}
	a := Auditor{Rule: toleration.DefaultRule()}
	forbidden := apierrors.NewForbidden(schema.GroupResource{Resource: "namespaces"}, "", errors.New("no"))
	_, err := a.Audit(context.Background(), fail("list", "namespaces", forbidden), Scope{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "list namespaces:")
	assert.True(t, apierrors.IsForbidden(err), "the API error is wrapped, not replaced")

	_, err = a.Audit(context.Background(), fail("list", "pods", apierrors.NewServiceUnavailable("down")), Scope{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "list pods in shop:")
	assert.True(t, apierrors.IsServiceUnavailable(err))
}

func TestInstalledAt(t *testing.T) {
	ctx := context.Background()
	created := time.Date(2026, 11, 2, 8, 0, 0, 0, time.UTC)
	client := fake.NewClientset(&admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: WebhookConfiguration, CreationTimestamp: metav1.NewTime(created)},
	})
	at, err := InstalledAt(ctx, client)
	require.NoError(t, err)
	assert.True(t, created.Equal(at), "%v", at)

	// Not installed: the zero time, and no error.
	at, err = InstalledAt(ctx, fake.NewClientset())
	require.NoError(t, err)
	assert.True(t, at.IsZero())

	// Any other failure is an error, not "not installed".
	for _, apiErr := range []error{
		apierrors.NewForbidden(schema.GroupResource{Group: "admissionregistration.k8s.io", Resource: "mutatingwebhookconfigurations"}, WebhookConfiguration, errors.New("rbac")),
		apierrors.NewServiceUnavailable("the API server is restarting"),
		context.DeadlineExceeded,
	} {
		client := fake.NewClientset()
		client.PrependReactor("get", "mutatingwebhookconfigurations", func(k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, apiErr
		})
		at, err := InstalledAt(ctx, client)
		require.Error(t, err, "%v", apiErr)
		assert.ErrorIs(t, err, apiErr)
		assert.Contains(t, err.Error(), "MutatingWebhookConfiguration fastover")
		assert.True(t, at.IsZero())
	}
}

func TestExcludedNamespaces(t *testing.T) {
	got := ExcludedNamespaces()
	assert.Equal(t, []string{"kube-system", "fastover-system"}, got)
	got[0] = "shop"
	assert.Equal(t, []string{"kube-system", "fastover-system"}, ExcludedNamespaces(), "each call returns a new slice")
	assert.True(t, Enabled(namespace("shop", true)), "changing a returned slice excludes nothing")
	assert.False(t, Enabled(namespace("kube-system", true)))
}
