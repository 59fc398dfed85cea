package toleration

import (
	"encoding/json"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// TestDecideAfterRuleChange: a toleration whose seconds are what the
// pod's mark says fastover set is fastover's, and follows a changed rule;
// one the mark calls the user's, or whose seconds changed since, stays.
func TestDecideAfterRuleChange(t *testing.T) {
	five := Rule{TolerationSeconds: 5, DefaultTolerationSeconds: DefaultTolerationSeconds}
	fiveNotReady10 := five
	fiveNotReady10.NotReadyTolerationSeconds = ptr.To[int64](10)
	marked := func(mark string, tols ...corev1.Toleration) Pod {
		return Pod{Annotations: map[string]string{AnnotationInjected: mark}, Tolerations: tols}
	}
	tests := []struct {
		name    string
		rule    Rule
		pod     Pod
		actions []Action
		index   []int
		mark    string
	}{
		{
			name:    "0s set by fastover, rule now 5s: rewritten",
			rule:    five,
			pod:     marked("unreachable=0s", defaultNotReady, unreachable(ptr.To[int64](0))),
			actions: []Action{ActionRewrite}, index: []int{1}, mark: "unreachable=5s",
		},
		{
			name:    "0s added by fastover (no default plugin), rule now 5s: rewritten",
			rule:    five,
			pod:     marked("unreachable=0s", unreachable(ptr.To[int64](0))),
			actions: []Action{ActionRewrite}, index: []int{0}, mark: "unreachable=5s",
		},
		{
			name:    "the same without the mark: the user's",
			rule:    five,
			pod:     Pod{Tolerations: []corev1.Toleration{defaultNotReady, unreachable(ptr.To[int64](0))}},
			actions: []Action{ActionKeepUser}, index: []int{1}, mark: "unreachable=user:0s",
		},
		{
			name:    "the mark calls it the user's: kept",
			rule:    five,
			pod:     marked("unreachable=user:0s", unreachable(ptr.To[int64](0))),
			actions: []Action{ActionKeepUser}, index: []int{0}, mark: "unreachable=user:0s",
		},
		{
			name:    "seconds changed since fastover set them: the user's",
			rule:    five,
			pod:     marked("unreachable=0s", unreachable(ptr.To[int64](60))),
			actions: []Action{ActionKeepUser}, index: []int{0}, mark: "unreachable=user:60s",
		},
		{
			name: "not the shape fastover writes: the user's",
			rule: five,
			pod: marked("unreachable=0s", corev1.Toleration{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpEqual,
				Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](0)}),
			actions: []Action{ActionKeepUser}, index: []int{0}, mark: "unreachable=user:0s",
		},
		{
			name:    "a broad toleration is never fastover's",
			rule:    five,
			pod:     marked("unreachable=0s", tol("", corev1.TolerationOpExists, corev1.TaintEffectNoExecute, ptr.To[int64](0))),
			actions: []Action{ActionKeepUser}, index: []int{0}, mark: "unreachable=user:0s",
		},
		{
			name:    "the mark names another taint: the user's",
			rule:    five,
			pod:     marked("not-ready=0s", unreachable(ptr.To[int64](0))),
			actions: []Action{ActionKeepUser}, index: []int{0}, mark: "unreachable=user:0s",
		},
		{
			name:    "a mark fastover did not write is not read",
			rule:    five,
			pod:     marked("unreachable=0", unreachable(ptr.To[int64](0))),
			actions: []Action{ActionKeepUser}, index: []int{0}, mark: "unreachable=user:0s",
		},
		{
			name:    "both managed, both changed: both rewritten",
			rule:    fiveNotReady10,
			pod:     marked("unreachable=0s,not-ready=30s", notReady(ptr.To[int64](30)), unreachable(ptr.To[int64](0))),
			actions: []Action{ActionRewrite, ActionRewrite}, index: []int{1, 0}, mark: "unreachable=5s,not-ready=10s",
		},
		{
			name:    "not-ready was the user's: only unreachable follows",
			rule:    fiveNotReady10,
			pod:     marked("unreachable=0s,not-ready=user:30s", notReady(ptr.To[int64](30)), unreachable(ptr.To[int64](0))),
			actions: []Action{ActionRewrite, ActionKeepUser}, index: []int{1, 0}, mark: "unreachable=5s,not-ready=user:30s",
		},
		{
			name: "an override set since: fastover's value follows it",
			rule: DefaultRule(),
			pod: Pod{Annotations: map[string]string{AnnotationInjected: "unreachable=0s", AnnotationTolerationSeconds: "20"},
				Tolerations: []corev1.Toleration{unreachable(ptr.To[int64](0))}},
			actions: []Action{ActionRewrite}, index: []int{0}, mark: "unreachable=20s",
		},
		{
			name:    "already as the rule wants: nothing to do",
			rule:    five,
			pod:     marked("unreachable=5s", unreachable(ptr.To[int64](5))),
			actions: []Action{ActionNone}, index: []int{0}, mark: "unreachable=5s",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := tt.rule.Decide(tt.pod)
			var actions []Action
			var index []int
			for _, td := range d.Taints {
				actions = append(actions, td.Action)
				index = append(index, td.Index)
			}
			assert.Equal(t, tt.actions, actions)
			assert.Equal(t, tt.index, index)
			assert.Equal(t, tt.mark, d.Mark())
		})
	}
}

