package demo

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/fastover/fastover/internal/cluster"
	"github.com/fastover/fastover/toleration"
)

// waitRunning waits until app has a running pod (on a node other than
// avoid) and returns it.
func (d *demo) waitRunning(ctx context.Context, ns, app, avoid string, timeout time.Duration) (*corev1.Pod, error) {
	deadline := time.Now().Add(timeout)
	for {
		pods, err := cluster.PodsOf(ctx, d.client, ns, app)
		if err != nil {
			return nil, fmt.Errorf("list pods of %s/%s: %w", ns, app, err)
		}
		if p := cluster.RunningPod(pods, avoid); p != nil {
			return p, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("no running pod of %s/%s after %v: %s", ns, app, timeout, describePods(pods))
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// podState is a pod for a status line: "app-7d9f on node-a (Running)".
func podState(p *corev1.Pod) string {
	state := string(p.Status.Phase)
	switch {
	case p.DeletionTimestamp != nil:
		state = "Terminating"
	case p.Spec.NodeName == "":
		return p.Name + " (Pending, unscheduled)"
	case p.Status.Phase == corev1.PodRunning && !cluster.PodReady(p):
		state = "Running, NotReady"
	}
	return fmt.Sprintf("%s on %s (%s)", p.Name, p.Spec.NodeName, state)
}

// briefPods is pods for a status line: "node-a Terminating, node-b Running".
func briefPods(pods []corev1.Pod) string {
	if len(pods) == 0 {
		return "none"
	}
	parts := make([]string, 0, len(pods))
	for i := range pods {
		p := &pods[i]
		state := string(p.Status.Phase)
		switch {
		case p.DeletionTimestamp != nil:
			state = "Terminating"
		case p.Status.Phase == corev1.PodRunning && !cluster.PodReady(p):
			state = "Running, NotReady"
		}
		node := p.Spec.NodeName
		if node == "" {
			node = "unscheduled"
		}
		parts = append(parts, node+" "+state)
	}
	return strings.Join(parts, ", ")
}

func describePods(pods []corev1.Pod) string {
	if len(pods) == 0 {
		return "no pods"
	}
	parts := make([]string, 0, len(pods))
	for i := range pods {
		parts = append(parts, podState(&pods[i]))
	}
	return strings.Join(parts, ", ")
}

// unreachableToleration is the pod's effective toleration of the
// unreachable taint, as the taint-eviction controller picks it and the
// webhook decides on it.
func unreachableToleration(p *corev1.Pod) toleration.Effective {
	return toleration.DefaultRule().Effective(p.Spec.Tolerations, corev1.TaintNodeUnreachable)
}

// tolerationSeconds is how long the pod tolerates the unreachable taint;
// ok is false if it does not, or forever.
func tolerationSeconds(p *corev1.Pod) (secs int64, ok bool) {
	e := unreachableToleration(p)
	if !e.Tolerated || e.Seconds == nil {
		return 0, false
	}
	return *e.Seconds, true
}

func tolerationString(p *corev1.Pod) string {
	e := unreachableToleration(p)
	switch {
	case !e.Tolerated:
		return "no time (no toleration)"
	case e.Seconds == nil:
		return "ever"
	default:
		return fmt.Sprintf("%ds", *e.Seconds)
	}
}

// leaseWatch follows a Lease: its holder, when it was last renewed, and
// every change of holder with when it was seen.
type leaseWatch struct {
	mu      sync.Mutex
	holder  string
	renewed time.Time
	dur     time.Duration
	changes []holderChange
}

type holderChange struct {
	At     time.Time
	Holder string // "" when released
}

func watchLease(ctx context.Context, c kubernetes.Interface, ns, name string) (*leaseWatch, error) {
	w, err := c.CoordinationV1().Leases(ns).Watch(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String(),
	})
	if err != nil {
		return nil, err
	}
	lw := &leaseWatch{}
	first := make(chan struct{})
	go func() {
		defer w.Stop()
		once := sync.OnceFunc(func() { close(first) })
		defer once()
		for ev := range w.ResultChan() {
			l, ok := ev.Object.(*coordinationv1.Lease)
			if !ok || ev.Type == watch.Deleted {
				continue
			}
			lw.observe(l)
			once()
		}
	}()
	// The watch starts with the Lease as it is, if there is one.
	if _, err := c.CoordinationV1().Leases(ns).Get(ctx, name, metav1.GetOptions{}); apierrors.IsNotFound(err) {
		return lw, nil
	}
	select {
	case <-first:
	case <-time.After(5 * time.Second):
	case <-ctx.Done():
	}
	return lw, nil
}

func (lw *leaseWatch) observe(l *coordinationv1.Lease) {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	var holder string
	if l.Spec.HolderIdentity != nil {
		holder = *l.Spec.HolderIdentity
	}
	if l.Spec.RenewTime != nil {
		lw.renewed = l.Spec.RenewTime.Time
	}
	if l.Spec.LeaseDurationSeconds != nil {
		lw.dur = time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second
	}
	if holder != lw.holder {
		lw.changes = append(lw.changes, holderChange{At: time.Now(), Holder: holder})
	}
	lw.holder = holder
}

// state returns the holder and when its Lease expires.
func (lw *leaseWatch) state() (holder string, expires time.Time) {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	return lw.holder, lw.renewed.Add(lw.dur)
}

// since returns the changes of holder seen after t.
func (lw *leaseWatch) since(t time.Time) []holderChange {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	var out []holderChange
	for _, c := range lw.changes {
		if c.At.After(t) {
			out = append(out, c)
		}
	}
	return out
}
