package leader

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"
)

// testPublisher is a publisher whose caches the test fills by hand, so
// that they can lag behind the API as informers do.
type testPublisher struct {
	*publisher
	client   *fake.Clientset
	services cache.Indexer
	slices   cache.Indexer
	eps      cache.Indexer // the Endpoints cache
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
	eps := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	require.NoError(t, svcs.Add(svc))
	return &testPublisher{
		publisher: &publisher{
			cfg: &cfg, ep: cfg.Endpoint, log: logr.Discard(), leading: func() bool { return true },
			term:      func() int32 { return 7 },
			services:  corelisters.NewServiceLister(svcs).Services("ns"),
			slices:    discoverylisters.NewEndpointSliceLister(slices).EndpointSlices("ns"),
			endpoints: corelisters.NewEndpointsLister(eps).Endpoints("ns"),
		},
		client: client, services: svcs, slices: slices, eps: eps, events: events,
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

// A new term rewrites the slice with it, identity and term together.
func TestNewTermRewritesTheSlice(t *testing.T) {
	tp := newTestPublisher(t, "10.1.2.3", testService())
	ctx := context.Background()
	require.NoError(t, tp.reconcile(ctx, false))
	s := tp.apiSlice(t)
	assert.Equal(t, "7", s.Annotations[AnnotationTerm])
	require.NoError(t, tp.slices.Add(s))
	require.NoError(t, tp.reconcile(ctx, false))
	require.Equal(t, 1, tp.writes(), "the same term: no write")
	tp.term = func() int32 { return 8 }
	require.NoError(t, tp.reconcile(ctx, false))
	assert.Equal(t, 2, tp.writes())
	assert.Equal(t, "8", tp.apiSlice(t).Annotations[AnnotationTerm])
}

// How the term began is written with every term: a slice updated in place
// after a planned hand-over must not keep saying so for the next term,
// begun on an expired Lease (leader/follow would wait for that ex-leader
// to end its connections itself).
func TestHandOverAnnotationFollowsTheTerm(t *testing.T) {
	tp := newTestPublisher(t, "10.1.2.3", testService())
	ctx := context.Background()
	planned := true
	tp.handedOver = func() bool { return planned }
	require.NoError(t, tp.reconcile(ctx, false))
	s := tp.apiSlice(t)
	assert.Equal(t, "planned", s.Annotations[AnnotationHandOver])
	require.NoError(t, tp.slices.Add(s))
	tp.term, planned = func() int32 { return 8 }, false
	require.NoError(t, tp.reconcile(ctx, false))
	assert.Equal(t, "unplanned", tp.apiSlice(t).Annotations[AnnotationHandOver])
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

// A dual-stack Service gets the leader's address of each of its families,
// one slice per family (the Address's family's under the usual name), the
// Endpoints object the first family's; a single-family Service the
// leader's address of that family, the other slice going; withdraw
// withdraws both.
func TestDualStack(t *testing.T) {
	ctx := context.Background()
	svc := testService()
	svc.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv6Protocol, corev1.IPv4Protocol}
	tp := newTestPublisher(t, "10.1.2.3", svc)
	tp.ep.Addresses = []string{"10.1.2.3", "fd00::3"}
	require.NoError(t, tp.reconcile(ctx, false))
	list, err := tp.client.DiscoveryV1().EndpointSlices("ns").List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	got := map[string]string{}
	for _, s := range list.Items {
		got[s.Name] = string(s.AddressType) + " " + strings.Join(s.Endpoints[0].Addresses, ",")
		require.NoError(t, tp.slices.Add(s.DeepCopy()))
	}
	assert.Equal(t, map[string]string{"svc-fastover": "IPv4 10.1.2.3", "svc-fastover-ipv6": "IPv6 fd00::3"}, got)
	ep, err := tp.client.CoreV1().Endpoints("ns").Get(ctx, "svc", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, "fd00::3", ep.Subsets[0].Addresses[0].IP, "the primary family's")

	// IPv6 only: the IPv4 slice goes.
	svc.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv6Protocol}
	require.NoError(t, tp.services.Update(svc))
	require.NoError(t, tp.reconcile(ctx, false))
	list, err = tp.client.DiscoveryV1().EndpointSlices("ns").List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	require.Len(t, list.Items, 1)
	assert.Equal(t, "svc-fastover-ipv6", list.Items[0].Name)
	gone, _, _ := tp.slices.GetByKey("ns/svc-fastover")
	require.NoError(t, tp.slices.Delete(gone)) // the cache catches up

	// Withdraw: every slice of the leader's.
	svc.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}
	require.NoError(t, tp.services.Update(svc))
	require.NoError(t, tp.reconcile(ctx, false))
	list, err = tp.client.DiscoveryV1().EndpointSlices("ns").List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	require.Len(t, list.Items, 2)
	for _, s := range list.Items {
		require.NoError(t, tp.slices.Update(s.DeepCopy()))
	}
	require.NoError(t, tp.withdraw(ctx))
	list, err = tp.client.DiscoveryV1().EndpointSlices("ns").List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	assert.Empty(t, list.Items)

	// A leader of one family, a Service of the other: refused, naming
	// both.
	tp4 := newTestPublisher(t, "10.1.2.3", svc)
	svc6 := testService()
	svc6.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv6Protocol}
	_, err = tp4.checkFamily(svc6)
	assert.ErrorContains(t, err, "the leader's address 10.1.2.3 is IPv4, but Service ns/svc serves [IPv6] only")
}

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

