package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/fastover/fastover/internal/cluster"
	"github.com/fastover/fastover/retrofit/nodeloss"
)

// scaleZone is one zone of a scale shape: its size and how many of its
// nodes are lost at once.
type scaleZone struct {
	name       string
	size, lost int
}

// scaleShape is a cluster and a loss, and how long to watch for taints
// the model puts later (a partial disruption taints one node every 10 s at
// the compressed secondary rate: its first ones are enough).
type scaleShape struct {
	name   string
	zones  []scaleZone
	window time.Duration // after the loss; 0: until the model's last taint
}

// scaleShapes are issue 44's shapes, at the compressed rates of
// TestNodeLossModel: three zones of 100 kwok nodes, k lost in one of them;
// a partial disruption (60 of 100, PartialDisruption: the secondary rate);
// a whole zone (FullDisruption: back to the normal rate); every zone (no
// taint at all); a small zone (10 nodes, 6 lost: a partial disruption of a
// zone of at most --large-cluster-size-threshold nodes, rate 0).
var scaleShapes = []scaleShape{
	{name: "k=1", zones: zonesLosing(1)},
	{name: "k=10", zones: zonesLosing(10)},
	{name: "k=50", zones: zonesLosing(50)},
	{name: "partial", zones: zonesLosing(60), window: 2 * time.Minute},
	{name: "zone", zones: zonesLosing(100)},
	{name: "all", zones: []scaleZone{{"a", 100, 100}, {"b", 100, 100}, {"c", 100, 100}}, window: time.Minute},
	{name: "small", zones: []scaleZone{{"a", 100, 0}, {"b", 100, 0}, {"s", 10, 6}}, window: time.Minute},
}

func zonesLosing(k int) []scaleZone {
	return []scaleZone{{"a", 100, k}, {"b", 100, 0}, {"c", 100, 0}}
}

// scalePodsPerNode is how many pods with a 0 s unreachable toleration each
// node runs (about 1,000 in all).
const scalePodsPerNode = 3

// TestNodeLossAtScale measures issue 44's shapes against the node loss
// model (retrofit/nodeloss): for each, a control plane with kwok node
// groups (one kwok process per zone's lost nodes and one per the rest,
// internal/cluster's AddNodeGroup), scalePodsPerNode pods a node, the lost
// groups killed at once, every taint and pod deletion timed by watches and
// compared as TestNodeLossModel compares them. It takes minutes per shape,
// so `make bench-scale` runs it (FASTOVER_SCALE=1; FASTOVER_SCALE_SHAPES=k=1,k=10
// for some of them); `make test` runs TestNodeLossModel's small shape.
// FASTOVER_SCALE_AUDIT=DIR keeps, in DIR/SHAPE, what explains a shape's
// figures: the API server's audit of the node, pod, event and Lease
// requests, the control plane's logs (kube-controller-manager at --v=4),
// and times.tsv, each lost node's last renewal, the model's Unknown and
// taint times and the measured taint, in seconds from the loss.
func TestNodeLossAtScale(t *testing.T) {
	if os.Getenv("FASTOVER_SCALE") == "" {
		t.Skip("make bench-scale runs it (FASTOVER_SCALE=1): 300 kwok nodes a shape, minutes each")
	}
	want := map[string]bool{}
	if s := os.Getenv("FASTOVER_SCALE_SHAPES"); s != "" {
		for _, name := range strings.Split(s, ",") {
			want[name] = true
		}
	}
	var rows []string
	for _, sh := range scaleShapes {
		if len(want) > 0 && !want[sh.name] {
			continue
		}
		t.Run(sh.name, func(t *testing.T) {
			rows = append(rows, measureScaleShape(t, sh))
		})
	}
	t.Logf("node loss at scale, compressed rates (grace %v, --node-eviction-rate=%v, secondary %v), %d pods a node; seconds from the loss:\n%-8s %-28s %-16s %-14s %-8s %-8s %-10s %s\n%s",
		lossGrace, lossRate, lossSecondaryRate, scalePodsPerNode, "shape", "zones (lost/size)", "taints measured", "model's", "last", "model's", "worst gap", "pods evicted", strings.Join(rows, "\n"))
}

