package e2e

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/fastover/fastover/internal/cluster"
	"github.com/fastover/fastover/retrofit"
)

// addZoneNodes adds kwok nodes labelled as being in the zone (region
// "local"), as a cloud provider labels its nodes.
func addZoneNodes(ctx context.Context, t *testing.T, env *cluster.Env, zone string, names ...string) {
	t.Helper()
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]string{
		corev1.LabelTopologyRegion: "local",
		corev1.LabelTopologyZone:   zone,
	}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		env.AddNodes(t, name)
		if _, err := env.Client.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatalf("label node %s with zone %s: %v", name, zone, err)
		}
	}
}

// inZone makes a pod template schedule onto the zone's nodes only.
func inZone(spec *corev1.PodSpec, zone string) {
	spec.NodeSelector = map[string]string{corev1.LabelTopologyZone: zone}
}

// statefulSet is a one-replica StatefulSet of a pod that kwok runs, in the
// zone.
func statefulSet(name, zone string) *appsv1.StatefulSet {
	lbl := map[string]string{"app": name}
	spec := corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}}}
	inZone(&spec, zone)
	return &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.StatefulSetSpec{
			Replicas:    ptr.To[int32](1),
			ServiceName: name,
			Selector:    &metav1.LabelSelector{MatchLabels: lbl},
			Template:    corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: lbl}, Spec: spec},
		},
	}
}

// spreadDeployment is a Deployment of n pods in the zone, at most one more
// on any node than on another (so one a node while there are n nodes).
func spreadDeployment(name, zone string, n int32) *appsv1.Deployment {
	d := deployment(name, nil)
	d.Spec.Replicas = ptr.To(n)
	inZone(&d.Spec.Template.Spec, zone)
	d.Spec.Template.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{
		MaxSkew:           1,
		TopologyKey:       corev1.LabelHostname,
		WhenUnsatisfiable: corev1.DoNotSchedule,
		LabelSelector:     &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
	}}
	return d
}

// waitRunningN waits until app has n running pods and returns them.
func waitRunningN(ctx context.Context, t *testing.T, c kubernetes.Interface, ns, app string, n int, timeout time.Duration) []corev1.Pod {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		pods, err := cluster.PodsOf(ctx, c, ns, app)
		if err != nil {
			t.Fatalf("list pods of %s: %v", app, err)
		}
		var running []corev1.Pod
		for i := range pods {
			if cluster.RunningPod(pods[i:i+1], "") != nil {
				running = append(running, pods[i])
			}
		}
		if len(running) == n {
			return running
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d running pods of %s after %v, want %d: %s", len(running), app, timeout, n, describePods(pods))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// taintNode adds a taint to the node, retrying on conflicts with the
// controllers that update it.
func taintNode(ctx context.Context, c kubernetes.Interface, name string, taint corev1.Taint) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := c.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		n.Spec.Taints = append(n.Spec.Taints, taint)
		_, err = c.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		return err
	})
}

// outOfService is the taint of non-graceful node shutdown: an operator (or
// a remediation tool) sets it on a node known to be down.
var outOfService = corev1.Taint{Key: corev1.TaintNodeOutOfService, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute}

// controllerManagerLog returns kube-controller-manager's log so far.
func controllerManagerLog(t *testing.T, env *cluster.Env) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(env.Dir, "logs", string(cluster.ControllerManager)+".log"))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// grepLines returns the lines of log that contain every one of the words.
func grepLines(log string, words ...string) []string {
	var out []string
lines:
	for _, l := range strings.Split(log, "\n") {
		for _, w := range words {
			if !strings.Contains(l, w) {
				continue lines
			}
		}
		out = append(out, l)
	}
	return out
}

// warningRecorder keeps the warnings the API server sends a client
// (rest.Config.WarningHandler).
type warningRecorder struct {
	mu   sync.Mutex
	msgs []string
}

func (w *warningRecorder) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.msgs = append(w.msgs, text)
}

// take returns fastover's warnings recorded since the last call.
func (w *warningRecorder) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for _, m := range w.msgs {
		if strings.Contains(m, "fastover") {
			out = append(out, m)
		}
	}
	w.msgs = nil
	return out
}

// auditHazards runs `kubectl fastover audit -o json` on the namespace and
// returns its hazards, and each pod's kinds of hazard ("name:kind").
func auditHazards(ctx context.Context, t *testing.T, env *cluster.Env, ns string) (retrofit.HazardReport, []string) {
	t.Helper()
	// No rule installed here: the rule flags, fastover's defaults, as the
	// webhook runs.
	out, _ := kubectlFastover(ctx, t, env, "audit", "-o", "json", "-n", ns, "--rule-config=")
	var doc struct {
		Hazards *retrofit.HazardReport `json:"hazards"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil || doc.Hazards == nil {
		t.Fatalf("audit -o json: no hazards (%v): %s", err, out)
	}
	var kinds []string
	for _, h := range doc.Hazards.Pods {
		kinds = append(kinds, h.Name+":"+string(h.Kind))
	}
	return *doc.Hazards, kinds
}

// zoneNamed returns the zone of the report with the name.
func zoneNamed(t *testing.T, r retrofit.HazardReport, name string) retrofit.Zone {
	t.Helper()
	for _, z := range r.Zones {
		if z.Name == name {
			return z
		}
	}
	t.Fatalf("no zone %q in %+v", name, r.Zones)
	return retrofit.Zone{}
}

// since is d in seconds, for the logs.
func since(start, at time.Time) float64 {
	if at.IsZero() {
		return -1
	}
	return at.Sub(start).Seconds()
}