// A replica past its renew deadline writes nothing.
func TestNotLeadingWritesNothing(t *testing.T) {
	svc := testService()
	svc.Spec.Selector = map[string]string{"app": "ctl"}
	tp := newTestPublisher(t, "10.1.2.3", svc)
	tp.leading = func() bool { return false }
	tp.ep.RemoveSelector = true
	assert.ErrorIs(t, tp.reconcile(context.Background(), true), errNotLeading)
	tp2 := newTestPublisher(t, "10.1.2.3", testService())
	tp2.leading = func() bool { return false }
	assert.ErrorIs(t, tp2.reconcile(context.Background(), true), errNotLeading)
	assert.ErrorIs(t, tp2.deleteStaleEndpoints(context.Background()), errNotLeading)
	assert.Empty(t, tp.client.Actions())
	assert.Empty(t, tp2.client.Actions())
}

// withdraw deletes this replica's slice, the version it saw, and nothing
// else: not another leader's slice, not after the renew deadline.
func TestWithdraw(t *testing.T) {
	ctx := context.Background()
	tp := newTestPublisher(t, "10.1.2.3", testService())
	require.NoError(t, tp.withdraw(ctx), "no slice: nothing to do")
	require.NoError(t, tp.reconcile(ctx, false))
	s := tp.apiSlice(t)
	s.UID, s.ResourceVersion = "slice-uid", "9"
	require.NoError(t, tp.slices.Add(s))

	tp.leading = func() bool { return false }
	assert.ErrorIs(t, tp.withdraw(ctx), errNotLeading)
	tp.leading = func() bool { return true }

	theirs := s.DeepCopy()
	theirs.Annotations[AnnotationIdentity] = "next-leader"
	require.NoError(t, tp.slices.Update(theirs))
	require.NoError(t, tp.withdraw(ctx))
	tp.apiSlice(t) // still there

	require.NoError(t, tp.slices.Update(s))
	require.NoError(t, tp.withdraw(ctx))
	_, err := tp.client.DiscoveryV1().EndpointSlices("ns").Get(ctx, "svc-fastover", metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err))
	var last k8stesting.DeleteAction
	for _, a := range tp.client.Actions() {
		if d, ok := a.(k8stesting.DeleteAction); ok {
			last = d
		}
	}
	require.NotNil(t, last)
	assert.Equal(t, types.UID("slice-uid"), *last.GetDeleteOptions().Preconditions.UID)
	assert.Equal(t, "9", *last.GetDeleteOptions().Preconditions.ResourceVersion)
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

// A missing Service is an error that names it; nothing is written.
func TestMissingService(t *testing.T) {
	tp := newTestPublisher(t, "10.1.2.3", testService())
	require.NoError(t, tp.services.Delete(testService()))
	assert.ErrorContains(t, tp.reconcile(context.Background(), false), "service ns/svc")
	assert.Equal(t, 0, tp.writes())
}

