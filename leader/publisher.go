package leader

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"

	"github.com/fastover/fastover/leader/internal/names"
)

// AnnotationIdentity on the leader's EndpointSlice names the leader.
const AnnotationIdentity = names.AnnotationIdentity

// AnnotationTerm on the leader's EndpointSlice is the leader's term, the
// Lease's transition count (spec.leaseTransitions) when it acquired it, in
// decimal: it grows with every new leader, so a reader can tell a newer
// leader from a stale one (see Elector.Term).
const AnnotationTerm = names.AnnotationTerm

// AnnotationHandOver on the leader's EndpointSlice says how the leader's
// term began: "planned", on a Lease its previous holder released (a
// planned stop: that replica is ending its connections itself), or
// "unplanned", on an expired (or a new) Lease. leader/follow reads it.
const AnnotationHandOver = names.AnnotationHandOver

// publisher makes the leader the only endpoint of the Service: one
// EndpointSlice of its own, no other slice, and an Endpoints object of its
// own for the readers of the Endpoints API (none with SkipEndpoints: then
// no stale one either). Its
// reads come from the informers' caches; its writes use optimistic
// concurrency and happen only while leading() holds.
type publisher struct {
	cfg     *Config
	ep      *EndpointConfig
	log     logr.Logger
	leading func() bool
	term    func() int32 // the term being published
	// handedOver reports whether the term began on a released Lease
	// (AnnotationHandOver); nil: never.
	handedOver func() bool
	services   corelisters.ServiceNamespaceLister
	slices     discoverylisters.EndpointSliceNamespaceLister
	// endpoints reads the Service's Endpoints object; nil with
	// SkipEndpoints.
	endpoints corelisters.EndpointsNamespaceLister
	trigger   chan struct{} // the Service, its slices or its Endpoints changed

	// podPorts are the ports of the leader's own Pod's containers, read
	// once (a Pod's containers cannot change) when a named targetPort
	// needs them; podRead says they were.
	podPorts []corev1.ContainerPort
	podRead  bool

	// released says this replica released the Lease on a planned stop:
	// what it withdraws then, it withdraws as the ex-leader (handOff).
	released atomic.Bool
	// unanswered says a write of this term got no answer and may have
	// been applied (settle.go).
	unanswered atomic.Bool
}

// run keeps the leader the Service's only endpoint for the term: at once
// (once EndpointConfig.Ready returns, if set), then whenever the Service or
// its slices change, and at least every LeaseDuration, until ctx ends or
// the replica no longer leads.
func (p *publisher) run(ctx context.Context, acquired time.Time) {
	clk := p.cfg.Clock
	if p.ep.Ready != nil {
		if err := p.ep.Ready(ctx); err != nil {
			if ctx.Err() == nil {
				p.log.Error(err, "the work did not become ready; the endpoint is not published in this term")
			}
			return
		}
		p.log.Info("the work is ready", "sinceAcquired", clk.Since(acquired).Round(time.Millisecond))
	}
	first := true
	backoff := 50 * time.Millisecond
	for {
		err := p.reconcile(ctx, first)
		wait := p.cfg.LeaseDuration
		switch {
		case err == nil:
			if first {
				took := clk.Since(acquired)
				p.cfg.Metrics.observePublish(took)
				p.log.Info("published the leader as the Service's only endpoint", "address", p.ep.Address, "sinceAcquired", took.Round(time.Microsecond))
				first = false
			}
			backoff = 50 * time.Millisecond
		case errors.Is(err, errNotLeading) || ctx.Err() != nil:
			return
		default:
			p.cfg.Metrics.publishError()
			p.log.Error(err, "could not publish the endpoint; retrying", "in", backoff)
			wait = backoff
			backoff = min(2*backoff, 30*time.Second)
		}
		timer := clk.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-p.trigger:
		case <-timer.C():
		}
		timer.Stop()
	}
}

// errNotLeading stops a reconcile when this replica may no longer write.
var errNotLeading = errors.New("not the leader any more")

// mirroringController is the managed-by value of the slices that the
// endpointslicemirroring controller makes from Endpoints objects.
const mirroringController = "endpointslicemirroring-controller.k8s.io"

// reconcile brings the Service's endpoints to the leader alone: its slice
// written (or already right), every other slice deleted, and, on the
// term's first pass or when a mirrored slice shows one is back, the
// Service's stale Endpoints object deleted.
func (p *publisher) reconcile(ctx context.Context, cleanEndpoints bool) error {
	svc, err := p.services.Get(p.ep.Service)
	if err != nil {
		return fmt.Errorf("service %s/%s: %w", p.cfg.Namespace, p.ep.Service, err)
	}
	migrated, err := p.migrate(ctx, svc)
	if err != nil {
		return err
	}
	if migrated {
		cleanEndpoints = false
	}

	addrs, err := p.checkFamily(svc)
	if err != nil {
		return err
	}
	if err := p.resolveNamedPorts(ctx, svc); err != nil {
		return err
	}
	// One slice per family the Service serves, as the endpointslice
	// controller writes them; the Endpoints object has the first.
	wanted := map[string]bool{}
	var first *discoveryv1.EndpointSlice
	for _, addr := range addrs {
		want := p.desiredSliceFor(svc, addr)
		if err := p.writeSlice(ctx, want); err != nil {
			return err
		}
		wanted[want.Name] = true
		if first == nil {
			first = want
		}
	}
	if !p.ep.SkipEndpoints {
		if err := p.writeEndpoints(ctx, p.desiredEndpoints(svc, first)); err != nil {
			return err
		}
	}

	// Every other slice of the Service goes: the endpointslice
	// controller's leftovers, the mirroring controller's, anything else.
	others, err := p.slices.List(labelsForService(p.ep.Service))
	if err != nil {
		return err
	}
	mirrored := false
	for _, s := range others {
		if wanted[s.Name] {
			continue
		}
		mirrored = mirrored || s.Labels[discoveryv1.LabelManagedBy] == mirroringController
		if !p.leading() {
			return errNotLeading
		}
		err := p.cfg.Client.DiscoveryV1().EndpointSlices(p.cfg.Namespace).Delete(ctx, s.Name, metav1.DeleteOptions{
			Preconditions: &metav1.Preconditions{UID: &s.UID},
		})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return fmt.Errorf("delete stale EndpointSlice %s: %w", s.Name, err)
		}
		p.log.Info("deleted a stale EndpointSlice", "slice", s.Name, "managedBy", s.Labels[discoveryv1.LabelManagedBy])
	}

	// The mirroring controller mirrors an Endpoints object: where it did,
	// that object goes too, or the mirrored slice would come back. (Not
	// the leader's own, which the mirroring controller skips.)
	if p.ep.SkipEndpoints && (cleanEndpoints || mirrored) {
		if err := p.deleteStaleEndpoints(ctx); err != nil {
			return err
		}
	}
	return nil
}
