package podgen_test

import (
	"errors"
	"go/parser"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"

	"github.com/fastover/fastover/tests/harness/podgen"
	"github.com/fastover/fastover/toleration"
)

func TestSameSeedSameCases(t *testing.T) {
	a, b := podgen.New(42).Cases(200), podgen.New(42).Cases(200)
	assert.Equal(t, a, b)
	assert.NotEqual(t, a, podgen.New(43).Cases(200))
	assert.Equal(t, "seed 42 case 7", a[7].Name)
}

// TestCasesAreValidPods checks the API server's rules for tolerations on
// every generated one: an empty key only with Exists, a value never with
// Exists, seconds only with NoExecute.
func TestCasesAreValidPods(t *testing.T) {
	for _, c := range podgen.New(1).Cases(3000) {
		for _, tol := range c.Pod("p").Spec.Tolerations {
			if tol.Key == "" {
				assert.Equal(t, corev1.TolerationOpExists, tol.Operator, "%s: %#v", c.Name, tol)
			}
			if tol.Operator == corev1.TolerationOpExists {
				assert.Empty(t, tol.Value, "%s: %#v", c.Name, tol)
			}
			if tol.TolerationSeconds != nil {
				assert.Equal(t, corev1.TaintEffectNoExecute, tol.Effect, "%s: %#v", c.Name, tol)
			}
		}
	}
}

// TestCasesCoverTheRule: a thousand cases reach every kind of pod and
// every decision of the rule.
func TestCasesCoverTheRule(t *testing.T) {
	seen := map[string]int{}
	rule := toleration.DefaultRule()
	for _, c := range podgen.New(7).Cases(1000) {
		p := c.Pod("p")
		seen["owner "+string(c.Owner)]++
		for k, v := range p.Annotations {
			switch k {
			case corev1.MirrorPodAnnotationKey:
				seen["mirror"]++
			case toleration.AnnotationInject:
				seen["inject="+v]++
			case toleration.AnnotationInjected:
				seen["stale mark"]++
			}
		}
		keys := map[string]bool{}
		for _, tol := range p.Spec.Tolerations {
			switch {
			case tol.Key == "":
				seen["every key"]++
			case tol.Effect == "":
				seen["every effect"]++
			case tol.Value != "":
				seen["equal with a value"]++
			}
			if rule.IsAPIServerDefault(tol, tol.Key) {
				seen["default written by the user"]++
			}
			if tol.TolerationSeconds != nil && *tol.TolerationSeconds < 0 {
				seen["negative seconds"]++
			}
			s := podgen.FormatTolerations([]corev1.Toleration{tol})
			if keys[s] {
				seen["duplicate"]++
			}
			keys[s] = true
		}
		d := rule.Decide(toleration.Pod{Annotations: p.Annotations, OwnerReferences: p.OwnerReferences,
			Tolerations: podgen.APIServerDefaults(p.Spec.Tolerations, 300)})
		switch {
		case d.Deny != "":
			seen["deny"]++
		case d.Skip != toleration.SkipNone:
			seen["skip "+string(d.Skip)]++
		default:
			if _, ok := p.Annotations[toleration.AnnotationTolerationSeconds]; ok {
				seen["valid override"]++
			}
			for _, td := range d.Taints {
				seen["action "+string(td.Action)]++
			}
		}
	}
	for _, want := range []string{
		"owner ", "owner ReplicaSet", "owner StatefulSet", "owner Job", "owner DaemonSet", "owner apps.kruise.io/DaemonSet",
		"mirror", "inject=false", "stale mark", "every key", "every effect", "equal with a value",
		"default written by the user", "negative seconds", "duplicate", "deny", "valid override",
		"skip opt-out", "skip mirror", "skip daemonset",
		"action rewrite", "action add", "action keep-user", "action none",
	} {
		assert.Positive(t, seen[want], "no case has %q (%v)", want, seen)
	}
	t.Logf("%v", seen)
}

var (
	unreachable300 = corev1.Toleration{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists,
		Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](300)}
	notReady300 = corev1.Toleration{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists,
		Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](300)}
)

func TestAPIServerDefaults(t *testing.T) {
	everyKey := corev1.Toleration{Operator: corev1.TolerationOpExists}
	noSchedule := corev1.Toleration{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}
	equalValue := corev1.Toleration{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpEqual, Value: "v1", Effect: corev1.TaintEffectNoExecute}
	for name, tc := range map[string]struct{ in, want []corev1.Toleration }{
		"none: both appended, not-ready first": {nil, []corev1.Toleration{notReady300, unreachable300}},
		"every key and effect stops both":      {[]corev1.Toleration{everyKey}, []corev1.Toleration{everyKey}},
		"another effect stops neither":         {[]corev1.Toleration{noSchedule}, []corev1.Toleration{noSchedule, notReady300, unreachable300}},
		// The plugin reads key and effect only: this one tolerates no
		// unreachable taint (which has no value), yet stops the default.
		"an Equal with a value stops its key's default": {[]corev1.Toleration{equalValue}, []corev1.Toleration{equalValue, notReady300}},
	} {
		t.Run(name, func(t *testing.T) {
			assert.Equal(t, tc.want, podgen.APIServerDefaults(tc.in, 300))
		})
	}
}