// TestPatchAfterRuleChange: the patch of a pod fastover set under the old
// rule sets the new seconds in place and rewrites the mark; applied, the
// pod needs nothing more.
func TestPatchAfterRuleChange(t *testing.T) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Annotations: map[string]string{AnnotationInjected: "unreachable=0s", "team": "a"}},
		Spec: corev1.PodSpec{
			Containers:  []corev1.Container{{Name: "c", Image: "i"}},
			Tolerations: []corev1.Toleration{defaultNotReady, unreachable(ptr.To[int64](0))},
		},
	}
	rule := Rule{TolerationSeconds: 5, DefaultTolerationSeconds: DefaultTolerationSeconds}
	doc := DocumentOf(pod)
	ops := rule.Decide(doc.Pod).Patch(doc)
	raw, err := json.Marshal(ops)
	require.NoError(t, err)
	assert.JSONEq(t, `[
		{"op":"replace","path":"/spec/tolerations/1/tolerationSeconds","value":5},
		{"op":"add","path":"/metadata/annotations/fastover.io~1injected","value":"unreachable=5s"}
	]`, string(raw))

	patch, err := jsonpatch.DecodePatch(raw)
	require.NoError(t, err)
	out, err := patch.Apply(podJSONOf(t, pod))
	require.NoError(t, err)
	after := decodePod(t, out)
	assert.Equal(t, "a", after.Annotations["team"])
	assert.Equal(t, []corev1.Toleration{defaultNotReady, unreachable(ptr.To[int64](5))}, after.Spec.Tolerations)
	assert.False(t, rule.Decide(DocumentOf(after).Pod).Changed(), "a second pass changes nothing")
}

func TestMarkedSeconds(t *testing.T) {
	for _, tc := range []struct {
		mark, name string
		want       int64
		ok         bool
	}{
		{"unreachable=0s", "unreachable", 0, true},
		{"unreachable=0s,not-ready=30s", "not-ready", 30, true},
		{"unreachable=user:0s", "unreachable", 0, false},
		{"unreachable=user:forever", "unreachable", 0, false},
		{"unreachable=forever", "unreachable", 0, false},
		{"unreachable=0", "unreachable", 0, false},
		{"unreachable=-1s", "unreachable", 0, false},
		{"unreachable=s", "unreachable", 0, false},
		{"unreachable", "unreachable", 0, false},
		{"", "unreachable", 0, false},
		{",,=,unreachable=7s", "unreachable", 7, true},
		{"unreachable=99999999999999999999s", "unreachable", 0, false},
	} {
		got, ok := markedSeconds(tc.mark, tc.name)
		assert.Equal(t, tc.ok, ok, "%q", tc.mark)
		if tc.ok {
			assert.Equal(t, tc.want, got, "%q", tc.mark)
		}
	}
}
