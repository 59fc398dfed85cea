package toleration

import (
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// Tolerations as they appear in pods.
var (
	// What the API server's DefaultTolerationSeconds plugin adds.
	defaultNotReady    = tol(corev1.TaintNodeNotReady, corev1.TolerationOpExists, corev1.TaintEffectNoExecute, ptr.To[int64](300))
	defaultUnreachable = tol(corev1.TaintNodeUnreachable, corev1.TolerationOpExists, corev1.TaintEffectNoExecute, ptr.To[int64](300))
	// Tolerate every taint forever, as many system pods do.
	everything = tol("", corev1.TolerationOpExists, "", nil)
	// A taint unrelated to node loss.
	dedicated = corev1.Toleration{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "db", Effect: corev1.TaintEffectNoSchedule}
)

func tol(key string, op corev1.TolerationOperator, effect corev1.TaintEffect, seconds *int64) corev1.Toleration {
	return corev1.Toleration{Key: key, Operator: op, Effect: effect, TolerationSeconds: seconds}
}

func unreachable(seconds *int64) corev1.Toleration {
	return tol(corev1.TaintNodeUnreachable, corev1.TolerationOpExists, corev1.TaintEffectNoExecute, seconds)
}

func notReady(seconds *int64) corev1.Toleration {
	return tol(corev1.TaintNodeNotReady, corev1.TolerationOpExists, corev1.TaintEffectNoExecute, seconds)
}

func TestDecide(t *testing.T) {
	withNotReady := DefaultRule()
	withNotReady.NotReadyTolerationSeconds = ptr.To[int64](5)

	tests := []struct {
		name    string
		rule    Rule
		pod     Pod
		skip    SkipReason
		deny    string // a substring of the message
		actions []Action
		index   []int
		mark    string
	}{
		{
			name:    "API server defaults: unreachable rewritten in place, not-ready left alone",
			pod:     Pod{Tolerations: []corev1.Toleration{defaultNotReady, defaultUnreachable}},
			actions: []Action{ActionRewrite}, index: []int{1}, mark: "unreachable=0s",
		},
		{
			name:    "no toleration at all (default plugin disabled): added",
			pod:     Pod{},
			actions: []Action{ActionAdd}, index: []int{-1}, mark: "unreachable=0s",
		},
		{
			name:    "already injected: nothing to do",
			pod:     Pod{Tolerations: []corev1.Toleration{defaultNotReady, unreachable(ptr.To[int64](0))}},
			actions: []Action{ActionNone}, index: []int{1}, mark: "unreachable=0s",
		},
		{
			name:    "user seconds kept",
			pod:     Pod{Tolerations: []corev1.Toleration{unreachable(ptr.To[int64](600))}},
			actions: []Action{ActionKeepUser}, index: []int{0}, mark: "unreachable=user:600s",
		},
		{
			name:    "user forever kept",
			pod:     Pod{Tolerations: []corev1.Toleration{unreachable(nil)}},
			actions: []Action{ActionKeepUser}, index: []int{0}, mark: "unreachable=user:forever",
		},
		{
			name:    "unrelated tolerations before the default: the default is still the effective one",
			pod:     Pod{Tolerations: []corev1.Toleration{dedicated, defaultNotReady, defaultUnreachable}},
			actions: []Action{ActionRewrite}, index: []int{2}, mark: "unreachable=0s",
		},
		{
			name:    "tolerate everything forever: the broad toleration wins, kept",
			pod:     Pod{Tolerations: []corev1.Toleration{everything}},
			actions: []Action{ActionKeepUser}, index: []int{0}, mark: "unreachable=user:forever",
		},
		{
			name: "broad toleration before a default: the broad one wins, so rewriting the default would change nothing; kept",
			pod: Pod{Tolerations: []corev1.Toleration{
				tol("", corev1.TolerationOpExists, corev1.TaintEffectNoExecute, ptr.To[int64](120)), defaultUnreachable,
			}},
			actions: []Action{ActionKeepUser}, index: []int{0}, mark: "unreachable=user:120s",
		},
		{
			name:    "default before a broad toleration: the default wins and is rewritten",
			pod:     Pod{Tolerations: []corev1.Toleration{defaultUnreachable, everything}},
			actions: []Action{ActionRewrite}, index: []int{0}, mark: "unreachable=0s",
		},
		{
			name:    "unreachable key with empty effect matches NoExecute: kept",
			pod:     Pod{Tolerations: []corev1.Toleration{tol(corev1.TaintNodeUnreachable, corev1.TolerationOpExists, "", nil), defaultUnreachable}},
			actions: []Action{ActionKeepUser}, index: []int{0}, mark: "unreachable=user:forever",
		},
		{
			name:    "unreachable with NoSchedule does not match the NoExecute taint: added",
			pod:     Pod{Tolerations: []corev1.Toleration{tol(corev1.TaintNodeUnreachable, corev1.TolerationOpExists, corev1.TaintEffectNoSchedule, nil)}},
			actions: []Action{ActionAdd}, index: []int{-1}, mark: "unreachable=0s",
		},
		{
			name: "operator Equal with the empty value matches, but is not the plugin's: kept",
			pod: Pod{Tolerations: []corev1.Toleration{
				{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpEqual, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](300)},
			}},
			actions: []Action{ActionKeepUser}, index: []int{0}, mark: "unreachable=user:300s",
		},
		{
			name: "operator Gt cannot match a taint without value: added",
			pod: Pod{Tolerations: []corev1.Toleration{
				{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpGt, Value: "1", Effect: corev1.TaintEffectNoExecute},
			}},
			actions: []Action{ActionAdd}, index: []int{-1}, mark: "unreachable=0s",
		},
		{
			name:    "two defaults: the first one is effective and rewritten",
			pod:     Pod{Tolerations: []corev1.Toleration{defaultUnreachable, defaultUnreachable}},
			actions: []Action{ActionRewrite}, index: []int{0}, mark: "unreachable=0s",
		},
		{
			name:    "a user's 0s is what is wanted",
			pod:     Pod{Tolerations: []corev1.Toleration{tol("", corev1.TolerationOpExists, corev1.TaintEffectNoExecute, ptr.To[int64](0))}},
			actions: []Action{ActionNone}, index: []int{0}, mark: "unreachable=0s",
		},
		{
			name:    "a default that is not the configured default is the user's",
			rule:    Rule{TolerationSeconds: 0, DefaultTolerationSeconds: 200},
			pod:     Pod{Tolerations: []corev1.Toleration{defaultUnreachable}},
			actions: []Action{ActionKeepUser}, index: []int{0}, mark: "unreachable=user:300s",
		},
		{
			name:    "not-ready managed: both defaults rewritten",
			rule:    withNotReady,
			pod:     Pod{Tolerations: []corev1.Toleration{defaultNotReady, defaultUnreachable}},
			actions: []Action{ActionRewrite, ActionRewrite}, index: []int{1, 0}, mark: "unreachable=0s,not-ready=5s",
		},
		{
			name:    "not-ready managed: both added",
			rule:    withNotReady,
			pod:     Pod{},
			actions: []Action{ActionAdd, ActionAdd}, index: []int{-1, -1}, mark: "unreachable=0s,not-ready=5s",
		},
		{
			name:    "not-ready managed, user's not-ready kept",
			rule:    withNotReady,
			pod:     Pod{Tolerations: []corev1.Toleration{notReady(nil), defaultUnreachable}},
			actions: []Action{ActionRewrite, ActionKeepUser}, index: []int{1, 0}, mark: "unreachable=0s,not-ready=user:forever",
		},
		{
			name:    "override sets the value",
			pod:     Pod{Annotations: map[string]string{AnnotationTolerationSeconds: "30"}, Tolerations: []corev1.Toleration{defaultNotReady, defaultUnreachable}},
			actions: []Action{ActionRewrite}, index: []int{1}, mark: "unreachable=30s",
		},
		{
			name:    "override applies to not-ready too when it is managed",
			rule:    withNotReady,
			pod:     Pod{Annotations: map[string]string{AnnotationTolerationSeconds: "7"}, Tolerations: []corev1.Toleration{defaultNotReady, defaultUnreachable}},
			actions: []Action{ActionRewrite, ActionRewrite}, index: []int{1, 0}, mark: "unreachable=7s,not-ready=7s",
		},
		{
			name:    "override does not overrule a user's toleration",
			pod:     Pod{Annotations: map[string]string{AnnotationTolerationSeconds: "30"}, Tolerations: []corev1.Toleration{unreachable(ptr.To[int64](600))}},
			actions: []Action{ActionKeepUser}, index: []int{0}, mark: "unreachable=user:600s",
		},
		{
			name:    "override equal to the default leaves the default as it is",
			pod:     Pod{Annotations: map[string]string{AnnotationTolerationSeconds: "300"}, Tolerations: []corev1.Toleration{defaultUnreachable}},
			actions: []Action{ActionNone}, index: []int{0}, mark: "unreachable=300s",
		},
		{name: "override not a number", pod: Pod{Annotations: map[string]string{AnnotationTolerationSeconds: "abc"}}, deny: "non-negative integer"},
		{name: "override negative", pod: Pod{Annotations: map[string]string{AnnotationTolerationSeconds: "-1"}}, deny: AnnotationTolerationSeconds},
		{name: "override empty", pod: Pod{Annotations: map[string]string{AnnotationTolerationSeconds: ""}}, deny: AnnotationTolerationSeconds},
		{name: "override with a sign", pod: Pod{Annotations: map[string]string{AnnotationTolerationSeconds: "+5"}}, deny: AnnotationTolerationSeconds},
		{name: "override with spaces", pod: Pod{Annotations: map[string]string{AnnotationTolerationSeconds: " 5"}}, deny: AnnotationTolerationSeconds},
		{name: "override fractional", pod: Pod{Annotations: map[string]string{AnnotationTolerationSeconds: "1.5"}}, deny: AnnotationTolerationSeconds},
		{name: "override with a unit", pod: Pod{Annotations: map[string]string{AnnotationTolerationSeconds: "30s"}}, deny: AnnotationTolerationSeconds},
		{name: "override too large", pod: Pod{Annotations: map[string]string{AnnotationTolerationSeconds: "9999999999999999999"}}, deny: "at most 15 digits"},
		{
			name: "opt-out",
			pod:  Pod{Annotations: map[string]string{AnnotationInject: "false"}, Tolerations: []corev1.Toleration{defaultUnreachable}},
			skip: SkipOptOut,
		},
		{
			name: "opt-out wins over an invalid override",
			pod:  Pod{Annotations: map[string]string{AnnotationInject: "false", AnnotationTolerationSeconds: "x"}},
			skip: SkipOptOut,
		},
		{
			name:    "inject annotation other than false does not opt out",
			pod:     Pod{Annotations: map[string]string{AnnotationInject: "true"}, Tolerations: []corev1.Toleration{defaultUnreachable}},
			actions: []Action{ActionRewrite}, index: []int{0}, mark: "unreachable=0s",
		},
		{
			name: "mirror pod",
			pod:  Pod{Annotations: map[string]string{corev1.MirrorPodAnnotationKey: "abc"}},
			skip: SkipMirror,
		},
		{
			name: "DaemonSet pod",
			pod: Pod{
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "ds", Controller: ptr.To(true)}},
				Tolerations:     []corev1.Toleration{unreachable(nil)},
			},
			skip: SkipDaemonSet,
		},
		{
			name: "ReplicaSet pod",
			pod: Pod{
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "rs", Controller: ptr.To(true)}},
				Tolerations:     []corev1.Toleration{defaultNotReady, defaultUnreachable},
			},
			actions: []Action{ActionRewrite}, index: []int{1}, mark: "unreachable=0s",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rule := tt.rule
			if rule == (Rule{}) {
				rule = DefaultRule()
			}
			d := rule.Decide(tt.pod)
			assert.Equal(t, tt.skip, d.Skip)
			if tt.deny != "" {
				assert.Contains(t, d.Deny, tt.deny)
				assert.Contains(t, d.Deny, AnnotationTolerationSeconds, "the message names the annotation")
			} else {
				assert.Empty(t, d.Deny)
			}
			var actions []Action
			var index []int
			for _, td := range d.Taints {
				actions = append(actions, td.Action)
				index = append(index, td.Index)
			}
			assert.Equal(t, tt.actions, actions)
			assert.Equal(t, tt.index, index)
			assert.Equal(t, tt.mark, d.Mark())
			assert.Equal(t, slices.Contains(tt.actions, ActionRewrite) || slices.Contains(tt.actions, ActionAdd), d.Changed())
		})
	}
}

