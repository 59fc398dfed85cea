// The endpoint's part of a stop: hand-off to the successor, withdrawal.

package leader

import (
	"context"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// handOffPoll is how often handOff looks for the successor's endpoint in
// the caches.
const handOffPoll = 10 * time.Millisecond

// handOff is the endpoint's part of a planned stop, once this replica has
// released the Lease: it leaves its slice and Endpoints object to the
// successor, which replaces this replica's address with its own in one
// write each, and waits up to bound for that; whatever still names this
// replica then (no standby took over) is withdrawn, so that the Service
// is not left with the address of a stopped replica.
//
// Left to the successor, the Service changes once, from this replica to
// the next. A withdrawal first would change it twice, through a Service
// without endpoints, which clients that batch changes make last: kube-proxy
// waits --iptables-min-sync-period (1 s by default) between two syncs of
// its rules, and kube-apiserver marks an APIService whose Service has no
// endpoint unavailable until it has checked the next one.
func (p *publisher) handOff(ctx context.Context, bound time.Duration) error {
	p.released.Store(true)
	if err := p.settle(ctx); err != nil {
		return err
	}
	clk := p.cfg.Clock
	deadline := clk.Now().Add(bound)
	for p.namesMe() && clk.Now().Before(deadline) {
		tick := clk.NewTimer(handOffPoll)
		select {
		case <-ctx.Done():
			// The hand-over's time (RenewDeadline) is up: a withdrawal
			// now could not be bounded; the next leader takes the
			// endpoint over.
			tick.Stop()
			return fmt.Errorf("no successor took the endpoint over before the hand-over's deadline; left in place: %w", ctx.Err())
		case <-tick.C():
		}
	}
	if !p.namesMe() {
		p.log.V(1).Info("the successor took the endpoint over")
		return nil
	}
	p.log.Info("no successor took the endpoint over; withdrawing it", "waited", bound)
	return p.withdraw(ctx)
}

// namesMe reports whether one of the leader's slices or its Endpoints
// object, as the caches have them, still names this replica.
func (p *publisher) namesMe() bool {
	mine := func(o metav1.Object, err error) bool {
		return err == nil && o.GetAnnotations()[AnnotationIdentity] == p.cfg.Identity
	}
	for _, addr := range p.leaderAddresses() {
		if mine(p.slices.Get(p.sliceNameFor(addressType(addr)))) {
			return true
		}
	}
	return p.endpoints != nil && mine(p.endpoints.Get(p.ep.Service))
}

// withdraw deletes the leader's slice and Endpoints object, the versions
// this replica last saw, on a planned stop. It never deletes a newer
// leader's: they are deleted only while this replica leads (or has just
// released the Lease, handOff), only if they name it, and only with the
// UID and resourceVersion it has.
func (p *publisher) withdraw(ctx context.Context) error {
	if err := p.settle(ctx); err != nil {
		return err
	}
	err := p.withdrawSlice(ctx)
	if p.endpoints != nil && !errors.Is(err, errNotLeading) {
		err = errors.Join(err, p.withdrawEndpoints(ctx))
	}
	return err
}

// withdrawSlice deletes the leader's slices, as withdraw.
func (p *publisher) withdrawSlice(ctx context.Context) error {
	var errs []error
	for _, addr := range p.leaderAddresses() {
		err := p.withdrawSliceNamed(ctx, p.sliceNameFor(addressType(addr)))
		if errors.Is(err, errNotLeading) {
			return err
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// withdrawSliceNamed deletes one of the leader's slices, as withdraw.
func (p *publisher) withdrawSliceNamed(ctx context.Context, name string) error {
	have, err := p.slices.Get(name)
	return p.withdrawOwn(ctx, "EndpointSlice", have, err, p.cfg.Client.DiscoveryV1().EndpointSlices(p.cfg.Namespace).Delete)
}

// withdrawEndpoints deletes the leader's Endpoints object, as withdraw.
func (p *publisher) withdrawEndpoints(ctx context.Context) error {
	have, err := p.endpoints.Get(p.ep.Service)
	return p.withdrawOwn(ctx, "Endpoints", have, err, p.cfg.Client.CoreV1().Endpoints(p.cfg.Namespace).Delete)
}

// withdrawOwn deletes have, the cache's copy of one of the leader's
// objects (err: the cache's answer), if it still names this replica, at
// the version seen, and only while the replica still leads.
func (p *publisher) withdrawOwn(ctx context.Context, kind string, have metav1.Object, err error,
	del func(context.Context, string, metav1.DeleteOptions) error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if have.GetAnnotations()[AnnotationIdentity] != p.cfg.Identity {
		return nil
	}
	if !p.leading() && !p.released.Load() {
		return errNotLeading
	}
	uid, version := have.GetUID(), have.GetResourceVersion()
	err = del(ctx, have.GetName(), metav1.DeleteOptions{
		Preconditions: &metav1.Preconditions{UID: &uid, ResourceVersion: &version},
	})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("withdraw %s %s: %w", kind, have.GetName(), err)
	}
	return nil
}