// measureScaleShape runs one shape and returns its row of the table.
func measureScaleShape(t *testing.T, sh scaleShape) string {
	began := time.Now()
	var audit, verbose []string
	auditDir := ""
	if dir := os.Getenv("FASTOVER_SCALE_AUDIT"); dir != "" {
		auditDir = filepath.Join(dir, sh.name)
		audit = auditFlags(t, auditDir)
		verbose = []string{"--v=4"} // the taint queue's decisions
	}
	env := lossEnv(t, audit, verbose)
	if auditDir != "" {
		// Before the control plane stops: its logs beside the audit.
		t.Cleanup(func() {
			assert.NoError(t, os.CopyFS(filepath.Join(auditDir, "logs"), os.DirFS(filepath.Join(env.Dir, "logs"))))
		})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	c := env.Client
	const ns = "scale"
	require.NoError(t, env.CreateNamespace(ctx, ns, nil))

	zoneOf := map[string]string{}
	var lost, lostGroups []string
	pods := 0
	for _, z := range sh.zones {
		zl := map[string]string{corev1.LabelTopologyRegion: "local", corev1.LabelTopologyZone: z.name}
		var names []string
		for i := range z.size {
			name := fmt.Sprintf("%s-%03d", z.name, i+1)
			names = append(names, name)
			zoneOf[name] = "local/" + z.name
		}
		if z.lost > 0 {
			require.NoError(t, env.AddNodeGroup(ctx, z.name+"-lost", zl, names[:z.lost]...))
			lostGroups = append(lostGroups, z.name+"-lost")
			lost = append(lost, names[:z.lost]...)
		}
		if z.lost < z.size {
			require.NoError(t, env.AddNodeGroup(ctx, z.name, zl, names[z.lost:]...))
		}
		d := spreadDeployment("app-"+z.name, z.name, int32(scalePodsPerNode*z.size))
		d.Spec.Template.Spec.Tolerations = []corev1.Toleration{{
			Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](0),
		}}
		_, err := c.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{})
		require.NoError(t, err)
		pods += scalePodsPerNode * z.size
	}
	for _, z := range sh.zones {
		waitRunningN(ctx, t, c, ns, "app-"+z.name, scalePodsPerNode*z.size, 5*time.Minute)
	}
	t.Logf("%s: %d nodes, %d pods Running %v after the control plane started", sh.name, len(zoneOf), pods, time.Since(began).Round(time.Second))

	seen := watchLoss(ctx, t, env, ns)
	flags := lossFlags()
	t0 := time.Now()
	for _, g := range lostGroups {
		require.NoError(t, env.StopNodeGroup(g))
	}
	r := lossPrediction(ctx, t, env, ns, flags, zoneOf, lost, seen, t0)
	if auditDir != "" {
		// At the end, failed or not, before the control plane stops.
		t.Cleanup(func() { writeScaleTimes(t, filepath.Join(auditDir, "times.tsv"), r, seen, t0) })
	}
	last, never := r.LastTaint()
	window := sh.window
	if window == 0 {
		require.Zero(t, never, "the model taints every lost node of %s", sh.name)
		window = last + 30*time.Second
	}
	// As many taints as the model puts in the window, and a little more:
	// counted, not named, since which node the controller takes next
	// follows its cache's order, not the model's.
	due := 0
	for _, n := range r.Nodes {
		if n.Tainted <= window {
			due++
		}
	}
	require.Eventually(t, func() bool {
		got := 0
		for _, name := range lost {
			if _, ok := seen.taintedAt(name); ok {
				got++
			}
		}
		return got >= due
	}, window+30*time.Second, 100*time.Millisecond, "%s: the %d taints the model puts before %v did not all come", sh.name, due, window)
	time.Sleep(time.Until(t0.Add(window)))
	time.Sleep(5 * time.Second) // the evictions of the last ones

	var predicted, measured []time.Duration
	var worst time.Duration
	evicted, podsDue := 0, 0
	for _, n := range r.Nodes {
		if n.Tainted <= window {
			predicted = append(predicted, n.Tainted)
		}
		at, ok := seen.taintedAt(n.Name)
		if !ok {
			continue
		}
		measured = append(measured, at.Sub(t0))
		podsDue += len(n.Pods)
		deleted, gap := checkEvictions(t, sh.name+": ", n, at, seen)
		evicted += deleted
		worst = max(worst, gap)
	}
	slices.Sort(predicted)
	slices.Sort(measured)
	// A taint the model puts just past the window may come just before
	// it: compare as many as both have.
	if assert.InDelta(t, len(predicted), len(measured), 1, "%s: taints within %v: measured %d, the model %d", sh.name, window, len(measured), len(predicted)) {
		worst = max(worst, checkTaints(t, sh.name+": ", predicted, measured))
	}
	var zones []string
	for _, z := range sh.zones {
		zones = append(zones, fmt.Sprintf("%s %d/%d", z.name, z.lost, z.size))
	}
	lastMeasured := "none"
	if len(measured) > 0 {
		lastMeasured = fmt.Sprintf("%.1f", measured[len(measured)-1].Seconds())
	}
	lastModel := "never"
	if len(r.Nodes) > never {
		lastModel = fmt.Sprintf("%.1f", last.Seconds())
	}
	t.Logf("%s took %v", sh.name, time.Since(began).Round(time.Second))
	return fmt.Sprintf("%-8s %-28s %-16s %-14s %-8s %-8s %-10v %d of %d",
		sh.name, strings.Join(zones, ", "), fmt.Sprintf("%d in %v", len(measured), window.Round(time.Second)),
		fmt.Sprintf("%d (%d never)", len(predicted), never), lastMeasured, lastModel, worst.Round(10*time.Millisecond), evicted, podsDue)
}

