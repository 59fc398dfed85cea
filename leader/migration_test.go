// Tests of a Service with a selector and of what the leader removes.

package leader

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	k8stesting "k8s.io/client-go/testing"
)

// A Service with a selector, without RemoveSelector: reported (error and
// Event), nothing written.
func TestServiceWithSelectorIsReported(t *testing.T) {
	svc := testService()
	svc.Spec.Selector = map[string]string{"app": "ctl"}
	tp := newTestPublisher(t, "10.1.2.3", svc)
	err := tp.reconcile(context.Background(), true)
	require.ErrorIs(t, err, ErrServiceHasSelector)
	assert.ErrorContains(t, err, "app=ctl")
	assert.Equal(t, 0, tp.writes())
	assert.Contains(t, <-tp.events.Events, "Warning ServiceHasSelector")
	for _, a := range tp.client.Actions() {
		assert.NotEqual(t, "patch", a.GetVerb())
	}
}

// RemoveSelector: the selector goes, with a patch that fails if the
// Service changed since it was read; the endpoints controller's Endpoints
// object goes too; then the slice is written.
func TestRemoveSelector(t *testing.T) {
	svc := testService()
	svc.ResourceVersion = "7"
	svc.Spec.Selector = map[string]string{"app": "ctl"}
	tp := newTestPublisher(t, "10.1.2.3", svc)
	tp.ep.RemoveSelector = true
	tp.ep.SkipEndpoints, tp.endpoints = true, nil
	require.NoError(t, tp.client.Tracker().Add(staleEndpoints()))
	require.NoError(t, tp.reconcile(context.Background(), false))

	var patch string
	for _, a := range tp.client.Actions() {
		if p, ok := a.(k8stesting.PatchAction); ok {
			patch = string(p.GetPatch())
		}
	}
	assert.JSONEq(t, `[{"op":"test","path":"/metadata/resourceVersion","value":"7"},{"op":"remove","path":"/spec/selector"}]`, patch)
	got, err := tp.client.CoreV1().Services("ns").Get(context.Background(), "svc", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Empty(t, got.Spec.Selector)
	_, err = tp.client.CoreV1().Endpoints("ns").Get(context.Background(), "svc", metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "the stale Endpoints object is left: %v", err)
	assert.Equal(t, []string{"10.1.2.3"}, tp.apiSlice(t).Endpoints[0].Addresses)
	assert.Contains(t, <-tp.events.Events, "Normal SelectorRemoved")
}

// Every other slice of the Service goes; with SkipEndpoints, a mirrored
// one takes its Endpoints object along, or the mirroring controller would
// bring it back.
func TestOtherSlicesAreDeleted(t *testing.T) {
	tp := newTestPublisher(t, "10.1.2.3", testService())
	tp.ep.SkipEndpoints, tp.endpoints = true, nil
	other := func(name, managedBy string) *discoveryv1.EndpointSlice {
		return &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID(name + "-uid"), Labels: map[string]string{
				discoveryv1.LabelServiceName: "svc", discoveryv1.LabelManagedBy: managedBy,
			}},
			AddressType: discoveryv1.AddressTypeIPv4,
		}
	}
	for _, s := range []*discoveryv1.EndpointSlice{other("svc-abcde", "endpointslice-controller.k8s.io"), other("svc-mirror", mirroringController)} {
		require.NoError(t, tp.client.Tracker().Add(s))
		require.NoError(t, tp.slices.Add(s))
	}
	require.NoError(t, tp.client.Tracker().Add(staleEndpoints()))
	require.NoError(t, tp.reconcile(context.Background(), false))
	list, err := tp.client.DiscoveryV1().EndpointSlices("ns").List(context.Background(), metav1.ListOptions{})
	require.NoError(t, err)
	require.Len(t, list.Items, 1)
	assert.Equal(t, "svc-fastover", list.Items[0].Name)
	_, err = tp.client.CoreV1().Endpoints("ns").Get(context.Background(), "svc", metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "the mirrored Endpoints object is left: %v", err)
	for _, a := range tp.client.Actions() {
		if d, ok := a.(k8stesting.DeleteAction); ok && d.GetResource().Resource == "endpointslices" {
			require.NotNil(t, d.GetDeleteOptions().Preconditions, "a delete without its UID could hit a new slice")
			assert.Equal(t, types.UID(d.GetName()+"-uid"), *d.GetDeleteOptions().Preconditions.UID)
		}
	}
}