// The publishing loop: at once (the publish time observed), again when
// woken, with a growing backoff after errors (counted), and until the
// replica no longer leads or the term ends.
func TestPublishLoop(t *testing.T) {
	tp := newTestPublisher(t, "10.1.2.3", testService())
	clk := clocktesting.NewFakeClock(time.Now())
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	require.NoError(t, err)
	tp.cfg.Clock, tp.cfg.Metrics = clk, m
	tp.trigger = make(chan struct{}, 1)
	var failing atomic.Bool
	tp.client.PrependReactor("*", "endpointslices", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if failing.Load() && (a.GetVerb() == "create" || a.GetVerb() == "update") {
			return true, nil, apierrors.NewServiceUnavailable("restarting")
		}
		return false, nil, nil
	})
	var leading atomic.Bool // the loop reads it while the test changes it
	leading.Store(true)
	tp.leading = leading.Load
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	acquired := clk.Now()
	clk.Step(3 * time.Millisecond)
	go func() { defer close(done); tp.run(ctx, acquired) }()

	require.Eventually(t, clk.HasWaiters, waitFor, time.Millisecond)
	tp.apiSlice(t) // published
	var h dto.Metric
	require.NoError(t, m.publish.Write(&h))
	assert.Equal(t, uint64(1), h.Histogram.GetSampleCount())
	assert.InDelta(t, 0.003, h.Histogram.GetSampleSum(), 1e-9, "from acquiring to published, on the clock")

	// Someone changes the slice: woken, the loop writes it back.
	s := tp.apiSlice(t)
	s.Endpoints[0].Addresses = []string{"10.9.9.9"}
	_, err = tp.client.DiscoveryV1().EndpointSlices("ns").Update(ctx, s, metav1.UpdateOptions{})
	require.NoError(t, err)
	require.NoError(t, tp.slices.Add(s))
	wake(tp.trigger)
	require.Eventually(t, func() bool {
		return tp.apiSlice(t).Endpoints[0].Addresses[0] == "10.1.2.3"
	}, waitFor, time.Millisecond)

	// Errors: counted, retried after 50 ms, then 100 ms.
	failing.Store(true)
	s = tp.apiSlice(t)
	s.Endpoints[0].Addresses = []string{"10.9.9.9"}
	require.NoError(t, tp.client.Tracker().Update(discoveryv1.SchemeGroupVersion.WithResource("endpointslices"), s, "ns"))
	require.NoError(t, tp.slices.Update(s))
	require.Eventually(t, clk.HasWaiters, waitFor, time.Millisecond)
	wake(tp.trigger)
	require.Eventually(t, func() bool { return value(t, m.publishErrors) == 1 }, waitFor, time.Millisecond)
	require.Eventually(t, clk.HasWaiters, waitFor, time.Millisecond)
	clk.Step(50 * time.Millisecond)
	require.Eventually(t, func() bool { return value(t, m.publishErrors) == 2 }, waitFor, time.Millisecond)
	require.Eventually(t, clk.HasWaiters, waitFor, time.Millisecond)
	clk.Step(99 * time.Millisecond)
	require.Eventually(t, clk.HasWaiters, waitFor, time.Millisecond)
	assert.Equal(t, float64(2), value(t, m.publishErrors), "retried before the backoff")
	failing.Store(false)
	clk.Step(time.Millisecond)
	require.Eventually(t, func() bool {
		return tp.apiSlice(t).Endpoints[0].Addresses[0] == "10.1.2.3"
	}, waitFor, time.Millisecond)

	// No longer leading: the loop ends by itself.
	leading.Store(false)
	s = tp.apiSlice(t)
	s.Endpoints[0].Addresses = []string{"10.9.9.9"}
	require.NoError(t, tp.slices.Update(s))
	wake(tp.trigger)
	select {
	case <-done:
	case <-time.After(waitFor):
		t.Fatal("the loop went on after the replica stopped leading")
	}
	cancel()
}

