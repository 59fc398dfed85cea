package charts_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/fastover/fastover/internal/cluster"
	"github.com/fastover/fastover/tests/charts"
)

// TestClientGoMigrationOnRealNodes is the rolling update of docs/leader.md's
// "Migrating from client-go's leader election", on three real nodes: a
// Deployment of three replicas of client-go's election
// (tests/bench/leaderbaseline, as installBaseline runs it: LeaseLock,
// ReleaseOnCancel, the leader writes the selector-less Service's
// EndpointSlice) serves a client in a pod that calls the ClusterIP every
// 20 ms on connections it keeps. The steps the docs give: the Role
// extended to what the library needs, then the pod template changed to
// fastover-example on the same Lease and Service, the Deployment's default
// strategy (maxSurge 1, maxUnavailable 0) rolling it while the client
// calls. Both kinds answer GET / only while they lead (503 otherwise), so
// the client's answers are the acting leaders as the traffic sees them.
//
// Asserted: the rollout completes; one leader at a time: no replica
// answers after a later holder of the Lease answered, and every replica
// that answered held the Lease, in the Lease's order; the client waits at
// most a planned handover's gap (a terminated client-go leader releases
// the Lease and a fastover standby takes it at once, not at the lease's
// expiry); at the end a fastover replica holds the Lease and is the
// Service's only endpoint, and its answers are the only ones. Printed:
// the holders with the kind of each and when, the calls, failed calls and
// the longest gap.
func TestClientGoMigrationOnRealNodes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	env, _ := realEnv(ctx, t, cluster.Options{}, crashNodes...)
	ch, err := charts.Load(charts.Example)
	require.NoError(t, err)
	_, err = env.PushImages(ctx, ch.Metadata.AppVersion)
	require.NoError(t, err)
	a := installBaseline(ctx, t, env)
	const clientNS = "migration-client"
	require.NoError(t, env.CreateNamespace(ctx, clientNS, nil))
	client := startAppClient(ctx, t, env, a, clientNS, "client", crashNodes[0])
	holders := watchHolders(ctx, t, env, a.ns, a.lease)
	first := a.waitPublished(ctx, t, env, "")
	t.Logf("before: client-go's %s leads on %s", first.Identity, first.Spec.NodeName)

	// Step 1: the Role grants what the library needs (the example chart's
	// Role) before a fastover replica starts.
	_, err = env.Client.RbacV1().Roles(a.ns).Update(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "leaderbaseline"}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "list", "watch", "create", "update"}},
		{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"get", "list", "watch", "create", "update", "delete"}},
		{APIGroups: []string{""}, Resources: []string{"services"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{""}, Resources: []string{"endpoints"}, Verbs: []string{"get", "list", "watch", "create", "update", "delete"}},
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "patch", "update"}},
	}}, metav1.UpdateOptions{})
	require.NoError(t, err)

	// Step 2: the new version, on the same Lease and Service, with the
	// same durations; identities are the pods' names (unique across both
	// kinds).
	began := time.Now()
	var generation int64
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		d, err := env.Client.AppsV1().Deployments(a.ns).Get(ctx, "leaderbaseline", metav1.GetOptions{})
		if err != nil {
			return err
		}
		c := &d.Spec.Template.Spec.Containers[0]
		c.Image = cluster.ImageRepository + "/fastover-example:" + ch.Metadata.AppVersion
		c.Args = []string{"--service=" + a.service, "--lease=" + a.lease, "--port=8080",
			"--lease-duration=15s", "--renew-deadline=10s", "--retry-period=2s"}
		c.Env = []corev1.EnvVar{fromField("POD_NAME", "metadata.name"), fromField("POD_NAMESPACE", "metadata.namespace"),
			fromField("POD_UID", "metadata.uid"), {Name: "CONTAINER_NAME", Value: c.Name},
			fromField("POD_IP", "status.podIP"), fromField("POD_IPS", "status.podIPs")}
		c.ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/readyz", Port: intstr.FromString("http")}}}
		d, err = env.Client.AppsV1().Deployments(a.ns).Update(ctx, d, metav1.UpdateOptions{})
		if err == nil {
			generation = d.Generation
		}
		return err
	}))
	require.NoError(t, waitRollout(ctx, env, a.ns, "leaderbaseline", generation, 5*time.Minute), "the rollout onto fastover")
	t.Logf("the rollout onto fastover complete after %v", time.Since(began).Round(100*time.Millisecond))

	last := a.waitPublished(ctx, t, env, "")
	assert.Equal(t, "fastover-example", kindOf(last.Pod), "the leader after the rollout")
	waitAnswer(ctx, t, client, last.Identity, time.Now())
	time.Sleep(2 * time.Second) // calls after the rollout
	calls := client.calls(ctx, t, began)
	s := statsOf(calls)
	log := holders.log()
	var b strings.Builder
	for _, h := range log {
		fmt.Fprintf(&b, "  +%-8v %s\n", h.at.Sub(began).Round(time.Millisecond), h.holder)
	}
	var failed strings.Builder
	for _, c := range calls {
		if !c.ok {
			fmt.Fprintf(&failed, "  +%-8v %s\n", c.at.Sub(began).Round(time.Millisecond), c.answer)
		}
	}
	t.Logf("during the rollout: %d calls, %d failed, longest gap %v; answered by %v; the Lease's holders:\n%sthe failed calls:\n%s",
		s.calls, s.failed, s.longestGap.Round(time.Millisecond), s.answered, b.String(), failed.String())

	// One leader at a time, as the traffic sees it: each replica answers
	// in one run, and only replicas that held the Lease, in its order.
	seen := map[string]bool{}
	for _, id := range s.answered {
		assert.False(t, seen[id], "%s answered again after a later leader did: %v", id, s.answered)
		seen[id] = true
	}
	var order []string
	for _, h := range log {
		if h.holder != "" && (len(order) == 0 || order[len(order)-1] != h.holder) {
			order = append(order, h.holder)
		}
	}
	at := 0
	for _, id := range s.answered {
		i := slices.Index(order[at:], id)
		require.GreaterOrEqual(t, i, 0, "%s answered, out of the Lease's order %v", id, order)
		at += i
	}
	assert.Less(t, s.longestGap, plannedGap, "a handover during the rollout waited longer than a planned handover")
	assert.Equal(t, last.Identity, s.answered[len(s.answered)-1], "the last to answer")
	for _, p := range a.pods(ctx, t, env) {
		assert.Equal(t, "fastover-example", kindOf(p), "pod %s after the rollout", p.Name)
	}
}

