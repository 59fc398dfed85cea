package webhookreplica

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/fastover/fastover/internal/cluster"
)

func TestProbeOK(t *testing.T) {
	var status atomic.Int32
	status.Store(http.StatusOK)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(int(status.Load()))
	}))
	ctx := context.Background()
	assert.True(t, ProbeOK(ctx, srv.URL))
	status.Store(http.StatusServiceUnavailable)
	assert.False(t, ProbeOK(ctx, srv.URL))
	srv.Close()
	assert.False(t, ProbeOK(ctx, srv.URL))
	assert.False(t, ProbeOK(ctx, "::not a url"))
}

// The prober follows the probe into the slice and deletes the slice when
// the process exits. A fake client stands for the API server: the test is
// of the prober's loop, not of the API.
func TestProberKeepsTheSlice(t *testing.T) {
	var status atomic.Int32
	status.Store(http.StatusServiceUnavailable)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(int(status.Load()))
	}))
	defer srv.Close()

	proc := cluster.NewProcess("sleeper", "/bin/sleep", t.TempDir(), "60")
	require.NoError(t, proc.Start())
	defer proc.Stop(syscall.SIGKILL, 0)

	slice := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: "svc-r0", Namespace: "ns"},
		AddressType: discoveryv1.AddressTypeIPv4, Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.0.0.1"}}}}
	client := fake.NewClientset(slice)
	slices := client.DiscoveryV1().EndpointSlices("ns")
	r := &Replica{ID: 0, Proc: proc, Slice: "svc-r0", Probe: srv.URL}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	go r.prober(ctx, Options{IP: "10.0.0.1", Logf: t.Logf}, slices)

	time.Sleep(1500 * time.Millisecond)
	assert.False(t, r.Ready(), "ready while the probe fails")
	status.Store(http.StatusOK)
	require.NoError(t, r.WaitReady(ctx))
	got, err := slices.Get(ctx, "svc-r0", metav1.GetOptions{})
	require.NoError(t, err)
	require.NotNil(t, got.Endpoints[0].Conditions.Ready)
	assert.True(t, *got.Endpoints[0].Conditions.Ready)

	proc.Stop(syscall.SIGKILL, 0)
	require.Eventually(t, func() bool {
		_, err := slices.Get(ctx, "svc-r0", metav1.GetOptions{})
		return err != nil
	}, 10*time.Second, 50*time.Millisecond, "the slice outlived its process")
}
