package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/fastover/fastover/internal/cluster"
	"github.com/fastover/fastover/internal/install"
	"github.com/fastover/fastover/tests/harness/podgen"
	"github.com/fastover/fastover/toleration"
	"github.com/fastover/fastover/webhook"
)

// diffCases is how many generated pods TestDifferential creates in each
// lane ($FASTOVER_DIFF_CASES changes it).
const diffCases = 1000

// fixedCases run before the generated ones, each a story of its own or a
// generated case that once failed, shrunk (the test prints a failing case
// in this form).
var fixedCases = []podgen.Case{
	{Name: "bare pod: the API server's default rewritten"},
	{Name: "the default written by the user is the default", Tolerations: []corev1.Toleration{
		{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](300)},
	}},
	{Name: "user's seconds kept", Tolerations: []corev1.Toleration{
		{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](600)},
	}},
	{Name: "every key, forever: the user's, and no default from the API server", Tolerations: []corev1.Toleration{
		{Operator: corev1.TolerationOpExists},
	}},
	{Name: "every key with 300s is not the default's shape", Tolerations: []corev1.Toleration{
		{Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](300)},
	}},
	{Name: "every effect, forever", Tolerations: []corev1.Toleration{
		{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists},
	}},
	{Name: "Equal with a value stops the API server's default but tolerates nothing: fastover adds one", Tolerations: []corev1.Toleration{
		{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpEqual, Value: "v1", Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](30)},
	}},
	{Name: "Equal without a value, empty operator: matches", Tolerations: []corev1.Toleration{
		{Key: corev1.TaintNodeUnreachable, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](300)},
	}},
	{Name: "the first match wins: a broad one before the default", Tolerations: []corev1.Toleration{
		{Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](30)},
		{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](300)},
	}},
	{Name: "duplicates: the first is rewritten, the second left", Tolerations: []corev1.Toleration{
		{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](300)},
		{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](300)},
	}},
	{Name: "negative and largest seconds are the user's", Tolerations: []corev1.Toleration{
		{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](-1)},
		{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](9223372036854775807)},
	}},
	{Name: "override 30", Annotations: map[string]string{toleration.AnnotationTolerationSeconds: "30"}},
	{Name: "override with leading zeros", Annotations: map[string]string{toleration.AnnotationTolerationSeconds: "007"}},
	{Name: "override of 15 digits", Annotations: map[string]string{toleration.AnnotationTolerationSeconds: "999999999999999"}},
	// Found by this test (seed 1796053521819043128): above 2^53 the
	// policy's CEL wrote the seconds as a JSON string and the create
	// failed; 16 digits and more are now denied by all three.
	{Name: "override of 18 digits: denied", Annotations: map[string]string{toleration.AnnotationTolerationSeconds: "999999999999999999"}},
	{Name: "override of 16 digits: denied", Annotations: map[string]string{toleration.AnnotationTolerationSeconds: "9007199254740993"}},
	{Name: "override of 19 digits: denied", Annotations: map[string]string{toleration.AnnotationTolerationSeconds: "9999999999999999999"}},
	{Name: "override empty: denied", Annotations: map[string]string{toleration.AnnotationTolerationSeconds: ""}},
	{Name: "override with a space: denied", Annotations: map[string]string{toleration.AnnotationTolerationSeconds: " 30"}},
	{Name: "override, a non-ASCII digit: denied", Annotations: map[string]string{toleration.AnnotationTolerationSeconds: "\u0663"}},
	{Name: "override with a quote and a backslash: denied", Annotations: map[string]string{toleration.AnnotationTolerationSeconds: `3"0\`}},
	{Name: "invalid override on an opted-out pod: allowed", Annotations: map[string]string{
		toleration.AnnotationTolerationSeconds: "soon", toleration.AnnotationInject: "false",
	}},
	{Name: "invalid override on a DaemonSet pod: allowed", Owner: podgen.DaemonSet, Annotations: map[string]string{toleration.AnnotationTolerationSeconds: "soon"}},
	{Name: "opt-out is exactly false", Annotations: map[string]string{toleration.AnnotationInject: "False"}},
	{Name: "a label is no opt-out", Labels: map[string]string{toleration.AnnotationInject: "false"}},
	{Name: "DaemonSet of another group", Owner: podgen.KruiseDaemonSet},
	{Name: "mirror pod", Annotations: map[string]string{corev1.MirrorPodAnnotationKey: "4a7f5c1e"}},
	{Name: "StatefulSet pod", Owner: podgen.StatefulSet},
	{Name: "a stale mark naming 30s makes a 30s toleration fastover's", Annotations: map[string]string{toleration.AnnotationInjected: "unreachable=30s"},
		Tolerations: []corev1.Toleration{
			{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](30)},
		}},
	{Name: "a mark that does not parse", Annotations: map[string]string{toleration.AnnotationInjected: "unreachable=30"},
		Tolerations: []corev1.Toleration{
			{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](30)},
		}},
	{Name: "the mark already right", Annotations: map[string]string{toleration.AnnotationInjected: "unreachable=0s"},
		Tolerations: []corev1.Toleration{
			{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](0)},
		}},
}

// diffLane is a namespace whose pods one admission path serves, and what
// that path should make of a case.
type diffLane struct {
	name string
	ns   string
	want func(podgen.Case) podgen.Outcome
}

// diffResult is one case's disagreements, by lane.
type diffResult struct {
	c     podgen.Case
	diffs map[string]string // lane name: what differs
}

// TestDifferential proves the webhook, the MutatingAdmissionPolicy and
// the Go rule equal on the real API server: each pod, fixed and generated
// (seeded: the seed is printed, FASTOVER_DIFF_SEED replays it), is
// created with dry-run=All in a namespace without fastover, one served by
// the webhook and one by the policy, and each lane's outcome (allowed or
// denied, the tolerations, the fastover.io/injected mark) is compared with
// what toleration.Decide makes of the pod as the API server presents it
// (podgen.APIServerDefaults: DefaultTolerationSeconds runs before both).
// The lane without fastover proves that model of the API server. A
// failing case is shrunk and printed as Go source for fixedCases. The policy
// lane installs overlays/policy with the same rule as the Go one. Then
// the same again, fixed cases and half as many generated ones, under a
// rule that manages not-ready too.
func TestDifferential(t *testing.T) {
	t.Parallel()
	seed, replayed, err := podgen.Seed()
	require.NoError(t, err)
	n, err := podgen.Count(diffCases)
	require.NoError(t, err)
	how := "new"
	if replayed {
		how = "replayed from " + podgen.SeedEnv
	}
	t.Logf("seed %d (%s; replay with %s=%d), %d generated cases, %d fixed", seed, how, podgen.SeedEnv, seed, n, len(fixedCases))

	began := time.Now()
	env := cluster.Start(t, cluster.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	rule := toleration.DefaultRule()
	const apiServerDefault = toleration.DefaultTolerationSeconds
	expect := func(c podgen.Case) podgen.Outcome { return podgen.Expect(rule, c, apiServerDefault) }

	lanes := []diffLane{
		{"no fastover", "diff-none", func(c podgen.Case) podgen.Outcome { return podgen.Unmutated(c, apiServerDefault) }},
		{"webhook", "diff-webhook", expect},
	}
	require.NoError(t, env.CreateNamespace(ctx, "diff-none", nil))
	require.NoError(t, env.CreateNamespace(ctx, "diff-webhook", injectLabel()))
	wh := startWebhook(t, env)
	registerDiffWebhook(ctx, t, env, wh, "diff-webhook", "fastover")
	require.NoError(t, env.CreateNamespace(ctx, "diff-policy", injectLabel()))
	installDiffPolicy(ctx, t, env, rule, "diff-policy")
	lanes = append(lanes, diffLane{"policy", "diff-policy", expect})
	t.Logf("control plane, webhook and policy ready in %v", time.Since(began).Round(time.Millisecond))
	// The webhook's admission warnings (StatefulSet pods) are not
	// compared: a client that does not log them.
	quiet := rest.CopyConfig(env.Config)
	quiet.WarningHandler = rest.NoWarnings{}
	c, err := kubernetes.NewForConfig(quiet)
	require.NoError(t, err)

	t.Run("dry run admits as a create does", func(t *testing.T) {
		// The fixed cases once for real: the stored pod is what the
		// dry-run said.
		for _, l := range lanes {
			for i, pc := range fixedCases {
				name := fmt.Sprintf("real-%d", i)
				dry := createCase(ctx, c, l.ns, name, pc, true)
				real := createCase(ctx, c, l.ns, name, pc, false)
				if d := podgen.Diff(dry, real); d != "" {
					t.Errorf("%s, %s: dry-run and create differ: %s", l.name, pc.Name, d)
				}
			}
		}
	})

	run := func(t *testing.T, cases []podgen.Case) {
		start := time.Now()
		results := runDiff(ctx, c, lanes, cases)
		t.Logf("%d cases x %d lanes in %v", len(cases), len(lanes), time.Since(start).Round(time.Millisecond))
		reportDiff(ctx, t, c, lanes, results)
	}
	t.Run("fixed", func(t *testing.T) { run(t, fixedCases) })
	t.Run("generated", func(t *testing.T) {
		cases := podgen.New(seed).Cases(n)
		run(t, cases)
		if t.Failed() {
			t.Logf("replay: %s=%d", podgen.SeedEnv, seed)
		}
	})

	// The rule's other half: not-ready managed too, other seconds. A
	// second webhook with the rule's flags serves a namespace of its own;
	// the policy's parameter (the ConfigMap) is changed in place.
	tuned := toleration.Rule{TolerationSeconds: 5, NotReadyTolerationSeconds: ptr.To[int64](30), DefaultTolerationSeconds: apiServerDefault}
	expectTuned := func(c podgen.Case) podgen.Outcome { return podgen.Expect(tuned, c, apiServerDefault) }
	t.Run("not-ready managed", func(t *testing.T) {
		require.NoError(t, env.CreateNamespace(ctx, "diff-webhook-tuned", injectLabel()))
		whTuned := startWebhook(t, env, "--toleration-seconds=5", "--not-ready-toleration-seconds=30")
		registerDiffWebhook(ctx, t, env, whTuned, "diff-webhook-tuned", "fastover-tuned")
		installDiffPolicy(ctx, t, env, tuned, "diff-policy")
		tunedLanes := []diffLane{{"webhook", "diff-webhook-tuned", expectTuned}, {"policy", "diff-policy", expectTuned}}
		cases := append(append([]podgen.Case(nil), fixedCases...), podgen.New(seed+1).Cases(n/2)...)
		start := time.Now()
		results := runDiff(ctx, c, tunedLanes, cases)
		t.Logf("%d cases (the fixed ones, then seed %d) x %d lanes in %v", len(cases), seed+1, len(tunedLanes), time.Since(start).Round(time.Millisecond))
		reportDiff(ctx, t, c, tunedLanes, results)
	})
	t.Logf("TestDifferential: %v in all", time.Since(began).Round(time.Millisecond))
}

// createCase creates the case's pod in ns (dry-run or stored) and returns
// the outcome. A create that fails without an admission decision (a
// timeout, a failed mutation) is tried again, twice.
func createCase(ctx context.Context, c kubernetes.Interface, ns, name string, pc podgen.Case, dryRun bool) podgen.Outcome {
	opts := metav1.CreateOptions{}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	var o podgen.Outcome
	for try := range 3 {
		if try > 0 {
			time.Sleep(100 * time.Millisecond)
		}
		if o = podgen.Observe(c.CoreV1().Pods(ns).Create(ctx, pc.Pod(name), opts)); o.Error == "" {
			break
		}
	}
	return o
}

// runDiff creates every case in every lane, dry-run, six at a time, and
// returns the cases some lane disagrees on, in order.
func runDiff(ctx context.Context, c kubernetes.Interface, lanes []diffLane, cases []podgen.Case) []diffResult {
	type job struct{ i, lane int }
	jobs := make(chan job)
	var mu sync.Mutex
	results := make([]diffResult, len(cases))
	var wg sync.WaitGroup
	for range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				pc, l := cases[j.i], lanes[j.lane]
				got := createCase(ctx, c, l.ns, fmt.Sprintf("d-%d", j.i), pc, true)
				d := podgen.Diff(l.want(pc), got)
				if d == "" {
					continue
				}
				mu.Lock()
				r := &results[j.i]
				if r.diffs == nil {
					r.c, r.diffs = pc, map[string]string{}
				}
				r.diffs[l.name] = d
				mu.Unlock()
			}
		}()
	}
	for i := range cases {
		for l := range lanes {
			jobs <- job{i, l}
		}
	}
	close(jobs)
	wg.Wait()
	var failed []diffResult
	for _, r := range results {
		if r.diffs != nil {
			failed = append(failed, r)
		}
	}
	return failed
}

// reportDiff fails the test with each disagreement; the first three
// cases are shrunk (while the same lanes still disagree) and printed as Go
// source for fixedCases.
func reportDiff(ctx context.Context, t *testing.T, c kubernetes.Interface, lanes []diffLane, results []diffResult) {
	t.Helper()
	for i, r := range results {
		var b strings.Builder
		fmt.Fprintf(&b, "%s: the lanes disagree with the Go rule\n", r.c.Name)
		for _, l := range lanes {
			if d, ok := r.diffs[l.name]; ok {
				fmt.Fprintf(&b, "  %s: %s\n", l.name, d)
			}
		}
		if i < 3 {
			fails := func(pc podgen.Case) bool {
				for _, l := range lanes {
					if _, ok := r.diffs[l.name]; ok && podgen.Diff(l.want(pc), createCase(ctx, c, l.ns, "shrink", pc, true)) == "" {
						return false
					}
				}
				return true
			}
			small := podgen.Shrink(r.c, fails, 200)
			fmt.Fprintf(&b, "  shrunk, as a fixed case:\n%s,\n", small.GoString())
			for _, l := range lanes {
				if _, ok := r.diffs[l.name]; !ok {
					continue
				}
				fmt.Fprintf(&b, "  shrunk, %s: want %s\n    got %s\n", l.name, l.want(small), createCase(ctx, c, l.ns, "shrink", small, true))
			}
		}
		t.Error(b.String())
	}
	if len(results) > 3 {
		t.Logf("%d cases disagree; the first three are shrunk", len(results))
	}
}

// registerDiffWebhook registers the webhook as manifests/webhook does
// (its matchConditions and selector), under the name given, for the
// namespace ns only, with
// failurePolicy Fail so that a failed call is an error rather than an
// unmutated pod, and waits until the API server calls it.
func registerDiffWebhook(ctx context.Context, t *testing.T, env *cluster.Env, wh *webhookServer, ns, name string) {
	t.Helper()
	mwc, err := podgen.WebhookConfiguration("https://"+wh.addr+webhook.Path, wh.ca.CertPEM, ns, "Fail")
	require.NoError(t, err)
	mwc.SetName(name)
	applier, err := install.NewApplier(env.Config)
	require.NoError(t, err)
	_, err = applier.Apply(ctx, []*unstructured.Unstructured{mwc}, install.ApplyOptions{})
	require.NoError(t, err)
	require.NoError(t, install.WaitInjecting(ctx, env.Client, ns, 30*time.Second))
}

// installDiffPolicy installs policy mode (overlays/policy) with the rule,
// its bindings narrowed to the namespace ns, and waits until the API
// server applies both policies there, with that rule: a probe pod gets
// the rule's mark, one with an invalid override is denied.
func installDiffPolicy(ctx context.Context, t *testing.T, env *cluster.Env, rule toleration.Rule, ns string) {
	t.Helper()
	_, err := install.PolicyMode(ctx, env.Config, install.PolicyOptions{Rule: &rule, NamespaceSelector: podgen.LaneSelector(ns)})
	require.NoError(t, err)
	bad := podgen.Case{Annotations: map[string]string{toleration.AnnotationTolerationSeconds: "soon"}}
	want := podgen.Expect(rule, podgen.Case{}, toleration.DefaultTolerationSeconds).Mark
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		probe := createCase(ctx, env.Client, ns, "probe", podgen.Case{}, true)
		return probe.Mark == want && createCase(ctx, env.Client, ns, "probe", bad, true).Denied, nil
	})
	require.NoError(t, err, "the API server does not apply the policies in %s", ns)
}
