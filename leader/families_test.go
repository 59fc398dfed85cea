// Tests of address families: IPv4, IPv6 and dual-stack Services.

package leader

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

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