func TestRuleValidate(t *testing.T) {
	assert.NoError(t, DefaultRule().Validate())
	assert.NoError(t, Rule{NotReadyTolerationSeconds: ptr.To[int64](0)}.Validate(), "zero seconds everywhere is valid")
	assert.EqualError(t, Rule{TolerationSeconds: -1, DefaultTolerationSeconds: 300}.Validate(),
		"tolerationSeconds: must not be negative, got -1")
	assert.EqualError(t, Rule{NotReadyTolerationSeconds: ptr.To[int64](-1), DefaultTolerationSeconds: 300}.Validate(),
		"notReadyTolerationSeconds: must not be negative, got -1")
	assert.EqualError(t, Rule{DefaultTolerationSeconds: -1}.Validate(),
		"defaultTolerationSeconds: must not be negative, got -1")

	// Every problem at once, one line each, in the order of the fields.
	err := Rule{TolerationSeconds: -1, NotReadyTolerationSeconds: ptr.To[int64](-2), DefaultTolerationSeconds: -3}.Validate()
	require.Error(t, err)
	assert.Equal(t, []string{
		"tolerationSeconds: must not be negative, got -1",
		"notReadyTolerationSeconds: must not be negative, got -2",
		"defaultTolerationSeconds: must not be negative, got -3",
	}, strings.Split(err.Error(), "\n"))
}