// scaleAuditPolicy records the writes and reads of single nodes, pods and
// events, and the reads of single Leases, with their times: the node
// lifecycle and taint-eviction controllers' requests, read beside the
// taints.
const scaleAuditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
  resources:
  - group: ""
    resources: ["nodes", "nodes/status", "pods", "pods/status", "events"]
  verbs: ["get", "patch", "update", "delete", "create"]
- level: Metadata
  resources:
  - group: coordination.k8s.io
    resources: ["leases"]
  verbs: ["get"]
- level: None
`

// auditFlags writes the audit policy into dir and returns the API server's
// flags that log to dir/audit.log.
func auditFlags(t *testing.T, dir string) []string {
	t.Helper()
	require.NoError(t, os.MkdirAll(dir, 0o755))
	policy := filepath.Join(dir, "policy.yaml")
	require.NoError(t, os.WriteFile(policy, []byte(scaleAuditPolicy), 0o644))
	return []string{"--audit-policy-file=" + policy, "--audit-log-path=" + filepath.Join(dir, "audit.log"), "--audit-log-maxsize=0", "--audit-log-mode=batch"}
}

// writeScaleTimes writes, for each lost node, its last Lease renewal and
// the model's Unknown and taint times beside the measured taint, in
// seconds from t0 (whose wall-clock time heads the file), to read beside
// the audit log.
func writeScaleTimes(t *testing.T, path string, r nodeloss.Result, seen *lossWatch, t0 time.Time) {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "# t0 %s\nnode\tlost\tmodel_unknown\tmodel_taint\tmeasured_taint\n", t0.UTC().Format(time.RFC3339Nano))
	for _, n := range r.Nodes {
		measured := "-"
		if at, ok := seen.taintedAt(n.Name); ok {
			measured = fmt.Sprintf("%.3f", at.Sub(t0).Seconds())
		}
		fmt.Fprintf(&b, "%s\t%.3f\t%.3f\t%.3f\t%s\n", n.Name, n.LostAt.Seconds(), n.Unknown.Seconds(), n.Tainted.Seconds(), measured)
	}
	require.NoError(t, os.WriteFile(path, []byte(b.String()), 0o644))
}

// lossPrediction is the model's prediction for the cluster as it is now:
// the pods of ns where they are, the nodes of zoneOf (name: "region/zone")
// in their zones, the lost ones since their Leases' last renewals, those
// already tainted since seen says; times from t0.
func lossPrediction(ctx context.Context, t *testing.T, env *cluster.Env, ns string, flags nodeloss.Flags, zoneOf map[string]string, lost []string, seen *lossWatch, t0 time.Time) nodeloss.Result {
	t.Helper()
	c := env.Client
	pods, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	byNode := map[string][]nodeloss.Pod{}
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			byNode[p.Spec.NodeName] = append(byNode[p.Spec.NodeName], nodeloss.Pod{Namespace: ns, Name: p.Name, Ready: cluster.PodReady(&p)})
		}
	}
	names := make([]string, 0, len(zoneOf))
	for name := range zoneOf {
		names = append(names, name)
	}
	slices.Sort(names)
	s := nodeloss.Scenario{Flags: flags}
	for _, name := range names {
		n := nodeloss.Node{Name: name, Zone: zoneOf[name], Pods: byNode[name]}
		if slices.Contains(lost, name) {
			lease, err := c.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, name, metav1.GetOptions{})
			require.NoError(t, err)
			n.Lost, n.LostAt = true, lease.Spec.RenewTime.Sub(t0)
			if at, ok := seen.taintedAt(name); ok {
				n.Tainted, n.TaintedAt = true, at.Sub(t0)
			}
		}
		s.Nodes = append(s.Nodes, n)
	}
	r, err := nodeloss.Simulate(s)
	require.NoError(t, err)
	return r
}
