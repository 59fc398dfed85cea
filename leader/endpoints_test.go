// Tests of the mirrored Endpoints object.

package leader

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	k8stesting "k8s.io/client-go/testing"
)

// The leader maintains an Endpoints object for the Endpoints API's
// readers: the slice's address and ports, its identity and term, the
// skip-mirror label; a stale one (selector days) is taken over in place;
// a steady leader writes it once; the mirrored slice goes.
//
//nolint:staticcheck // the Endpoints API is what its readers read
func TestEndpointsObject(t *testing.T) {
	ctx := context.Background()
	svc := testService()
	svc.ResourceVersion = "7"
	svc.Spec.Selector = map[string]string{"app": "ctl"}
	tp := newTestPublisher(t, "10.1.2.3", svc)
	tp.ep.RemoveSelector = true
	tp.ep.PodName, tp.ep.NodeName = "ctl-0", "node-a"
	stale := staleEndpoints().(*corev1.Endpoints)
	stale.Labels = map[string]string{"app": "ctl"}
	stale.Subsets = []corev1.EndpointSubset{{Addresses: []corev1.EndpointAddress{{IP: "10.9.9.9"}}}}
	require.NoError(t, tp.client.Tracker().Add(stale))
	require.NoError(t, tp.eps.Add(stale))
	mirror := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "svc-mirror", UID: "svc-mirror-uid", Labels: map[string]string{
			discoveryv1.LabelServiceName: "svc", discoveryv1.LabelManagedBy: mirroringController,
		}},
		AddressType: discoveryv1.AddressTypeIPv4,
	}
	require.NoError(t, tp.client.Tracker().Add(mirror))
	require.NoError(t, tp.slices.Add(mirror))

	require.NoError(t, tp.reconcile(ctx, true))
	got, err := tp.client.CoreV1().Endpoints("ns").Get(ctx, "svc", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"app": "ctl", discoveryv1.LabelSkipMirror: "true"}, got.Labels)
	assert.Equal(t, "me", got.Annotations[AnnotationIdentity])
	assert.Equal(t, "7", got.Annotations[AnnotationTerm])
	require.Len(t, got.OwnerReferences, 1)
	assert.Equal(t, "Service", got.OwnerReferences[0].Kind)
	assert.Equal(t, []corev1.EndpointSubset{{
		Addresses: []corev1.EndpointAddress{{IP: "10.1.2.3", NodeName: ptrTo("node-a"), TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: "ns", Name: "ctl-0"}}},
		Ports:     []corev1.EndpointPort{{Name: "https", Port: 8443, Protocol: corev1.ProtocolTCP}},
	}}, got.Subsets)
	list, err := tp.client.DiscoveryV1().EndpointSlices("ns").List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	require.Len(t, list.Items, 1, "the mirrored slice goes")

	// Steady: the caches catch up; nothing more is written.
	require.NoError(t, tp.eps.Update(got))
	require.NoError(t, tp.slices.Delete(mirror))
	require.NoError(t, tp.slices.Add(tp.apiSlice(t)))
	svc.Spec.Selector = nil
	require.NoError(t, tp.services.Update(svc))
	before := len(tp.client.Actions())
	for range 10 {
		require.NoError(t, tp.reconcile(ctx, false))
	}
	assert.Len(t, tp.client.Actions(), before, "a steady leader wrote")

	// Deleted behind the cache's back: created again.
	require.NoError(t, tp.client.CoreV1().Endpoints("ns").Delete(ctx, "svc", metav1.DeleteOptions{}))
	tp.term = func() int32 { return 8 }
	require.NoError(t, tp.reconcile(ctx, false))
	got, err = tp.client.CoreV1().Endpoints("ns").Get(ctx, "svc", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, "8", got.Annotations[AnnotationTerm])
}

// withdraw deletes this replica's Endpoints object too, the version it
// saw, and not another leader's.
func TestWithdrawEndpoints(t *testing.T) {
	ctx := context.Background()
	tp := newTestPublisher(t, "10.1.2.3", testService())
	require.NoError(t, tp.reconcile(ctx, false))
	got, err := tp.client.CoreV1().Endpoints("ns").Get(ctx, "svc", metav1.GetOptions{})
	require.NoError(t, err)
	got.UID, got.ResourceVersion = "ep-uid", "3"
	theirs := got.DeepCopy()
	theirs.Annotations[AnnotationIdentity] = "next-leader"
	require.NoError(t, tp.eps.Add(theirs))
	require.NoError(t, tp.withdraw(ctx))
	_, err = tp.client.CoreV1().Endpoints("ns").Get(ctx, "svc", metav1.GetOptions{})
	require.NoError(t, err, "another leader's Endpoints object was withdrawn")

	require.NoError(t, tp.eps.Update(got))
	tp.leading = func() bool { return false }
	assert.ErrorIs(t, tp.withdrawEndpoints(ctx), errNotLeading)
	tp.leading = func() bool { return true }
	require.NoError(t, tp.withdraw(ctx))
	_, err = tp.client.CoreV1().Endpoints("ns").Get(ctx, "svc", metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "not withdrawn: %v", err)
	var last k8stesting.DeleteAction
	for _, a := range tp.client.Actions() {
		if d, ok := a.(k8stesting.DeleteAction); ok && d.GetResource().Resource == "endpoints" {
			last = d
		}
	}
	require.NotNil(t, last)
	assert.Equal(t, types.UID("ep-uid"), *last.GetDeleteOptions().Preconditions.UID)
	assert.Equal(t, "3", *last.GetDeleteOptions().Preconditions.ResourceVersion)
}
