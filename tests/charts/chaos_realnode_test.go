package charts_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/fastover/fastover/internal/acting"
	"github.com/fastover/fastover/internal/cluster"
)

// A chaos fault: one of the crash kinds, or a fault that leaves the
// leader's process alive (frozen, or on a node cut off), where the Lease
// must decide.
const (
	faultFreeze = "frozen"
	faultCut    = "node cut off"
)

// TestChaosOnRealNodes mixes, on the example's leader on three real nodes
// (15s/10s/2s, crash takeover on), crashes (SIGKILL, OOM kill, panic) with
// a frozen process (SIGSTOP, SIGCONT after the takeover) and a node cut
// off (its link down, then up), FASTOVER_CHAOS_ROUNDS rounds (1 by
// default). All the while the replicas log each action to one acting log
// on a hostPath they share, and the test watches the Lease and the
// Service's EndpointSlices. It checks that
//   - no two replicas ever acted at once (the acting log);
//   - the Service never named two replicas at once;
//   - after a crash that its kubelet reported in time, a standby took over
//     before the Lease expired (a kubelet that reports late, its API
//     connection lost, leaves it to the Lease: logged and counted), and
//     after a freeze or a cut, where the leader's process was alive, never
//     before it did: the new term began at least a lease duration after the
//     old holder's last renewal.
func TestChaosOnRealNodes(t *testing.T) {
	rounds := countFromEnv(t, "FASTOVER_CHAOS_ROUNDS")
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute+time.Duration(rounds)*4*time.Minute)
	defer cancel()
	// No Pod Security labels: the replicas share a hostPath.
	env, realNodes, _ := crashableExample(ctx, t, nil)
	logPath := shareActingLog(ctx, t, env)
	history := watchHistory(ctx, t, env)
	const lease = 15 * time.Second

	kinds := []string{"SIGKILL", faultFreeze, "OOMKilled", faultCut, "panic"}
	counts := map[string]int{}
	took := map[string][]time.Duration{}
	late := 0 // crashes the kubelet reported too late to act on
	for round := range rounds {
		for _, kind := range kinds {
			name := fmt.Sprintf("round %d, %s", round+1, kind)
			exampleApp.waitReplicas(ctx, t, env, 3, "")
			old := waitPublished(ctx, t, env, "")
			node := realNodes[old.Spec.NodeName]
			running, ok := runningContainer(old.Pod)
			require.True(t, ok, "%s: the leader's container does not run", name)
			renewed := history.lastRenewal(old.Identity)
			t0 := time.Now()
			switch kind {
			case faultFreeze:
				require.NoError(t, node.SignalContainer(ctx, running.ContainerID, syscall.SIGSTOP), name)
			case faultCut:
				require.NoError(t, node.Partition(true), name)
			default:
				i := slices.IndexFunc(crashKinds, func(k crashKind) bool { return k.name == kind })
				require.NoError(t, node.SignalContainer(ctx, running.ContainerID, crashKinds[i].signal), name)
			}
			next := history.waitHolderOtherThan(ctx, t, old.Identity, 2*time.Minute)
			d := next.seen.Sub(t0)
			took[kind] = append(took[kind], d)
			counts[kind]++
			early := next.acquired.Before(renewed.Add(lease))
			switch kind {
			case faultFreeze, faultCut:
				assert.False(t, early, "%s: %s took the Lease at %s, before it expired (last renewal %s): the leader's process was alive",
					name, next.holder, next.acquired.Format(time.StampMilli), renewed.Format(time.StampMilli))
			default:
				// Crash takeover acts on the kubelet's report: a node
				// whose kubelet reports the end late (its API
				// connection lost) is replaced at the Lease, as a
				// lost node is.
				reported := history.ends.wait(ctx, t, running.ContainerID)
				if reported.Before(renewed.Add(lease - 2*time.Second)) {
					assert.True(t, early, "%s: the kubelet reported the end %v after the crash, yet no takeover before the Lease expired", name, reported.Sub(t0).Round(time.Millisecond))
				} else {
					late++
					t.Logf("%s: the kubelet reported the end only %v after the crash, near the Lease's expiry: the Lease decided", name, reported.Sub(t0).Round(time.Millisecond))
				}
			}
			t.Logf("%s: %s (%s) → %s (term %d) %v later", name, old.Name, old.Spec.NodeName, next.holder, next.term, d.Round(time.Millisecond))
			switch kind {
			case faultFreeze:
				require.NoError(t, node.SignalContainer(ctx, running.ContainerID, syscall.SIGCONT), name)
			case faultCut:
				require.NoError(t, node.Partition(false), name)
			}
			// Every kind ends the old process (a crash, or a Lease
			// found lost on waking or on the heal): the kubelet
			// restarts it, and the pod is then replaced.
			replaceCrashed(ctx, t, env, exampleApp, old.Name, running.RestartCount)
		}
	}
	time.Sleep(2 * time.Second)

	f, err := os.Open(logPath)
	require.NoError(t, err)
	defer func() { _ = f.Close() }()
	terms, err := acting.Parse(f)
	require.NoError(t, err)
	overlaps, two := acting.Overlaps(terms), history.published()
	for _, o := range overlaps {
		t.Error(o)
	}
	for _, p := range two {
		t.Errorf("two replicas published at once at %s: %v", p.at.Format(time.StampMilli), p.addrs)
	}
	acts := 0
	for _, tm := range terms {
		acts += tm.Acts
	}
	var b strings.Builder
	for _, k := range kinds {
		ds := slices.Clone(took[k])
		slices.Sort(ds)
		fmt.Fprintf(&b, "\n  %-12s %d, new holder after %v–%v", k, counts[k], ds[0].Round(10*time.Millisecond), ds[len(ds)-1].Round(10*time.Millisecond))
	}
	t.Logf("chaos on real nodes: %d events, %d terms, %d actions logged, %d changes of the Service's slices; %d overlapping terms, %d moments with two replicas published; %d crash(es) reported by the kubelet too late to act on:%s",
		len(kinds)*rounds, len(terms), acts, history.sliceChanges(), len(overlaps), len(two), late, b.String())
}

