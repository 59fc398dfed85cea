package fleet

import (
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fastover/fastover/internal/cluster"
)

func TestEnableAPI(t *testing.T) {
	f := &Fleet{Env: &cluster.Env{Dir: t.TempDir()}, Namespace: "ha", Service: "ctl"}
	assert.False(t, f.APIEnabled())
	assert.Nil(t, f.APICA())
	assert.Empty(t, f.apiArgs())
	assert.Equal(t, "http", f.scheme())
	err := f.RegisterAPIService(context.Background())
	require.ErrorContains(t, err, "needs EnableAPI")

	require.NoError(t, f.EnableAPI())
	require.NoError(t, f.EnableAPI(), "a second call changes nothing")
	assert.True(t, f.APIEnabled())
	assert.NotEmpty(t, f.APICA())
	assert.Equal(t, "ctl.ha.svc", f.APIServerName())
	assert.Equal(t, "https", f.scheme())
	args := f.apiArgs()
	require.Len(t, args, 2)
	assert.Contains(t, args[0], "--tls-cert-file=")
	assert.Contains(t, args[1], "--tls-private-key-file=")

	// The fleet's client trusts the replicas' certificate by the
	// Service's name, whatever address it calls.
	pair, err := tls.LoadX509KeyPair(f.api.certFile, f.api.keyFile)
	require.NoError(t, err)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "replica-1\n")
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}
	srv.StartTLS()
	defer srv.Close()
	resp, err := f.HTTPClient(5*time.Second, time.Second).Get(srv.URL)
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	assert.Equal(t, "replica-1\n", string(b))

	// A client without the CA refuses it.
	plain := &Fleet{Env: &cluster.Env{Dir: t.TempDir()}, Namespace: "ha", Service: "ctl"}
	resp, err = plain.HTTPClient(5*time.Second, time.Second).Get(srv.URL)
	if err == nil {
		_ = resp.Body.Close()
	}
	require.Error(t, err)

	// Too late once replicas run.
	late := &Fleet{Env: &cluster.Env{Dir: t.TempDir()}, Namespace: "ha", Service: "ctl", Replicas: []*Replica{{ID: "r-1", N: 1}}}
	require.ErrorContains(t, late.EnableAPI(), "after Add")

	// A directory that cannot be written: an error, not a crash.
	ro := &Fleet{Env: &cluster.Env{Dir: "/proc/nonexistent"}, Namespace: "ha", Service: "ctl"}
	require.Error(t, ro.EnableAPI())
	_, statErr := os.Stat("/proc/nonexistent")
	require.Error(t, statErr)
}

func TestParseReplicas(t *testing.T) {
	a, err := ParseReplicas([]byte(`{"kind":"ReplicaList","apiVersion":"example.fastover.io/v1alpha1","items":[{"metadata":{"name":"example-2"},"status":{"leading":true,"term":3}}]}`))
	if err != nil || a != (APIAnswer{ID: "example-2", Leading: true, Term: 3}) {
		t.Errorf("ParseReplicas = %+v, %v; want example-2, leading, term 3", a, err)
	}
	for _, body := range []string{
		`{"kind":"ReplicaList","items":[]}`,
		`{"kind":"ReplicaList","items":[{"metadata":{"name":"a"}},{"metadata":{"name":"b"}}]}`,
		`{"kind":"ReplicaList","items":[{"metadata":{}}]}`,
		`{"kind":"Status","status":"Failure"}`,
		`<html>`,
	} {
		if a, err := ParseReplicas([]byte(body)); err == nil {
			t.Errorf("ParseReplicas(%s) = %+v, want an error", body, a)
		}
	}
}