func TestExpect(t *testing.T) {
	rule := toleration.DefaultRule()
	t.Run("bare pod: the default rewritten, marked", func(t *testing.T) {
		o := podgen.Expect(rule, podgen.Case{}, 300)
		want := []corev1.Toleration{notReady300, unreachable300}
		want[1].TolerationSeconds = ptr.To[int64](0)
		assert.Equal(t, podgen.Outcome{Tolerations: want, Mark: "unreachable=0s", Marked: true}, o)
	})
	t.Run("equal with a value: the rule adds one", func(t *testing.T) {
		eq := corev1.Toleration{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpEqual, Value: "v1", Effect: corev1.TaintEffectNoExecute}
		o := podgen.Expect(rule, podgen.Case{Tolerations: []corev1.Toleration{eq}}, 300)
		added := unreachable300
		added.TolerationSeconds = ptr.To[int64](0)
		assert.Equal(t, []corev1.Toleration{eq, notReady300, added}, o.Tolerations)
	})
	t.Run("DaemonSet: as the API server left it, stale mark kept", func(t *testing.T) {
		c := podgen.Case{Owner: podgen.DaemonSet, Annotations: map[string]string{toleration.AnnotationInjected: "garbage"}}
		assert.Equal(t, podgen.Outcome{Tolerations: []corev1.Toleration{notReady300, unreachable300}, Mark: "garbage", Marked: true},
			podgen.Expect(rule, c, 300))
	})
	t.Run("invalid override: denied", func(t *testing.T) {
		o := podgen.Expect(rule, podgen.Case{Annotations: map[string]string{toleration.AnnotationTolerationSeconds: "soon"}}, 300)
		assert.True(t, o.Denied)
		assert.Contains(t, o.Reason, `"soon" is not a valid number of seconds`)
	})
	t.Run("unmutated", func(t *testing.T) {
		assert.Equal(t, podgen.Outcome{Tolerations: []corev1.Toleration{notReady300, unreachable300}}, podgen.Unmutated(podgen.Case{}, 300))
	})
}

func TestObserveAndDiff(t *testing.T) {
	rule := toleration.DefaultRule()
	c := podgen.Case{Annotations: map[string]string{toleration.AnnotationTolerationSeconds: "x"}}
	want := podgen.Expect(rule, c, 300)
	forbidden := apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "p", errors.New(want.Reason))
	got := podgen.Observe(nil, forbidden)
	assert.Empty(t, podgen.Diff(want, got))

	other := apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "p", errors.New("something else"))
	got = podgen.Observe(nil, other)
	assert.Contains(t, podgen.Diff(want, got), "denied with another message")

	failed := podgen.Observe(nil, apierrors.NewInternalError(errors.New("json: cannot unmarshal string")))
	assert.Contains(t, failed.Error, "cannot unmarshal")
	assert.Contains(t, podgen.Diff(want, failed), "got failed: Internal error occurred: json: cannot unmarshal string")
	assert.Empty(t, podgen.Diff(failed, failed))

	bare := podgen.Expect(rule, podgen.Case{}, 300)
	pod := podgen.Case{}.Pod("p")
	pod.Spec.Tolerations = podgen.APIServerDefaults(nil, 300)
	got = podgen.Observe(pod, nil)
	d := podgen.Diff(bare, got)
	assert.Contains(t, d, `mark: want "unreachable=0s", got none`)
	assert.Contains(t, d, "tolerations: want [{node.kubernetes.io/not-ready Exists NoExecute 300s} {node.kubernetes.io/unreachable Exists NoExecute 0s}]")
	assert.Contains(t, podgen.Diff(bare, podgen.Outcome{Denied: true, Reason: "no"}), "want allowed")
	assert.Empty(t, podgen.Diff(bare, bare))
}

func TestShrink(t *testing.T) {
	c := podgen.New(3).Case()
	c.Owner = podgen.ReplicaSet
	c.Labels = map[string]string{"app": "web"}
	c.Annotations = map[string]string{"a": "1", toleration.AnnotationTolerationSeconds: "007", "b": "2"}
	culprit := corev1.Toleration{Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute}
	c.Tolerations = []corev1.Toleration{unreachable300, culprit, notReady300}
	// Fails while the override and the broad toleration are both there.
	calls := 0
	fails := func(c podgen.Case) bool {
		calls++
		has := false
		for _, tol := range c.Tolerations {
			has = has || tol.Key == ""
		}
		return has && c.Annotations[toleration.AnnotationTolerationSeconds] == "007"
	}
	s := podgen.Shrink(c, fails, 100)
	assert.Equal(t, podgen.NoOwner, s.Owner)
	assert.Nil(t, s.Labels)
	assert.Equal(t, map[string]string{toleration.AnnotationTolerationSeconds: "007"}, s.Annotations)
	assert.Equal(t, []corev1.Toleration{culprit}, s.Tolerations)
	assert.True(t, strings.HasSuffix(s.Name, ", shrunk"))
	assert.LessOrEqual(t, calls, 100)

	// The budget bounds the calls.
	calls = 0
	podgen.Shrink(c, func(podgen.Case) bool { calls++; return true }, 3)
	assert.Equal(t, 3, calls)
}