// A pass at least every LeaseDuration; the term's end stops the loop.
func TestPublishLoopStopsWithTheTerm(t *testing.T) {
	tp := newTestPublisher(t, "10.1.2.3", testService())
	clk := clocktesting.NewFakeClock(time.Now())
	tp.cfg.Clock = clk
	tp.trigger = make(chan struct{}, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); tp.run(ctx, clk.Now()) }()
	require.Eventually(t, clk.HasWaiters, waitFor, time.Millisecond)
	// Someone changes the slice and the watch misses it: the pass every
	// LeaseDuration puts it right, not sooner.
	s := tp.apiSlice(t)
	s.Endpoints[0].Addresses = []string{"10.9.9.9"}
	require.NoError(t, tp.client.Tracker().Update(discoveryv1.SchemeGroupVersion.WithResource("endpointslices"), s, "ns"))
	require.NoError(t, tp.slices.Add(s))
	clk.Step(DefaultLeaseDuration - time.Millisecond)
	require.Eventually(t, clk.HasWaiters, waitFor, time.Millisecond)
	assert.Equal(t, "10.9.9.9", tp.apiSlice(t).Endpoints[0].Addresses[0])
	clk.Step(time.Millisecond)
	require.Eventually(t, func() bool {
		return tp.apiSlice(t).Endpoints[0].Addresses[0] == "10.1.2.3"
	}, waitFor, time.Millisecond, "no pass after a lease duration")
	require.Eventually(t, clk.HasWaiters, waitFor, time.Millisecond)
	cancel()
	select {
	case <-done:
	case <-time.After(waitFor):
		t.Fatal("the loop did not stop with its context")
	}
}

// staleEndpoints is the Endpoints object the endpoints controller leaves
// behind from a Service's selector days.
func staleEndpoints() runtime.Object {
	//nolint:staticcheck // the deprecated object is what the leader deletes
	return &corev1.Endpoints{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "svc"}}
}

// The stop that ends a term cancels the publisher's write on its way: the
// API applies it (the slice names this replica), the caches show it only
// later. The hand-off must see it and withdraw it when no successor takes
// it over, not leave the stopped leader as the Service's endpoint.
func TestHandOffSeesAnUnansweredWrite(t *testing.T) {
	ctx := context.Background()
	tp := newTestPublisher(t, "10.1.2.3", testService())
	tp.client.PrependReactor("create", "endpointslices", func(a k8stesting.Action) (bool, runtime.Object, error) {
		s := a.(k8stesting.CreateAction).GetObject().(*discoveryv1.EndpointSlice).DeepCopy()
		s.UID, s.ResourceVersion = "slice-uid", "5"
		require.NoError(t, tp.client.Tracker().Create(discoveryv1.SchemeGroupVersion.WithResource("endpointslices"), s, "ns"))
		return true, nil, &url.Error{Op: "Post", URL: "https://api/endpointslices", Err: context.Canceled}
	})
	require.Error(t, tp.reconcile(ctx, false))
	applied := tp.apiSlice(t)
	// The informer shows the slice a moment later.
	go func() {
		time.Sleep(50 * time.Millisecond)
		assert.NoError(t, tp.slices.Add(applied))
	}()
	require.NoError(t, tp.handOff(ctx, 100*time.Millisecond), "no successor: withdrawn")
	_, err := tp.client.DiscoveryV1().EndpointSlices("ns").Get(ctx, "svc-fastover", metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "the stopped leader is still published: %v", err)
}

// A write that the API refused has no unknown outcome: the hand-off reads
// nothing from the API. One whose answer was lost makes it read the
// leader's objects, and wait (bounded) for the caches to show them.
func TestSettle(t *testing.T) {
	ctx := context.Background()
	tp := newTestPublisher(t, "10.1.2.3", testService())
	tp.noteUnanswered(apierrors.NewConflict(discoveryv1.Resource("endpointslices"), "svc-fastover", errors.New("modified")))
	require.NoError(t, tp.settle(ctx))
	assert.Empty(t, tp.client.Actions())

	tp.noteUnanswered(&url.Error{Op: "Put", URL: "https://api/endpointslices", Err: context.DeadlineExceeded})
	require.NoError(t, tp.settle(ctx), "nothing in the API: nothing to wait for")
	assert.False(t, tp.unanswered.Load())

	s := tp.desiredSlice(testService())
	s.ResourceVersion = "8"
	_, err := tp.client.DiscoveryV1().EndpointSlices("ns").Create(ctx, s, metav1.CreateOptions{})
	require.NoError(t, err)
	old := s.DeepCopy()
	old.ResourceVersion = "7"
	require.NoError(t, tp.slices.Add(old))
	tp.noteUnanswered(context.Canceled)
	tctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	assert.ErrorContains(t, tp.settle(tctx), "the cache did not show EndpointSlice svc-fastover at version 8")
	assert.True(t, tp.unanswered.Load(), "still unsettled")
	require.NoError(t, tp.slices.Update(s))
	require.NoError(t, tp.settle(ctx))
}
