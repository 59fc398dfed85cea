// The leader's Endpoints object, for the readers of the Endpoints API.

package leader

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// LabelSkipMirror on the leader's Endpoints object tells the
// endpointslice mirroring controller to leave it alone: the leader writes
// its EndpointSlice itself (kube-apiserver labels the kubernetes
// Service's Endpoints object the same way).
const LabelSkipMirror = discoveryv1.LabelSkipMirror

// desiredEndpoints is the leader's Endpoints object, for the readers of
// the Endpoints API: the slice's address and ports, under the Service's
// name. With two families (see desiredSlice) it holds the address of the
// Service's primary family, as the endpoints controller's does.
//
//nolint:staticcheck // the Endpoints API is what its readers read
func (p *publisher) desiredEndpoints(svc *corev1.Service, slice *discoveryv1.EndpointSlice) *corev1.Endpoints {
	sep := slice.Endpoints[0]
	addr := corev1.EndpointAddress{IP: sep.Addresses[0], NodeName: sep.NodeName, TargetRef: sep.TargetRef}
	ports := make([]corev1.EndpointPort, 0, len(slice.Ports))
	for _, sp := range slice.Ports {
		ports = append(ports, corev1.EndpointPort{
			Name: ptr.Deref(sp.Name, ""), Port: ptr.Deref(sp.Port, 0), Protocol: ptr.Deref(sp.Protocol, corev1.ProtocolTCP), AppProtocol: sp.AppProtocol,
		})
	}
	return &corev1.Endpoints{
		ObjectMeta: metav1.ObjectMeta{
			Name:            svc.Name,
			Namespace:       p.cfg.Namespace,
			Labels:          map[string]string{LabelSkipMirror: "true"},
			Annotations:     p.annotations(),
			OwnerReferences: slice.OwnerReferences,
		},
		Subsets: []corev1.EndpointSubset{{Addresses: []corev1.EndpointAddress{addr}, Ports: ports}},
	}
}

// endpointsUpToDate reports whether have serves as want, as sliceUpToDate.
//
//nolint:staticcheck // the Endpoints API is what its readers read
func endpointsUpToDate(have, want *corev1.Endpoints) bool {
	return metaUpToDate(&have.ObjectMeta, &want.ObjectMeta) &&
		apiequality.Semantic.DeepEqual(have.Subsets, want.Subsets)
}

// writeEndpoints creates or updates the leader's Endpoints object
// (ownWriter).
//
//nolint:staticcheck // the Endpoints API is what its readers read
func (p *publisher) writeEndpoints(ctx context.Context, want *corev1.Endpoints) error {
	return ownWriter[*corev1.Endpoints]{
		kind:     "Endpoints",
		cached:   p.endpoints.Get,
		api:      p.cfg.Client.CoreV1().Endpoints(p.cfg.Namespace),
		upToDate: endpointsUpToDate,
		update: func(have, want *corev1.Endpoints) *corev1.Endpoints {
			update := have.DeepCopy()
			takeMeta(&update.ObjectMeta, &want.ObjectMeta)
			update.Subsets = want.Subsets
			return update
		},
		leading: p.leading,
		noted:   p.noteUnanswered,
	}.write(ctx, want)
}
