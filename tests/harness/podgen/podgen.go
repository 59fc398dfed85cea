// Package podgen generates pods for fastover's differential test: seeded,
// random pods whose tolerations, annotations, labels and owners exercise
// every branch of the toleration rule (broad tolerations, empty keys and
// effects, Equal with values, user seconds, duplicates, the API server's
// default written by hand; opt-outs, overrides valid and invalid, stale
// marks; DaemonSet, ReplicaSet, StatefulSet, Job, no owner, mirror pods).
//
// It also says what the API server does to such a pod before fastover sees
// it (APIServerDefaults), what fastover's rule makes of it (Expect), what
// an admission actually produced (Observe), and shrinks a failing case to
// a small one printed as Go source (Shrink, Case.GoString), ready to be
// kept as a fixed case.
package podgen

import (
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/fastover/fastover/toleration"
)

// Owner is what owns a generated pod.
type Owner string

// The owners a generated pod may have.
const (
	NoOwner     Owner = ""
	ReplicaSet  Owner = "ReplicaSet"
	StatefulSet Owner = "StatefulSet"
	Job         Owner = "Job"
	DaemonSet   Owner = "DaemonSet"
	// KruiseDaemonSet is a DaemonSet of another API group (OpenKruise's
	// Advanced DaemonSet): the rule skips any kind named DaemonSet.
	KruiseDaemonSet Owner = "apps.kruise.io/DaemonSet"
)

// OwnerReference returns the owner reference of a pod owned by o, or nil
// for NoOwner. The owner need not exist: dry-run creates never reach the
// garbage collector, and a stored pod with a missing owner is merely
// collected later.
func (o Owner) OwnerReference() *metav1.OwnerReference {
	ref := &metav1.OwnerReference{
		Name:       "owner",
		UID:        types.UID("6f0c2a4e-0d7b-4c36-9d0e-000000000001"),
		Controller: ptr.To(true),
	}
	switch o {
	case NoOwner:
		return nil
	case ReplicaSet, StatefulSet, DaemonSet:
		ref.APIVersion, ref.Kind = "apps/v1", string(o)
	case Job:
		ref.APIVersion, ref.Kind = "batch/v1", string(o)
	case KruiseDaemonSet:
		ref.APIVersion, ref.Kind = "apps.kruise.io/v1alpha1", "DaemonSet"
	default:
		ref.APIVersion, ref.Kind = "example.com/v1", string(o)
	}
	return ref
}

// Case is one pod of the differential test: what the user submits.
type Case struct {
	// Name says where the case comes from (a fixed case's story, or the
	// seed and index of a generated one).
	Name        string
	Owner       Owner
	Labels      map[string]string
	Annotations map[string]string
	Tolerations []corev1.Toleration
}

// Pod returns the pod the user submits for c, named name.
func (c Case) Pod(name string) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Labels:      maps.Clone(c.Labels),
			Annotations: maps.Clone(c.Annotations),
		},
		Spec: corev1.PodSpec{
			Containers:  []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}},
			Tolerations: cloneTolerations(c.Tolerations),
		},
	}
	if ref := c.Owner.OwnerReference(); ref != nil {
		p.OwnerReferences = []metav1.OwnerReference{*ref}
	}
	if _, ok := c.Annotations[corev1.MirrorPodAnnotationKey]; ok {
		// The API server takes a mirror pod only bound to its node, as
		// the kubelet creates it.
		p.Spec.NodeName = MirrorNode
	}
	return p
}

// MirrorNode is the node a mirror pod is bound to.
const MirrorNode = "node-mirror"

func cloneTolerations(tols []corev1.Toleration) []corev1.Toleration {
	if tols == nil {
		return nil
	}
	out := make([]corev1.Toleration, len(tols))
	for i, t := range tols {
		out[i] = *t.DeepCopy()
	}
	return out
}

// Clone returns a deep copy of c.
func (c Case) Clone() Case {
	c.Labels = maps.Clone(c.Labels)
	c.Annotations = maps.Clone(c.Annotations)
	c.Tolerations = cloneTolerations(c.Tolerations)
	return c
}

// SeedEnv names the environment variable that replays a seed.
const SeedEnv = "FASTOVER_DIFF_SEED"

// CasesEnv names the environment variable that sets how many pods are
// generated.
const CasesEnv = "FASTOVER_DIFF_CASES"

