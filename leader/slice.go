// The leader's EndpointSlices: one per address family the Service serves.

package leader

import (
	"cmp"
	"context"
	"net/netip"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/fastover/fastover/leader/internal/names"
)

// sliceName is the name of the leader's EndpointSlice of its Address's
// family; every leader writes the same one, so a handover replaces the
// address in place.
func (p *publisher) sliceName() string {
	name := p.ep.Service + "-fastover"
	if len(name) > 253 {
		name = name[:253]
	}
	return name
}

// sliceNameFor is the name of the leader's EndpointSlice of a family: the
// Address's family's is sliceName, the other family's (a dual-stack
// Service's second) has the family as a suffix, "-ipv4" or "-ipv6".
func (p *publisher) sliceNameFor(addrType discoveryv1.AddressType) string {
	if addrType == addressType(netip.MustParseAddr(p.ep.Address)) { // validated
		return p.sliceName()
	}
	suffix := "-fastover-" + strings.ToLower(string(addrType))
	name := p.ep.Service
	if len(name)+len(suffix) > 253 {
		name = name[:253-len(suffix)]
	}
	return name + suffix
}

// desiredSlice is the leader's slice of its Address.
func (p *publisher) desiredSlice(svc *corev1.Service) *discoveryv1.EndpointSlice {
	return p.desiredSliceFor(svc, netip.MustParseAddr(p.ep.Address)) // validated
}

// desiredSliceFor is the leader's slice of one of its addresses.
func (p *publisher) desiredSliceFor(svc *corev1.Service, addr netip.Addr) *discoveryv1.EndpointSlice {
	addrType := addressType(addr)
	ep := discoveryv1.Endpoint{
		Addresses: []string{addr.Unmap().String()},
		Conditions: discoveryv1.EndpointConditions{
			Ready: ptr.To(true), Serving: ptr.To(true), Terminating: ptr.To(false),
		},
	}
	if p.ep.PodName != "" {
		ep.TargetRef = &corev1.ObjectReference{Kind: "Pod", Namespace: p.cfg.Namespace, Name: p.ep.PodName}
	}
	if p.ep.NodeName != "" {
		ep.NodeName = ptr.To(p.ep.NodeName)
	}
	var ports []discoveryv1.EndpointPort
	for _, port := range p.ep.Ports {
		// As the API server defaults them, so that a written slice
		// reads back equal.
		port.Name = ptr.To(ptr.Deref(port.Name, ""))
		port.Protocol = ptr.To(ptr.Deref(port.Protocol, corev1.ProtocolTCP))
		ports = append(ports, port)
	}
	if len(ports) == 0 {
		for _, sp := range svc.Spec.Ports {
			// As the API server defaults an unset targetPort: the port.
			port := sp.Port
			switch {
			case sp.TargetPort.Type == intstr.String && sp.TargetPort.StrVal != "":
				// resolveNamedPorts made sure it resolves.
				if named, ok := p.namedPort(sp); ok {
					port = named
				}
			case sp.TargetPort.IntVal != 0:
				port = sp.TargetPort.IntVal
			}
			ports = append(ports, discoveryv1.EndpointPort{
				Name: ptr.To(sp.Name), Port: ptr.To(port), Protocol: ptr.To(cmp.Or(sp.Protocol, corev1.ProtocolTCP)), AppProtocol: sp.AppProtocol,
			})
		}
	}
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name:      p.sliceNameFor(addrType),
			Namespace: p.cfg.Namespace,
			Labels: map[string]string{
				discoveryv1.LabelServiceName: svc.Name,
				discoveryv1.LabelManagedBy:   ManagedBy,
			},
			Annotations: p.annotations(),
			// No blockOwnerDeletion: with OwnerReferencesPermissionEnforcement
			// (OpenShift's default) setting it needs update on
			// services/finalizers, which the Role does not grant; the
			// slice is garbage-collected with its Service all the same.
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "v1", Kind: "Service", Name: svc.Name, UID: svc.UID, Controller: ptr.To(true),
			}},
		},
		AddressType: addrType,
		Endpoints:   []discoveryv1.Endpoint{ep},
		Ports:       ports,
	}
}

// annotations are the leader's identity and term, on what it publishes.
func (p *publisher) annotations() map[string]string {
	// Every term writes all three: a slice is updated in place, and an
	// annotation left out would keep the previous term's value.
	handOver := names.HandOverUnplanned
	if p.handedOver != nil && p.handedOver() {
		handOver = names.HandOverPlanned
	}
	return map[string]string{
		AnnotationIdentity: p.cfg.Identity,
		AnnotationTerm:     strconv.FormatInt(int64(p.term()), 10),
		AnnotationHandOver: handOver,
	}
}

// sliceUpToDate reports whether have serves as want: want's labels and
// annotations are there (others, added by anyone, are left alone), with
// the owner, the address and the ports that want has.
func sliceUpToDate(have, want *discoveryv1.EndpointSlice) bool {
	return metaUpToDate(&have.ObjectMeta, &want.ObjectMeta) &&
		have.AddressType == want.AddressType &&
		apiequality.Semantic.DeepEqual(have.Endpoints, want.Endpoints) &&
		apiequality.Semantic.DeepEqual(have.Ports, want.Ports)
}

// writeSlice creates or updates one of the leader's slices (ownWriter).
func (p *publisher) writeSlice(ctx context.Context, want *discoveryv1.EndpointSlice) error {
	return ownWriter[*discoveryv1.EndpointSlice]{
		kind:     "EndpointSlice",
		cached:   p.slices.Get,
		api:      p.cfg.Client.DiscoveryV1().EndpointSlices(p.cfg.Namespace),
		upToDate: sliceUpToDate,
		update: func(have, want *discoveryv1.EndpointSlice) *discoveryv1.EndpointSlice {
			update := have.DeepCopy()
			takeMeta(&update.ObjectMeta, &want.ObjectMeta)
			update.AddressType, update.Endpoints, update.Ports = want.AddressType, want.Endpoints, want.Ports
			return update
		},
		leading: p.leading,
		noted:   p.noteUnanswered,
	}.write(ctx, want)
}
