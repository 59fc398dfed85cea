package leader

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

func serveOnce(h http.Handler) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
	return rec
}

// A standby answers 503 with Connection: close and its identity first;
// the leader serves the handler.
func TestOnly(t *testing.T) {
	inner := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("work")) })

	standby, err := New(Config{Client: fake.NewClientset(), Namespace: "ns", LeaseName: "l", Identity: "standby-1", Logger: logr.Discard()})
	require.NoError(t, err)
	rec := serveOnce(Only(standby, inner))
	assert.Equal(t, http.StatusServiceUnavailable, rec.Code)
	assert.Equal(t, "close", rec.Header().Get("Connection"), "the client dials the Service again")
	assert.Equal(t, "1", rec.Header().Get("Retry-After"))
	assert.True(t, strings.HasPrefix(rec.Body.String(), "standby-1 does not lead"), rec.Body.String())
	assert.Contains(t, rec.Body.String(), "the leader: none yet")

	client := fake.NewClientset()
	r := startRun(t, client, nil, nil)
	r.awaitLeading()
	rec = serveOnce(Only(r.el, inner))
	assert.Equal(t, http.StatusOK, rec.Code)
	assert.Equal(t, "work", rec.Body.String())
	assert.Empty(t, rec.Header().Get("Connection"))

	// A planned stop: it hands over, and answers until the process ends.
	r.cancel()
	require.NoError(t, r.result())
	assert.False(t, r.el.IsLeader())
	rec = serveOnce(Only(r.el, inner))
	assert.Equal(t, http.StatusOK, rec.Code, "the leader that hands over still answers")
}

// A leader whose Lease was lost (the renew deadline passed) refuses.
func TestOnlyRefusesAfterALostLease(t *testing.T) {
	inner := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("work")) })
	client := fake.NewClientset()
	r := startRun(t, client, nil, nil)
	r.awaitLeading()
	client.PrependReactor("update", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errUnavailable
	})
	r.stepUntil(250*time.Millisecond, r.returned)
	require.ErrorIs(t, r.result(), ErrLeadershipLost)
	rec := serveOnce(Only(r.el, inner))
	assert.Equal(t, http.StatusServiceUnavailable, rec.Code)
	assert.True(t, strings.HasPrefix(rec.Body.String(), "me does not lead"), rec.Body.String())
}
