package leader

import (
	"context"
	"errors"
	"testing"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
)

// testPublisher is a publisher whose caches the test fills by hand, so
// that they can lag behind the API as informers do.
type testPublisher struct {
	*publisher
	client   *fake.Clientset
	services cache.Indexer
	slices   cache.Indexer
	events   *record.FakeRecorder
}

func testService() *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "svc", UID: "svc-uid"},
		Spec: corev1.ServiceSpec{
			// As the API server defaults them.
			Ports:      []corev1.ServicePort{{Name: "https", Port: 443, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(8443)}},
			IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol},
		},
	}
}

func newTestPublisher(t *testing.T, address string, svc *corev1.Service) *testPublisher {
	t.Helper()
	client := fake.NewClientset(svc)
	events := record.NewFakeRecorder(10)
	cfg := Config{Client: client, Namespace: "ns", LeaseName: "l", Identity: "me",
		Endpoint:      &EndpointConfig{Service: "svc", Address: address},
		EventRecorder: events, Logger: logr.Discard()}
	require.NoError(t, cfg.Validate())
	cfg = cfg.withDefaults()
	svcs := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	slices := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	require.NoError(t, svcs.Add(svc))
	return &testPublisher{
		publisher: &publisher{
			cfg: &cfg, ep: cfg.Endpoint, log: logr.Discard(), leading: func() bool { return true },
			services: corelisters.NewServiceLister(svcs).Services("ns"),
			slices:   discoverylisters.NewEndpointSliceLister(slices).EndpointSlices("ns"),
		},
		client: client, services: svcs, slices: slices, events: events,
	}
}

// apiSlice returns the leader's slice as the API has it.
func (tp *testPublisher) apiSlice(t *testing.T) *discoveryv1.EndpointSlice {
	t.Helper()
	s, err := tp.client.DiscoveryV1().EndpointSlices("ns").Get(context.Background(), "svc-fastover", metav1.GetOptions{})
	require.NoError(t, err)
	return s
}

// writes counts the slice writes the publisher sent.
func (tp *testPublisher) writes() int {
	n := 0
	for _, a := range tp.client.Actions() {
		if a.GetResource().Resource == "endpointslices" && (a.GetVerb() == "create" || a.GetVerb() == "update") {
			n++
		}
	}
	return n
}

// A steady leader writes nothing, whatever others added to its slice
// (labels, annotations) and however often a change wakes it.
func TestSteadyLeaderWritesNothing(t *testing.T) {
	tp := newTestPublisher(t, "10.1.2.3", testService())
	ctx := context.Background()
	require.NoError(t, tp.reconcile(ctx, false))
	require.Equal(t, 1, tp.writes())
	// The cache catches up, with what a cluster adds to the slice.
	s := tp.apiSlice(t)
	s.Labels["team"] = "payments"
	s.Annotations["note"] = "added by a policy engine"
	s.ResourceVersion = "2"
	require.NoError(t, tp.slices.Add(s))
	for range 100 {
		require.NoError(t, tp.reconcile(ctx, false))
	}
	assert.Equal(t, 1, tp.writes(), "a steady leader rewrote its slice")
}

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

func ptrTo[T any](v T) *T { return &v }

// Right after its Create, the cache does not have the slice yet: the next
// pass gets AlreadyExists, reads the slice, finds it right and is done,
// without an error.
func TestCacheBehindTheLeadersOwnCreate(t *testing.T) {
	tp := newTestPublisher(t, "10.1.2.3", testService())
	ctx := context.Background()
	require.NoError(t, tp.reconcile(ctx, false))
	require.NoError(t, tp.reconcile(ctx, false), "a cache behind the API is not an error")
	for _, a := range tp.client.Actions() {
		assert.NotEqual(t, "update", a.GetVerb(), "the slice was right: nothing to update")
	}
}

// A user removes the service-name label from the leader's slice: it leaves
// the label-filtered cache. The leader reads it from the API and takes it
// back instead of failing on AlreadyExists for good.
func TestSliceThatLeftTheCacheIsTakenBack(t *testing.T) {
	tp := newTestPublisher(t, "10.1.2.3", testService())
	ctx := context.Background()
	require.NoError(t, tp.reconcile(ctx, false))
	s := tp.apiSlice(t)
	delete(s.Labels, discoveryv1.LabelServiceName)
	_, err := tp.client.DiscoveryV1().EndpointSlices("ns").Update(ctx, s, metav1.UpdateOptions{})
	require.NoError(t, err)
	// Not in the cache (its label is gone).
	require.NoError(t, tp.reconcile(ctx, false))
	assert.Equal(t, "svc", tp.apiSlice(t).Labels[discoveryv1.LabelServiceName])
}

// An update that conflicts (the cache is behind) is retried from the
// API's version.
func TestConflictRetriesFromTheAPI(t *testing.T) {
	tp := newTestPublisher(t, "10.1.2.3", testService())
	ctx := context.Background()
	stale := tp.desiredSlice(testService())
	stale.Endpoints[0].Addresses = []string{"10.9.9.9"}
	require.NoError(t, tp.client.Tracker().Add(stale))
	require.NoError(t, tp.slices.Add(stale))
	conflicted := false
	tp.client.PrependReactor("update", "endpointslices", func(k8stesting.Action) (bool, runtime.Object, error) {
		if !conflicted {
			conflicted = true
			return true, nil, apierrors.NewConflict(discoveryv1.Resource("endpointslices"), "svc-fastover", errors.New("the object has been modified"))
		}
		return false, nil, nil
	})
	require.NoError(t, tp.reconcile(ctx, false))
	assert.Equal(t, []string{"10.1.2.3"}, tp.apiSlice(t).Endpoints[0].Addresses)
}

// An address of a family the Service does not serve is not published, and
// says why on the Service.
func TestFamilyMismatchIsRefused(t *testing.T) {
	svc := testService()
	svc.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv6Protocol}
	tp := newTestPublisher(t, "10.1.2.3", svc)
	err := tp.reconcile(context.Background(), false)
	require.ErrorIs(t, err, errAddressFamily)
	assert.Equal(t, 0, tp.writes())
	assert.Contains(t, <-tp.events.Events, "AddressFamilyMismatch")
}

// IPv6: an IPv6 slice, the address in its canonical form.
func TestIPv6Slice(t *testing.T) {
	svc := testService()
	svc.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv6Protocol}
	tp := newTestPublisher(t, "2001:DB8:0::7", svc)
	require.NoError(t, tp.reconcile(context.Background(), false))
	s := tp.apiSlice(t)
	assert.Equal(t, discoveryv1.AddressTypeIPv6, s.AddressType)
	assert.Equal(t, []string{"2001:db8::7"}, s.Endpoints[0].Addresses)
	assert.Equal(t, int32(8443), *s.Ports[0].Port, "the Service's numeric targetPort")
}

// The owner reference does not block the owner's deletion: setting that
// needs update on services/finalizers where OwnerReferencesPermissionEnforcement
// is on, which the documented Role does not grant.
func TestOwnerReferenceDoesNotBlockDeletion(t *testing.T) {
	tp := newTestPublisher(t, "10.1.2.3", testService())
	refs := tp.desiredSlice(testService()).OwnerReferences
	require.Len(t, refs, 1)
	assert.Nil(t, refs[0].BlockOwnerDeletion)
	assert.True(t, *refs[0].Controller)
}
