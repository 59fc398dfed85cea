package main

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
)

// The label of the ConfigMaps the controller caches, and the annotations
// of its stamp.
const (
	LabelCache          = "example.fastover.io/cache"
	AnnotationStampedBy = "example.fastover.io/stamped-by"
	AnnotationStampedAt = "example.fastover.io/stamped-at"
	AnnotationCached    = "example.fastover.io/cached"
)

// controller is a client-go controller in the usual shape: a shared
// informer over the ConfigMaps labelled LabelCache in one namespace, event
// handlers that queue their keys, workers that process the queue. It is
// built, informers and handlers included, before the election starts;
// when the informers start is the difference between a warm and a cold
// standby.
type controller struct {
	client   kubernetes.Interface
	ns       string
	identity string
	stamp    string // the ConfigMap the leader stamps first
	factory  informers.SharedInformerFactory
	lister   corelisters.ConfigMapLister
	queue    workqueue.TypedRateLimitingInterface[string]
	now      func() time.Time
}

func newController(client kubernetes.Interface, ns, identity, stamp string) (*controller, error) {
	c := &controller{
		client: client, ns: ns, identity: identity, stamp: stamp, now: time.Now,
		factory: informers.NewSharedInformerFactoryWithOptions(client, 0,
			informers.WithNamespace(ns),
			informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = LabelCache + "=true" })),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "configmaps"}),
	}
	cms := c.factory.Core().V1().ConfigMaps()
	c.lister = cms.Lister()
	enqueue := func(obj any) {
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			c.queue.Add(key)
		}
	}
	_, err := cms.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
		DeleteFunc: enqueue,
	})
	return c, err
}

// startInformers starts the informers with ctx and waits for their caches.
func (c *controller) startInformers(ctx context.Context) error {
	c.factory.Start(ctx.Done())
	for typ, ok := range c.factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("the cache of %v did not sync: %w", typ, context.Cause(ctx))
		}
	}
	return nil
}

// lead is the leader's work: its first unit is the stamp, which needs the
// synced cache; then the workers process the queue until ctx ends.
func (c *controller) lead(ctx context.Context, workers int) error {
	defer c.queue.ShutDown()
	if err := c.stampNow(ctx); err != nil {
		return err
	}
	for range workers {
		go func() {
			for c.processNext(ctx) {
			}
		}()
	}
	<-ctx.Done()
	return nil
}

// stampNow writes on the stamp ConfigMap who leads, since when, and how
// many ConfigMaps its cache holds: the new leader's first unit of work.
func (c *controller) stampNow(ctx context.Context) error {
	at, cached := c.now(), c.cachedLen()
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{
		AnnotationStampedBy: c.identity,
		AnnotationStampedAt: at.UTC().Format(time.RFC3339Nano),
		AnnotationCached:    fmt.Sprint(cached),
	}}})
	_, err := c.client.CoreV1().ConfigMaps(c.ns).Patch(ctx, c.stamp, types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		return fmt.Errorf("stamping ConfigMap %s/%s: %w", c.ns, c.stamp, err)
	}
	klog.InfoS("leading, cache synced", "cached", cached, "stamp", c.stamp)
	return nil
}

// processNext handles one key. The example's reconcile only reads the
// object from the cache; a real controller computes and writes here.
func (c *controller) processNext(ctx context.Context) bool {
	key, shutdown := c.queue.Get()
	if shutdown {
		return false
	}
	defer c.queue.Done(key)
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err == nil {
		_, err = c.lister.ConfigMaps(ns).Get(name)
	}
	if err != nil && ctx.Err() == nil {
		klog.V(4).InfoS("gone from the cache", "key", key, "err", err)
	}
	c.queue.Forget(key)
	return true
}

// cachedLen is the number of ConfigMaps the cache holds (a list of the
// informer's indexer, which cannot fail).
func (c *controller) cachedLen() int {
	all, _ := c.lister.List(labels.Everything())
	return len(all)
}
