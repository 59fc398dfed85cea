package cluster

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"
)

func publishedObjects(holder string, addrs ...string) *fake.Clientset {
	meta := func(name string) metav1.ObjectMeta { return metav1.ObjectMeta{Name: name, Namespace: "ns"} }
	pod := &corev1.Pod{ObjectMeta: meta("app-0"), Status: corev1.PodStatus{PodIP: "10.0.0.1"}}
	lease := &coordinationv1.Lease{ObjectMeta: meta("app"), Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder)}}
	slice := &discoveryv1.EndpointSlice{ObjectMeta: meta("app-x"), AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{Addresses: addrs}}}
	slice.Labels = map[string]string{discoveryv1.LabelServiceName: "app"}
	return fake.NewClientset(pod, lease, slice)
}

func TestWaitPublished(t *testing.T) {
	ctx := context.Background()
	got, err := WaitPublished(ctx, publishedObjects("app-0_1a2b", "10.0.0.1"), "ns", "app", "app", "", time.Second)
	require.NoError(t, err)
	assert.Equal(t, "app-0", got.Name)
	assert.Equal(t, "app-0_1a2b", got.Identity)
}

func TestWaitPublishedSaysWhatItSawLast(t *testing.T) {
	ctx := context.Background()
	_, err := WaitPublished(ctx, publishedObjects("app-0_1a2b", "10.0.0.1", "10.0.0.2"), "ns", "app", "app", "", 300*time.Millisecond)
	require.ErrorContains(t, err, "holder app-0_1a2b at 10.0.0.1, endpoints [10.0.0.1 10.0.0.2]")

	_, err = WaitPublished(ctx, publishedObjects("app-0_1a2b", "10.0.0.1"), "ns", "app", "app", "app-0", 300*time.Millisecond)
	require.ErrorContains(t, err, "the Lease still names app-0_1a2b")

	_, err = WaitPublished(ctx, publishedObjects("app-9_1a2b", "10.0.0.1"), "ns", "app", "app", "", 300*time.Millisecond)
	require.ErrorContains(t, err, "the holder app-9_1a2b is no running pod")
}