// Seed returns the seed in $FASTOVER_DIFF_SEED, or a new one from the
// clock; replayed says which. A value that is not an integer is an error.
func Seed() (seed uint64, replayed bool, err error) {
	if v, ok := os.LookupEnv(SeedEnv); ok && v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return 0, false, fmt.Errorf("%s=%q: want an unsigned integer, as a run prints it", SeedEnv, v)
		}
		return s, true, nil
	}
	return uint64(time.Now().UnixNano()), false, nil
}

// Count returns the number of pods in $FASTOVER_DIFF_CASES, or def. A value
// that is not a positive integer is an error.
func Count(def int) (int, error) {
	v := os.Getenv(CasesEnv)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("%s=%q: want a positive integer", CasesEnv, v)
	}
	return n, nil
}

// Generator makes cases from a seed: the same seed gives the same cases.
type Generator struct {
	seed uint64
	rng  *rand.Rand
	n    int
}

// New returns a generator for the seed.
func New(seed uint64) *Generator {
	return &Generator{seed: seed, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
}

// Seed returns the generator's seed.
func (g *Generator) Seed() uint64 { return g.seed }

// Values the generator draws from.
var (
	// validOverrides parse as seconds: leading zeros and the longest
	// accepted value included.
	validOverrides = []string{"0", "0", "30", "300", "600", "007", "1", "999999999999999"}
	// invalidOverrides must be denied: empty, signed, spaced, suffixed,
	// exponent, hex, fractional, one digit too many, a non-ASCII digit.
	invalidOverrides = []string{"", "-1", "+5", "soon", " 30", "30 ", "30s", "1e3", "0x10", "3.0",
		"9999999999999999999", "9007199254740993", "\u0663", "1_000"}
	// marks are fastover.io/injected values a pod may be submitted with
	// (copied from another pod, say): the rule reads them.
	marks = []string{"unreachable=0s", "unreachable=300s", "unreachable=30s", "unreachable=user:600s",
		"unreachable=0s,not-ready=300s", "not-ready=300s", "not-ready=30s", "unreachable=5s,not-ready=30s", "garbage", "",
		// The first entry of a name decides; leading zeros parse.
		"unreachable=30s,unreachable=0s", "unreachable=user:30s,unreachable=30s", "unreachable=030s", "unreachable=30"}
	userSeconds = []int64{0, 0, 1, 5, 30, 299, 300, 300, 301, 600, 3600, -1, -300, math.MaxInt64}
	otherKeys   = []string{"example.com/gpu", "node.kubernetes.io/not-ready-ish", "node-role.kubernetes.io/control-plane",
		"node.kubernetes.io/out-of-service", "node.kubernetes.io/unschedulable"}
)

func (g *Generator) pick(n int) int { return g.rng.IntN(n) }

func (g *Generator) chance(p float64) bool { return g.rng.Float64() < p }

func pickOf[T any](g *Generator, s []T) T { return s[g.pick(len(s))] }

// Case returns the next case.
func (g *Generator) Case() Case {
	c := Case{Name: fmt.Sprintf("seed %d case %d", g.seed, g.n)}
	g.n++
	switch r := g.rng.Float64(); {
	case r < 0.40:
		c.Owner = NoOwner
	case r < 0.62:
		c.Owner = ReplicaSet
	case r < 0.74:
		c.Owner = StatefulSet
	case r < 0.80:
		c.Owner = Job
	case r < 0.95:
		c.Owner = DaemonSet
	default:
		c.Owner = KruiseDaemonSet
	}
	ann := map[string]string{}
	if g.chance(0.06) {
		ann[corev1.MirrorPodAnnotationKey] = "4a7f5c1e"
	}
	switch r := g.rng.Float64(); {
	case r < 0.10:
		ann[toleration.AnnotationInject] = "false"
	case r < 0.13:
		ann[toleration.AnnotationInject] = pickOf(g, []string{"true", "False", "FALSE", "", "no"})
	}
	switch r := g.rng.Float64(); {
	case r < 0.20:
		ann[toleration.AnnotationTolerationSeconds] = pickOf(g, validOverrides)
	case r < 0.32:
		ann[toleration.AnnotationTolerationSeconds] = pickOf(g, invalidOverrides)
	}
	if g.chance(0.10) {
		ann[toleration.AnnotationInjected] = pickOf(g, marks)
	}
	if g.chance(0.10) {
		ann["example.com/note"] = "kept as is"
	}
	if len(ann) > 0 {
		c.Annotations = ann
	}
	if g.chance(0.25) {
		c.Labels = map[string]string{"app": "web"}
		if g.chance(0.5) {
			// A label is not an opt-out: only the annotation is.
			c.Labels[toleration.NamespaceLabel] = pickOf(g, []string{"false", "enabled"})
		}
	}
	n := 0
	switch r := g.rng.Float64(); {
	case r < 0.25:
	case r < 0.55:
		n = 1
	case r < 0.80:
		n = 2
	case r < 0.93:
		n = 3
	default:
		n = 4 + g.pick(3)
	}
	for range n {
		if len(c.Tolerations) > 0 && g.chance(0.12) {
			// A duplicate of an earlier one.
			dup := pickOf(g, c.Tolerations)
			c.Tolerations = append(c.Tolerations, *dup.DeepCopy())
			continue
		}
		c.Tolerations = append(c.Tolerations, g.toleration())
	}
	return c
}

// toleration returns a toleration the API server accepts: an empty key
// only with Exists, a value only with Equal, seconds only with NoExecute.
func (g *Generator) toleration() corev1.Toleration {
	if g.chance(0.15) {
		// The API server's default, written by the user (or copied from
		// a running pod).
		return corev1.Toleration{
			Key:      pickOf(g, []string{corev1.TaintNodeUnreachable, corev1.TaintNodeUnreachable, corev1.TaintNodeNotReady}),
			Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute,
			TolerationSeconds: ptr.To[int64](toleration.DefaultTolerationSeconds),
		}
	}
	var t corev1.Toleration
	switch r := g.rng.Float64(); {
	case r < 0.45:
		t.Key = corev1.TaintNodeUnreachable
	case r < 0.65:
		t.Key = corev1.TaintNodeNotReady
	case r < 0.78:
		t.Key = "" // every key
	default:
		t.Key = pickOf(g, otherKeys)
	}
	switch r := g.rng.Float64(); {
	case t.Key == "" || r < 0.65:
		t.Operator = corev1.TolerationOpExists
	case r < 0.85:
		t.Operator = corev1.TolerationOpEqual
	default:
		t.Operator = "" // Equal
	}
	if t.Operator != corev1.TolerationOpExists && g.chance(0.5) {
		t.Value = pickOf(g, []string{"true", "v1", "unreachable"})
	}
	switch r := g.rng.Float64(); {
	case r < 0.65:
		t.Effect = corev1.TaintEffectNoExecute
	case r < 0.85:
		t.Effect = "" // every effect
	case r < 0.95:
		t.Effect = corev1.TaintEffectNoSchedule
	default:
		t.Effect = corev1.TaintEffectPreferNoSchedule
	}
	if t.Effect == corev1.TaintEffectNoExecute && g.chance(0.7) {
		t.TolerationSeconds = ptr.To(pickOf(g, userSeconds))
	}
	return t
}

// Cases returns the next n cases.
func (g *Generator) Cases(n int) []Case {
	out := make([]Case, n)
	for i := range out {
		out[i] = g.Case()
	}
	return out
}

// APIServerDefaults returns tols as the API server presents them to
// fastover: mutating admission runs the built-in plugins first, in a fixed
// order, and MutatingAdmissionPolicy then MutatingAdmissionWebhook last, so
// fastover sees the pod after the DefaultTolerationSeconds plugin. That
// plugin appends a not-ready, then an unreachable toleration (Exists,
// NoExecute, seconds) unless a toleration already names the taint's key or
// no key, with effect NoExecute or no effect. It looks at key and effect
// only: an Equal toleration with a value that tolerates nothing still
// stops it.
func APIServerDefaults(tols []corev1.Toleration, seconds int64) []corev1.Toleration {
	covers := func(key string) bool {
		return slices.ContainsFunc(tols, func(t corev1.Toleration) bool {
			return (t.Key == key || t.Key == "") && (t.Effect == corev1.TaintEffectNoExecute || t.Effect == "")
		})
	}
	out := cloneTolerations(tols)
	for _, key := range []string{corev1.TaintNodeNotReady, corev1.TaintNodeUnreachable} {
		if !covers(key) {
			out = append(out, corev1.Toleration{
				Key: key, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute,
				TolerationSeconds: ptr.To(seconds),
			})
		}
	}
	return out
}