func TestIsAPIServerDefault(t *testing.T) {
	r := DefaultRule()
	assert.True(t, r.IsAPIServerDefault(defaultUnreachable, corev1.TaintNodeUnreachable))
	assert.True(t, r.IsAPIServerDefault(defaultNotReady, corev1.TaintNodeNotReady))
	for name, tc := range map[string]struct {
		tol corev1.Toleration
		key string
	}{
		"another taint's default": {defaultNotReady, corev1.TaintNodeUnreachable},
		"other seconds":           {unreachable(ptr.To[int64](299)), corev1.TaintNodeUnreachable},
		"forever":                 {unreachable(nil), corev1.TaintNodeUnreachable},
		"operator Equal":          {tol(corev1.TaintNodeUnreachable, corev1.TolerationOpEqual, corev1.TaintEffectNoExecute, ptr.To[int64](300)), corev1.TaintNodeUnreachable},
		"a value":                 {corev1.Toleration{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Value: "x", Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](300)}, corev1.TaintNodeUnreachable},
		"every effect":            {tol(corev1.TaintNodeUnreachable, corev1.TolerationOpExists, "", ptr.To[int64](300)), corev1.TaintNodeUnreachable},
		"every key":               {tol("", corev1.TolerationOpExists, corev1.TaintEffectNoExecute, ptr.To[int64](300)), corev1.TaintNodeUnreachable},
		"an unrelated toleration": {dedicated, corev1.TaintNodeUnreachable},
	} {
		assert.False(t, r.IsAPIServerDefault(tc.tol, tc.key), name)
	}
	// The default is the rule's: an API server configured for 200s.
	r.DefaultTolerationSeconds = 200
	assert.False(t, r.IsAPIServerDefault(defaultUnreachable, corev1.TaintNodeUnreachable))
	assert.True(t, r.IsAPIServerDefault(unreachable(ptr.To[int64](200)), corev1.TaintNodeUnreachable))
}

