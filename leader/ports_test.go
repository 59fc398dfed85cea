// Tests of the published ports: defaults and named target ports.

package leader

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Ports given without a name or protocol are compared as the API
// server defaults them.
func TestExplicitPortsCompareWithDefaults(t *testing.T) {
	tp := newTestPublisher(t, "10.1.2.3", testService())
	tp.ep.Ports = []discoveryv1.EndpointPort{{Port: ptrTo[int32](8443)}}
	want := tp.desiredSlice(testService())
	have := want.DeepCopy()
	have.Ports = []discoveryv1.EndpointPort{{Name: ptrTo(""), Port: ptrTo[int32](8443), Protocol: ptrTo(corev1.ProtocolTCP)}}
	assert.True(t, sliceUpToDate(have, want))
}

// testPod is the leader's Pod "ctl-0", with one container of these ports.
func testPod(ports ...corev1.ContainerPort) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "ctl-0"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "ctl", Ports: ports}}},
	}
}

// A named targetPort is resolved from the leader's own Pod, read once, by
// name and protocol, sidecars included; one that cannot be resolved is
// reported and nothing is published.
func TestNamedTargetPort(t *testing.T) {
	ctx := context.Background()
	svc := testService()
	svc.Spec.Ports = []corev1.ServicePort{
		{Name: "https", Port: 443, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromString("web")},
		{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP, TargetPort: intstr.FromString("dns")},
	}
	pod := testPod(
		corev1.ContainerPort{Name: "web", ContainerPort: 8443},
		corev1.ContainerPort{Name: "dns", ContainerPort: 5353, Protocol: corev1.ProtocolTCP},
	)
	pod.Spec.InitContainers = []corev1.Container{
		{Name: "once", Ports: []corev1.ContainerPort{{Name: "dns", ContainerPort: 1, Protocol: corev1.ProtocolUDP}}},
		{Name: "sidecar", RestartPolicy: ptrTo(corev1.ContainerRestartPolicyAlways), Ports: []corev1.ContainerPort{{Name: "dns", ContainerPort: 5354, Protocol: corev1.ProtocolUDP}}},
	}

	for _, tc := range []struct {
		name    string
		podName string
		pod     *corev1.Pod
		want    string
	}{
		{"no PodName", "", pod, "set EndpointConfig.PodName"},
		{"no Pod", "ctl-0", nil, "the leader's Pod ctl-0 could not be read"},
		{"no such port", "ctl-0", testPod(corev1.ContainerPort{Name: "web", ContainerPort: 8443}), `no container of the leader's Pod ctl-0 has a UDP port named "dns"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tp := newTestPublisher(t, "10.1.2.3", svc)
			tp.ep.PodName = tc.podName
			if tc.pod != nil {
				require.NoError(t, tp.client.Tracker().Add(tc.pod))
			}
			err := tp.reconcile(ctx, false)
			require.ErrorIs(t, err, ErrNamedTargetPort)
			assert.Contains(t, err.Error(), tc.want)
			assert.Equal(t, 0, tp.writes(), "published a port the leader may not listen on")
			require.Len(t, tp.events.Events, 1)
			ev := <-tp.events.Events
			assert.Contains(t, ev, "Warning NamedTargetPort")
			assert.Contains(t, ev, tc.want)
		})
	}

	tp := newTestPublisher(t, "10.1.2.3", svc)
	tp.ep.PodName = "ctl-0"
	require.NoError(t, tp.client.Tracker().Add(pod))
	require.NoError(t, tp.reconcile(ctx, false))
	assert.Equal(t, []discoveryv1.EndpointPort{
		{Name: ptrTo("https"), Port: ptrTo[int32](8443), Protocol: ptrTo(corev1.ProtocolTCP)},
		{Name: ptrTo("dns"), Port: ptrTo[int32](5354), Protocol: ptrTo(corev1.ProtocolUDP)},
	}, tp.apiSlice(t).Ports)
	require.NoError(t, tp.reconcile(ctx, false))
	gets := 0
	for _, a := range tp.client.Actions() {
		if a.GetResource().Resource == "pods" {
			gets++
		}
	}
	assert.Equal(t, 1, gets, "the Pod is read once")

	// Explicit Ports: nothing to resolve, no Pod read.
	tpx := newTestPublisher(t, "10.1.2.3", svc)
	tpx.ep.Ports = []discoveryv1.EndpointPort{{Port: ptrTo[int32](8443)}}
	require.NoError(t, tpx.reconcile(ctx, false))
	assert.Empty(t, tpx.events.Events)
}