// shareActingLog gives the example's Deployment a hostPath that its
// replicas share and --acting-log on it (the machine's wall clock dates
// every replica's lines alike), waits for the rollout, and returns the
// log's path on this machine.
func shareActingLog(ctx context.Context, t *testing.T, env *cluster.Env) string {
	t.Helper()
	dir := filepath.Join(env.Dir, "acting")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	require.NoError(t, os.Chmod(dir, 0o777)) // the replicas run as 65532
	deployments := env.Client.AppsV1().Deployments(exampleNS)
	d, err := deployments.Get(ctx, "fastover-example", metav1.GetOptions{})
	require.NoError(t, err)
	spec := &d.Spec.Template.Spec
	spec.Volumes = append(spec.Volumes, corev1.Volume{Name: "acting", VolumeSource: corev1.VolumeSource{
		HostPath: &corev1.HostPathVolumeSource{Path: dir, Type: ptr.To(corev1.HostPathDirectory)}}})
	c := &spec.Containers[0]
	c.Args = append(c.Args, "--acting-log=/acting/acting.log")
	c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "acting", MountPath: "/acting"})
	d, err = deployments.Update(ctx, d, metav1.UpdateOptions{})
	require.NoError(t, err)
	require.NoError(t, waitRollout(ctx, env, exampleNS, "fastover-example", d.Generation, 3*time.Minute), "the rollout with the acting log")
	return filepath.Join(dir, "acting.log")
}

// leaseSeen is a version of the example's Lease, as the test's watch saw
// it.
type leaseSeen struct {
	seen     time.Time
	holder   string
	term     int32
	acquired time.Time
	renewed  time.Time
}

// publication is a moment the Service's EndpointSlices named more than
// one address.
type publication struct {
	at    time.Time
	addrs []string
}

