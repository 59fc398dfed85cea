package leader

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// podWatch is a standby's watch of the leader's Pod, the one the Lease's
// record names (crash.go): one Pod at a time, by name, started when the
// record names a new one; a second one watches the replica's own Pod
// (leaving.go). Its changes wake the standby. A watch the Role forbids
// turns it off (crash takeover, for the leader's: failover then waits for
// the Lease), with a Warning Event, instead of retrying.
type podWatch struct {
	client kubernetes.Interface
	log    logr.Logger
	wake   func()
	// forbidden is called once, with the API's refusal.
	forbidden func(error)

	mu     sync.Mutex
	off    bool
	target instance // the Pod watched: Namespace, Pod
	pod    *corev1.Pod
	// deleted: the watch reported pod's deletion.
	deleted bool
	stopFn  func()
}

// follow watches the Pod inst names, unless it is watched already.
func (w *podWatch) follow(inst instance) {
	w.mu.Lock()
	if w.off || w.stopFn != nil && w.target.Namespace == inst.Namespace && w.target.Pod == inst.Pod {
		w.mu.Unlock()
		return
	}
	previous := w.stopFn
	w.target, w.pod, w.deleted, w.stopFn = inst, nil, false, nil
	w.mu.Unlock()
	if previous != nil {
		previous()
	}
	ctx, cancel := context.WithCancel(context.Background())
	pods := w.client.CoreV1().Pods(inst.Namespace)
	byName := func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", inst.Pod).String()
	}
	// The API's refusal, seen before the reflector wraps it.
	refused := func(err error) error {
		if apierrors.IsForbidden(err) {
			w.turnOff(err)
		}
		return err
	}
	inf := cache.NewSharedIndexInformer(cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			byName(&o)
			l, err := pods.List(ctx, o)
			return l, refused(err)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			byName(&o)
			wi, err := pods.Watch(ctx, o)
			return wi, refused(err)
		},
	}, w.client), &corev1.Pod{}, 0, cache.Indexers{})
	set := func(obj any, deleted bool) {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		pod, ok := obj.(*corev1.Pod)
		if !ok || pod.Name != inst.Pod {
			return
		}
		w.mu.Lock()
		if ctx.Err() == nil {
			// A deleted Pod keeps the status it had last: the kubelet's
			// final one after a graceful deletion, a running one after a
			// force delete.
			w.pod, w.deleted = pod, deleted
		}
		w.mu.Unlock()
		w.wake()
	}
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { set(obj, false) },
		UpdateFunc: func(_, obj any) { set(obj, false) },
		DeleteFunc: func(obj any) { set(obj, true) },
	})
	_ = inf.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *cache.Reflector, err error) {
		w.log.V(1).Info("the watch of a Pod failed; retrying", "pod", inst.Namespace+"/"+inst.Pod, "reason", err.Error())
	})
	done := make(chan struct{})
	go func() {
		defer close(done)
		inf.RunWithContext(ctx)
	}()
	stop := func() {
		cancel()
		<-done
	}
	w.mu.Lock()
	if w.off || w.target.Namespace != inst.Namespace || w.target.Pod != inst.Pod {
		// Turned off or moved on meanwhile.
		w.mu.Unlock()
		stop()
		return
	}
	w.stopFn = stop
	w.mu.Unlock()
	w.log.V(1).Info("watching a Pod", "pod", inst.Namespace+"/"+inst.Pod)
}

// seed gives the watch the Pod as a read found it, until the watch
// reports it: so that what the read saw counts before the informer's
// first list has come back.
func (w *podWatch) seed(pod *corev1.Pod) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.pod == nil && pod.Namespace == w.target.Namespace && pod.Name == w.target.Pod {
		w.pod = pod
	}
}

// ended reports whether the watched Pod shows inst ended (crash.go).
func (w *podWatch) ended(inst instance) (string, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.off {
		return "", false
	}
	return ended(inst, w.pod)
}

// leaving reports why the watched Pod shows that self's Pod is on its way
// out (leaving.go), if it does.
func (w *podWatch) leaving(self instance) (string, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	p := w.pod
	switch {
	case w.off || p == nil:
		return "", false
	case p.UID != self.UID:
		return fmt.Sprintf("its Pod %s/%s was replaced (uid %s, this replica's %s)", p.Namespace, p.Name, p.UID, self.UID), true
	case w.deleted:
		return fmt.Sprintf("its Pod %s/%s was deleted", p.Namespace, p.Name), true
	case p.DeletionTimestamp != nil:
		return fmt.Sprintf("its Pod %s/%s is Terminating (deleted, to end by %s)", p.Namespace, p.Name, p.DeletionTimestamp.UTC().Format(time.RFC3339)), true
	}
	return "", false
}

// turnOff stops the watch for good, and reports why once.
func (w *podWatch) turnOff(err error) {
	w.mu.Lock()
	if w.off {
		w.mu.Unlock()
		return
	}
	w.off = true
	stop := w.stopFn
	w.stopFn, w.pod = nil, nil
	w.mu.Unlock()
	if stop != nil {
		// Not from the informer's own goroutine, which stop waits for.
		go stop()
	}
	w.forbidden(err)
}

// stop ends the watch, if any. Never with mu held: stopping waits for the
// informer's handlers, which take it.
func (w *podWatch) stop() {
	w.mu.Lock()
	stop := w.stopFn
	w.stopFn, w.pod = nil, nil
	w.mu.Unlock()
	if stop != nil {
		stop()
	}
}
