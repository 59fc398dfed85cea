// Tests of the hand-off annotation and of reading an unanswered write.

package leader

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
)

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
