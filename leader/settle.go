package leader

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/resourceversion"
)

// The publisher reads its own objects from the informers' caches, which
// show its writes a moment after the API answers them. A write that got
// no answer (cancelled by the stop that ends the term, or timed out) may
// all the same have been applied: until the caches show it, withdraw and
// handOff would not know that the slice names this replica, and would
// leave a stopped leader published. settle closes that gap before either
// reads the caches.

// noteUnanswered records a write of the publisher that failed with err,
// if the API may have applied it all the same (outcomeUnknown).
func (p *publisher) noteUnanswered(err error) {
	if outcomeUnknown(err) {
		p.unanswered.Store(true)
	}
}

// settle, if a write of this term got no answer, reads the leader's
// objects from the API and waits, until ctx ends, for the caches to hold
// them at those versions at least: what the API applied, withdraw and
// handOff then see.
func (p *publisher) settle(ctx context.Context) error {
	if !p.unanswered.Load() {
		return nil
	}
	slices := p.cfg.Client.DiscoveryV1().EndpointSlices(p.cfg.Namespace)
	for _, addr := range p.leaderAddresses() {
		name := p.sliceNameFor(addressType(addr))
		if err := p.awaitCache(ctx, "EndpointSlice", name,
			func(ctx context.Context) (metav1.Object, error) { return slices.Get(ctx, name, metav1.GetOptions{}) },
			func() (metav1.Object, error) { return p.slices.Get(name) }); err != nil {
			return err
		}
	}
	if p.endpoints != nil {
		name, endpoints := p.ep.Service, p.cfg.Client.CoreV1().Endpoints(p.cfg.Namespace)
		if err := p.awaitCache(ctx, "Endpoints", name,
			func(ctx context.Context) (metav1.Object, error) { return endpoints.Get(ctx, name, metav1.GetOptions{}) },
			func() (metav1.Object, error) { return p.endpoints.Get(name) }); err != nil {
			return err
		}
	}
	p.unanswered.Store(false)
	return nil
}

// awaitCache reads one of the leader's objects from the API (fromAPI)
// and waits until the cache (fromCache) holds it at that version or a
// newer one. An object the API does not have needs no wait: the cache
// holds it at most as a version the API has deleted, which withdraw's
// preconditions refuse harmlessly.
func (p *publisher) awaitCache(ctx context.Context, kind, name string,
	fromAPI func(context.Context) (metav1.Object, error), fromCache func() (metav1.Object, error)) error {
	want, err := fromAPI(ctx)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read %s %s: %w", kind, name, err)
	}
	clk := p.cfg.Clock
	for {
		if have, err := fromCache(); err == nil && caughtUp(have, want) {
			return nil
		}
		tick := clk.NewTimer(handOffPoll)
		select {
		case <-ctx.Done():
			tick.Stop()
			return fmt.Errorf("the cache did not show %s %s at version %s: %w", kind, name, want.GetResourceVersion(), ctx.Err())
		case <-tick.C():
		}
	}
}

// caughtUp reports whether have is want's version of the object or a
// later one (versions that cannot be ordered: the same one).
func caughtUp(have, want metav1.Object) bool {
	c, err := resourceversion.CompareResourceVersion(have.GetResourceVersion(), want.GetResourceVersion())
	if err != nil {
		return have.GetResourceVersion() == want.GetResourceVersion()
	}
	return c >= 0
}