func TestGoString(t *testing.T) {
	c := podgen.Case{
		Name:        "an \"odd\" one",
		Owner:       podgen.KruiseDaemonSet,
		Labels:      map[string]string{"app": "web"},
		Annotations: map[string]string{toleration.AnnotationTolerationSeconds: "\u0663", "b": "x"},
		Tolerations: []corev1.Toleration{
			unreachable300,
			{Key: "example.com/gpu", Value: "v1", Effect: corev1.TaintEffectPreferNoSchedule},
			{Operator: corev1.TolerationOpExists},
		},
	}
	src := c.GoString()
	_, err := parser.ParseExpr("podgen.Case" + src)
	require.NoError(t, err, src)
	for _, want := range []string{
		`Name: "an \"odd\" one",`,
		"Owner: podgen.KruiseDaemonSet,",
		`Annotations: map[string]string{"b": "x", "fastover.io/toleration-seconds": "٣"},`,
		"{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](300)},",
		`{Key: "example.com/gpu", Value: "v1", Effect: corev1.TaintEffectPreferNoSchedule},`,
		"{Operator: corev1.TolerationOpExists},",
	} {
		assert.Contains(t, src, want)
	}
}

func TestSeedAndCount(t *testing.T) {
	t.Setenv(podgen.SeedEnv, "12345")
	s, replayed, err := podgen.Seed()
	require.NoError(t, err)
	assert.Equal(t, uint64(12345), s)
	assert.True(t, replayed)
	t.Setenv(podgen.SeedEnv, "soon")
	_, _, err = podgen.Seed()
	assert.ErrorContains(t, err, "FASTOVER_DIFF_SEED")
	t.Setenv(podgen.SeedEnv, "")
	_, replayed, err = podgen.Seed()
	require.NoError(t, err)
	assert.False(t, replayed)

	n, err := podgen.Count(1000)
	require.NoError(t, err)
	assert.Equal(t, 1000, n)
	t.Setenv(podgen.CasesEnv, "50")
	n, err = podgen.Count(1000)
	require.NoError(t, err)
	assert.Equal(t, 50, n)
	t.Setenv(podgen.CasesEnv, "-1")
	_, err = podgen.Count(1000)
	assert.ErrorContains(t, err, "FASTOVER_DIFF_CASES")
}

func TestWebhookConfiguration(t *testing.T) {
	mwc, err := podgen.WebhookConfiguration("https://127.0.0.1:1/mutate-v1-pod", []byte("CA"), "lane", "Fail")
	require.NoError(t, err)
	hooks, _, err := unstructured.NestedSlice(mwc.Object, "webhooks")
	require.NoError(t, err)
	require.Len(t, hooks, 1)
	hook := hooks[0].(map[string]any)
	assert.Equal(t, "Fail", hook["failurePolicy"])
	url, _, _ := unstructured.NestedString(hook, "clientConfig", "url")
	assert.Equal(t, "https://127.0.0.1:1/mutate-v1-pod", url)
	_, hasService, _ := unstructured.NestedMap(hook, "clientConfig", "service")
	assert.False(t, hasService, "a URL and a Service")
	ca, _, _ := unstructured.NestedString(hook, "clientConfig", "caBundle")
	assert.Equal(t, "Q0E=", ca)
	exprs, _, _ := unstructured.NestedSlice(hook, "namespaceSelector", "matchExpressions")
	require.NotEmpty(t, exprs)
	// The shipped selection is kept, the lane's namespace added.
	assert.Equal(t, toleration.NamespaceLabel, exprs[0].(map[string]any)["key"])
	assert.Equal(t, map[string]any{"key": "kubernetes.io/metadata.name", "operator": "In", "values": []any{"lane"}}, exprs[len(exprs)-1])
	assert.NotEmpty(t, hook["matchConditions"])
}

func TestOnlyNamespace(t *testing.T) {
	obj := map[string]any{}
	require.NoError(t, podgen.OnlyNamespace(obj, "a", "spec", "matchResources", "namespaceSelector"))
	exprs, _, _ := unstructured.NestedSlice(obj, "spec", "matchResources", "namespaceSelector", "matchExpressions")
	assert.Len(t, exprs, 1)
	assert.Error(t, podgen.OnlyNamespace(map[string]any{"sel": "not a map"}, "a", "sel"))
}