func TestEffective(t *testing.T) {
	r := DefaultRule()
	for _, tc := range []struct {
		name string
		tols []corev1.Toleration
		key  string
		want Effective
		str  string
	}{
		{"none", []corev1.Toleration{dedicated}, corev1.TaintNodeUnreachable, Effective{}, "none"},
		{"the default", []corev1.Toleration{defaultNotReady, defaultUnreachable}, corev1.TaintNodeUnreachable,
			Effective{Tolerated: true, Seconds: ptr.To[int64](300), Default: true}, "300s (default)"},
		{"the user's seconds", []corev1.Toleration{unreachable(ptr.To[int64](5))}, corev1.TaintNodeUnreachable,
			Effective{Tolerated: true, Seconds: ptr.To[int64](5)}, "5s"},
		{"a broad toleration first", []corev1.Toleration{everything, defaultUnreachable}, corev1.TaintNodeUnreachable,
			Effective{Tolerated: true}, "forever"},
		{"not-ready", []corev1.Toleration{defaultUnreachable, notReady(ptr.To[int64](0))}, corev1.TaintNodeNotReady,
			Effective{Tolerated: true, Seconds: ptr.To[int64](0)}, "0s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := r.Effective(tc.tols, tc.key)
			assert.Equal(t, tc.want, got)
			assert.Equal(t, tc.str, got.String())
		})
	}
}

func TestEffectiveToleration(t *testing.T) {
	tols := []corev1.Toleration{dedicated, defaultNotReady, everything, defaultUnreachable}
	assert.Equal(t, 1, EffectiveToleration(tols, corev1.TaintNodeNotReady))
	assert.Equal(t, 2, EffectiveToleration(tols, corev1.TaintNodeUnreachable))
	assert.Equal(t, -1, EffectiveToleration([]corev1.Toleration{dedicated}, corev1.TaintNodeUnreachable))
}