// fromField is an environment variable from the downward API.
func fromField(name, path string) corev1.EnvVar {
	return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}}
}

// kindOf names a pod's program by its image: fastover-example or
// leaderbaseline (client-go's election).
func kindOf(p corev1.Pod) string {
	image := p.Spec.Containers[0].Image
	name := image[strings.LastIndex(image, "/")+1:]
	name, _, _ = strings.Cut(name, "@")
	name, _, _ = strings.Cut(name, ":")
	return name
}

// holderChange is a Lease's holder as a watch saw it change ("" when it
// was released).
type holderChange struct {
	at     time.Time
	holder string
}

// holderWatch records a Lease's holders.
type holderWatch struct {
	mu      sync.Mutex
	changes []holderChange
}

// watchHolders watches the Lease ns/name and records each change of its
// holder, until the test ends.
func watchHolders(ctx context.Context, t *testing.T, env *cluster.Env, ns, name string) *holderWatch {
	t.Helper()
	w := &holderWatch{}
	f := informers.NewSharedInformerFactoryWithOptions(env.Client, 0, informers.WithNamespace(ns),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = "metadata.name=" + name }))
	onLease := func(obj any) {
		l, ok := obj.(*coordinationv1.Lease)
		if !ok {
			return
		}
		holder := ptr.Deref(l.Spec.HolderIdentity, "")
		w.mu.Lock()
		defer w.mu.Unlock()
		if n := len(w.changes); n == 0 || w.changes[n-1].holder != holder {
			w.changes = append(w.changes, holderChange{at: time.Now(), holder: holder})
		}
	}
	_, err := f.Coordination().V1().Leases().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: onLease, UpdateFunc: func(_, obj any) { onLease(obj) },
	})
	require.NoError(t, err)
	runInformers(ctx, t, f)
	return w
}

// log is the holders recorded so far.
func (w *holderWatch) log() []holderChange {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.changes)
}
