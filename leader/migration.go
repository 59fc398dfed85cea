// Migration: a Service that had a selector (the endpointslice controller's
// endpoints) becomes the leader's (RemoveSelector).

package leader

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// ErrServiceHasSelector is returned (wrapped) while the Service still has a
// selector and RemoveSelector is off.
var ErrServiceHasSelector = errors.New("the Service has a selector")

// migrate moves a Service that still has a selector to the leader's
// endpoints, where RemoveSelector allows it: the selector removed (and, with
// SkipEndpoints, the endpoints controller's Endpoints object deleted), and
// true returned. Without RemoveSelector it refuses, with a Warning Event on
// the Service. A Service without selector is left as it is.
func (p *publisher) migrate(ctx context.Context, svc *corev1.Service) (bool, error) {
	if len(svc.Spec.Selector) == 0 {
		return false, nil
	}
	if !p.ep.RemoveSelector {
		msg := fmt.Sprintf("Service %s/%s has a selector (%s): its endpoints are managed by the endpointslice controller, so fastover cannot publish the leader as its only endpoint. Remove the selector (kubectl -n %s patch service %s --type=json -p '[{\"op\":\"remove\",\"path\":\"/spec/selector\"}]') or let the leader do it (RemoveSelector, --remove-selector in the example).",
			p.cfg.Namespace, p.ep.Service, metav1.FormatLabelSelector(&metav1.LabelSelector{MatchLabels: svc.Spec.Selector}), p.cfg.Namespace, p.ep.Service)
		if p.cfg.EventRecorder != nil {
			p.cfg.EventRecorder.Event(svc, corev1.EventTypeWarning, "ServiceHasSelector", msg)
		}
		return false, fmt.Errorf("%w: %s", ErrServiceHasSelector, msg)
	}
	if err := p.removeSelector(ctx, svc); err != nil {
		return false, err
	}
	// At once, with SkipEndpoints: the endpoints controller's Endpoints
	// object, left behind, is what the mirroring controller turns into a
	// slice of the old addresses. It reacts to the selector's removal
	// within milliseconds, so that slice usually appears for a moment;
	// with the Endpoints object gone the mirroring controller deletes it
	// again, and so does reconcile. Without SkipEndpoints, the leader's
	// Endpoints object replaces it in reconcile, labelled so that the
	// mirroring controller leaves it alone (and deletes what it mirrored).
	if p.ep.SkipEndpoints {
		if err := p.deleteStaleEndpoints(ctx); err != nil {
			return false, err
		}
	}
	return true, nil
}

// removeSelector is the migration step RemoveSelector allows.
func (p *publisher) removeSelector(ctx context.Context, svc *corev1.Service) error {
	if !p.leading() {
		return errNotLeading
	}
	// The test op makes the patch fail if the Service changed since it was
	// read, instead of removing a selector someone just set.
	patch := fmt.Sprintf(`[{"op":"test","path":"/metadata/resourceVersion","value":%q},{"op":"remove","path":"/spec/selector"}]`, svc.ResourceVersion)
	if _, err := p.cfg.Client.CoreV1().Services(p.cfg.Namespace).Patch(ctx, svc.Name, types.JSONPatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("remove the selector of Service %s/%s: %w", p.cfg.Namespace, svc.Name, err)
	}
	p.log.Info("removed the Service's selector", "service", svc.Name, "selector", svc.Spec.Selector)
	if p.cfg.EventRecorder != nil {
		p.cfg.EventRecorder.Eventf(svc, corev1.EventTypeNormal, "SelectorRemoved",
			"fastover removed the selector %v: the leader publishes itself as the only endpoint", svc.Spec.Selector)
	}
	return nil
}

// deleteStaleEndpoints deletes the Service's Endpoints object, left by the
// endpoints controller from selector days: for a Service without selector,
// the mirroring controller would turn it into an EndpointSlice again.
func (p *publisher) deleteStaleEndpoints(ctx context.Context) error {
	if !p.leading() {
		return errNotLeading
	}
	err := p.cfg.Client.CoreV1().Endpoints(p.cfg.Namespace).Delete(ctx, p.ep.Service, metav1.DeleteOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("delete stale Endpoints %s: %w", p.ep.Service, err)
	}
	p.log.Info("deleted the Service's stale Endpoints object", "service", p.ep.Service)
	return nil
}
