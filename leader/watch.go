// The informers that feed an Elector: the Lease's and the Service's caches.

package leader

import (
	coordinationv1 "k8s.io/api/coordination/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
)

// watchLease feeds the Lease's changes to the Lease state.
func (e *Elector) watchLease() error {
	leases := e.factory(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", e.cfg.LeaseName).String()
	})
	onLease := func(obj any) {
		if l, ok := obj.(*coordinationv1.Lease); ok {
			e.lease.observeLease(l)
		}
	}
	_, err := leases.Coordination().V1().Leases().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    onLease,
		UpdateFunc: func(_, obj any) { onLease(obj) },
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			l, _ := obj.(*coordinationv1.Lease)
			e.lease.forget(l)
		},
	})
	return err
}

// watchService builds the publisher, over caches of the Service and its
// slices whose changes wake it.
func (e *Elector) watchService() error {
	service := e.cfg.Endpoint.Service
	services := e.factory(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", service).String()
	})
	slices := e.factory(func(o *metav1.ListOptions) {
		o.LabelSelector = labelsForService(service).String()
	})
	kick := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { wake(e.trigger) },
		UpdateFunc: func(any, any) { wake(e.trigger) },
		DeleteFunc: func(any) { wake(e.trigger) },
	}
	svcInformer := services.Core().V1().Services()
	sliceInformer := slices.Discovery().V1().EndpointSlices()
	watched := []cache.SharedIndexInformer{svcInformer.Informer(), sliceInformer.Informer()}
	var endpoints corelisters.EndpointsNamespaceLister
	if !e.cfg.Endpoint.SkipEndpoints {
		// The same name as the Service's: the same field selector.
		epInformer := services.Core().V1().Endpoints()
		endpoints = epInformer.Lister().Endpoints(e.cfg.Namespace)
		watched = append(watched, epInformer.Informer())
	}
	for _, inf := range watched {
		if _, err := inf.AddEventHandler(kick); err != nil {
			return err
		}
	}
	e.pub = &publisher{
		endpoints:  endpoints,
		cfg:        &e.cfg,
		ep:         e.cfg.Endpoint,
		log:        e.lease.log.WithValues("service", service),
		leading:    e.lease.leading,
		term:       e.lease.currentTerm,
		handedOver: e.lease.handedOverTerm,
		services:   svcInformer.Lister().Services(e.cfg.Namespace),
		slices:     sliceInformer.Lister().EndpointSlices(e.cfg.Namespace),
		trigger:    e.trigger,
	}
	return nil
}

func (e *Elector) factory(tweak func(*metav1.ListOptions)) informers.SharedInformerFactory {
	f := informers.NewSharedInformerFactoryWithOptions(e.cfg.Client, 0,
		informers.WithNamespace(e.cfg.Namespace), informers.WithTweakListOptions(tweak))
	e.factories = append(e.factories, f)
	return f
}

func labelsForService(service string) labels.Selector {
	return labels.SelectorFromSet(labels.Set{discoveryv1.LabelServiceName: service})
}