// history records every version of the Lease, every state of the
// Service's EndpointSlices that named more than one address, and (ends)
// when the kubelet reported each container ended.
type history struct {
	mu      sync.Mutex
	leases  []leaseSeen
	changes int
	two     []publication
	ends    *endWatch
}

func watchHistory(ctx context.Context, t *testing.T, env *cluster.Env) *history {
	t.Helper()
	h := &history{ends: watchEnds(ctx, t, env, exampleApp)}
	leases := informers.NewSharedInformerFactoryWithOptions(env.Client, 0, informers.WithNamespace(exampleNS),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", "fastover-example").String()
		}))
	onLease := func(obj any) {
		l, ok := obj.(*coordinationv1.Lease)
		if !ok {
			return
		}
		v := leaseSeen{seen: time.Now()}
		if l.Spec.HolderIdentity != nil {
			v.holder = *l.Spec.HolderIdentity
		}
		if l.Spec.LeaseTransitions != nil {
			v.term = *l.Spec.LeaseTransitions
		}
		if l.Spec.AcquireTime != nil {
			v.acquired = l.Spec.AcquireTime.Time
		}
		if l.Spec.RenewTime != nil {
			v.renewed = l.Spec.RenewTime.Time
		}
		h.mu.Lock()
		h.leases = append(h.leases, v)
		h.mu.Unlock()
	}
	_, err := leases.Coordination().V1().Leases().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: onLease, UpdateFunc: func(_, obj any) { onLease(obj) },
	})
	require.NoError(t, err)
	sliceFactory := informers.NewSharedInformerFactoryWithOptions(env.Client, 0, informers.WithNamespace(exampleNS),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.LabelSelector = labels.SelectorFromSet(labels.Set{discoveryv1.LabelServiceName: "fastover-example"}).String()
		}))
	sliceInformer := sliceFactory.Discovery().V1().EndpointSlices().Informer()
	onSlice := func(any) {
		addrs := map[string]bool{}
		for _, obj := range sliceInformer.GetStore().List() {
			for _, ep := range obj.(*discoveryv1.EndpointSlice).Endpoints {
				for _, a := range ep.Addresses {
					addrs[a] = true
				}
			}
		}
		h.mu.Lock()
		defer h.mu.Unlock()
		h.changes++
		if len(addrs) > 1 {
			var list []string
			for a := range addrs {
				list = append(list, a)
			}
			h.two = append(h.two, publication{at: time.Now(), addrs: list})
		}
	}
	_, err = sliceInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: onSlice, UpdateFunc: func(_, obj any) { onSlice(obj) }, DeleteFunc: onSlice,
	})
	require.NoError(t, err)
	wctx, stop := context.WithCancel(ctx)
	t.Cleanup(func() {
		stop()
		leases.Shutdown()
		sliceFactory.Shutdown()
	})
	for _, f := range []informers.SharedInformerFactory{leases, sliceFactory} {
		f.Start(wctx.Done())
		f.WaitForCacheSync(wctx.Done())
	}
	return h
}

// lastRenewal is the last renewal the watch saw of holder's term.
func (h *history) lastRenewal(holder string) time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	for i := len(h.leases) - 1; i >= 0; i-- {
		if h.leases[i].holder == holder {
			return h.leases[i].renewed
		}
	}
	return time.Time{}
}

// waitHolderOtherThan waits for a version of the Lease held by another
// than holder (not released) and returns the first.
func (h *history) waitHolderOtherThan(ctx context.Context, t *testing.T, holder string, timeout time.Duration) leaseSeen {
	t.Helper()
	var found leaseSeen
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		h.mu.Lock()
		defer h.mu.Unlock()
		for i := len(h.leases) - 1; i >= 0 && h.leases[i].holder != holder; i-- {
			if h.leases[i].holder != "" {
				found = h.leases[i]
			}
		}
		return found.holder != "", nil
	}), "no replica took the Lease from %s", holder)
	return found
}

func (h *history) published() []publication {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.two)
}

func (h *history) sliceChanges() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.changes
}
