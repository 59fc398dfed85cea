// Tests of the leader's EndpointSlice: its name, content and freshness.

package leader

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// The other family's slice name keeps its suffix within the API's limit.
func TestSliceNameFor(t *testing.T) {
	tp := newTestPublisher(t, "10.1.2.3", testService())
	assert.Equal(t, "svc-fastover", tp.sliceNameFor(discoveryv1.AddressTypeIPv4))
	assert.Equal(t, "svc-fastover-ipv6", tp.sliceNameFor(discoveryv1.AddressTypeIPv6))
	tp.ep.Service = strings.Repeat("s", 250)
	name := tp.sliceNameFor(discoveryv1.AddressTypeIPv6)
	assert.Len(t, name, 253)
	assert.True(t, strings.HasSuffix(name, "-fastover-ipv6"))
}

// desiredSlice: the endpoint's address in canonical form and of its
// family (an IPv4-mapped IPv6 address is IPv4), its Pod and node, the
// Service's ports with numeric targetPorts, named ones as the port.
func TestDesiredSlice(t *testing.T) {
	svc := testService()
	svc.Spec.Ports = []corev1.ServicePort{
		{Name: "https", Port: 443, TargetPort: intstr.FromInt32(8443)},
		{Name: "metrics", Port: 9090, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromString("metrics"), AppProtocol: ptrTo("http")},
		{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP},
	}
	tp := newTestPublisher(t, "::ffff:10.1.2.3", svc)
	tp.ep.PodName, tp.ep.NodeName = "ctl-0", "node-a"
	require.NoError(t, tp.client.Tracker().Add(testPod(corev1.ContainerPort{Name: "metrics", ContainerPort: 9091})))
	require.NoError(t, tp.resolveNamedPorts(context.Background(), svc))
	s := tp.desiredSlice(svc)
	assert.Equal(t, discoveryv1.AddressTypeIPv4, s.AddressType)
	require.Len(t, s.Endpoints, 1)
	ep := s.Endpoints[0]
	assert.Equal(t, []string{"10.1.2.3"}, ep.Addresses)
	assert.Equal(t, &corev1.ObjectReference{Kind: "Pod", Namespace: "ns", Name: "ctl-0"}, ep.TargetRef)
	assert.Equal(t, "node-a", *ep.NodeName)
	assert.True(t, *ep.Conditions.Ready)
	assert.True(t, *ep.Conditions.Serving)
	assert.False(t, *ep.Conditions.Terminating)
	assert.Equal(t, []discoveryv1.EndpointPort{
		{Name: ptrTo("https"), Port: ptrTo[int32](8443), Protocol: ptrTo(corev1.ProtocolTCP)},
		{Name: ptrTo("metrics"), Port: ptrTo[int32](9091), Protocol: ptrTo(corev1.ProtocolTCP), AppProtocol: ptrTo("http")},
		{Name: ptrTo("dns"), Port: ptrTo[int32](53), Protocol: ptrTo(corev1.ProtocolUDP)},
	}, s.Ports)
	assert.Equal(t, map[string]string{discoveryv1.LabelServiceName: "svc", discoveryv1.LabelManagedBy: ManagedBy}, s.Labels)
	assert.Equal(t, "me", s.Annotations[AnnotationIdentity])
	assert.Equal(t, "7", s.Annotations[AnnotationTerm])

	tp6 := newTestPublisher(t, "fd00::a", svc)
	s6 := tp6.desiredSlice(svc)
	assert.Equal(t, discoveryv1.AddressTypeIPv6, s6.AddressType)
	assert.Equal(t, []string{"fd00::a"}, s6.Endpoints[0].Addresses)
	assert.Nil(t, s6.Endpoints[0].TargetRef)
	assert.Nil(t, s6.Endpoints[0].NodeName)
}

// sliceUpToDate: what others add is left alone; what the leader sets must
// be as it wants.
func TestSliceUpToDate(t *testing.T) {
	tp := newTestPublisher(t, "10.1.2.3", testService())
	want := tp.desiredSlice(testService())
	assert.True(t, sliceUpToDate(want.DeepCopy(), want))
	for name, change := range map[string]func(s *discoveryv1.EndpointSlice){
		"extra label":      func(s *discoveryv1.EndpointSlice) { s.Labels["team"] = "x" },
		"extra annotation": func(s *discoveryv1.EndpointSlice) { s.Annotations["note"] = "x" },
	} {
		have := want.DeepCopy()
		change(have)
		assert.True(t, sliceUpToDate(have, want), name)
	}
	for name, change := range map[string]func(s *discoveryv1.EndpointSlice){
		"address":          func(s *discoveryv1.EndpointSlice) { s.Endpoints[0].Addresses = []string{"10.9.9.9"} },
		"not ready":        func(s *discoveryv1.EndpointSlice) { s.Endpoints[0].Conditions.Ready = ptrTo(false) },
		"managed-by":       func(s *discoveryv1.EndpointSlice) { s.Labels[discoveryv1.LabelManagedBy] = "someone" },
		"no service label": func(s *discoveryv1.EndpointSlice) { delete(s.Labels, discoveryv1.LabelServiceName) },
		"identity":         func(s *discoveryv1.EndpointSlice) { s.Annotations[AnnotationIdentity] = "other" },
		"address type":     func(s *discoveryv1.EndpointSlice) { s.AddressType = discoveryv1.AddressTypeIPv6 },
		"owner":            func(s *discoveryv1.EndpointSlice) { s.OwnerReferences = nil },
		"port":             func(s *discoveryv1.EndpointSlice) { s.Ports[0].Port = ptrTo[int32](9) },
		"no ports":         func(s *discoveryv1.EndpointSlice) { s.Ports = nil },
	} {
		have := want.DeepCopy()
		change(have)
		assert.False(t, sliceUpToDate(have, want), name)
	}
}

// The slice's name is the Service's with a suffix, cut to the API's
// limit.
func TestSliceName(t *testing.T) {
	tp := newTestPublisher(t, "10.1.2.3", testService())
	assert.Equal(t, "svc-fastover", tp.sliceName())
	tp.ep.Service = strings.Repeat("s", 250)
	assert.Len(t, tp.sliceName(), 253)
}
