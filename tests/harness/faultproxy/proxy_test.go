package faultproxy

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// upstream is a TLS server that answers /ok at once and streams a line
// every 50 ms on watches; it checks the token passes through.
func upstream(t *testing.T) *Proxy {
	t.Helper()
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer secret" {
			http.Error(w, "no token", http.StatusUnauthorized)
			return
		}
		if r.URL.Query().Get("watch") != "true" {
			_, _ = io.WriteString(w, "ok\n")
			return
		}
		for i := 0; ; i++ {
			if _, err := fmt.Fprintf(w, "%d\n", time.Now().UnixNano()); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}))
	t.Cleanup(srv.Close)
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	p, err := Start(&rest.Config{Host: srv.URL, TLSClientConfig: rest.TLSClientConfig{CAData: ca}})
	require.NoError(t, err)
	t.Cleanup(p.Close)
	return p
}

func get(t *testing.T, p *Proxy, path string, timeout time.Duration) (*http.Response, error) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, p.URL+path, nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer secret")
	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(p.CA))
	return (&http.Client{Timeout: timeout, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}).Do(req)
}

func TestPassThroughAndLatency(t *testing.T) {
	p := upstream(t)
	resp, err := get(t, p, "/ok", 5*time.Second)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	assert.Equal(t, "ok\n", string(body))

	p.SetLatency(300 * time.Millisecond)
	start := time.Now()
	resp, err = get(t, p, "/ok", 5*time.Second)
	require.NoError(t, err)
	_ = resp.Body.Close()
	assert.GreaterOrEqual(t, time.Since(start), 300*time.Millisecond)
}

func TestPartitionHoldsRequestsUntilHealed(t *testing.T) {
	p := upstream(t)
	p.Partition(true)
	resp, err := get(t, p, "/ok", 300*time.Millisecond)
	if err == nil {
		_ = resp.Body.Close()
	}
	require.Error(t, err, "a request went through a partition")

	done := make(chan error, 1)
	go func() {
		resp, err := get(t, p, "/ok", 5*time.Second)
		if err == nil {
			_ = resp.Body.Close()
		}
		done <- err
	}()
	time.Sleep(200 * time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("answered while partitioned (error %v)", err)
	default:
	}
	p.Partition(false)
	select {
	case err := <-done:
		assert.NoError(t, err)
	case <-time.After(3 * time.Second):
		t.Fatal("not answered after the partition healed")
	}
}

func TestWatchDelay(t *testing.T) {
	p := upstream(t)
	p.SetWatchDelay(400 * time.Millisecond)
	resp, err := get(t, p, "/watch?watch=true", 10*time.Second)
	require.NoError(t, err)
	defer func() { _ = resp.Body.Close() }()
	sc := bufio.NewScanner(resp.Body)
	for range 3 {
		require.True(t, sc.Scan())
		var sent int64
		_, err := fmt.Sscan(sc.Text(), &sent)
		require.NoError(t, err)
		late := time.Since(time.Unix(0, sent))
		assert.GreaterOrEqual(t, late, 380*time.Millisecond, "a watch event came early")
		assert.Less(t, late, 2*time.Second)
	}
}

func TestDropConnectionsCutsStreams(t *testing.T) {
	p := upstream(t)
	resp, err := get(t, p, "/watch?watch=true", 10*time.Second)
	require.NoError(t, err)
	defer func() { _ = resp.Body.Close() }()
	sc := bufio.NewScanner(resp.Body)
	require.True(t, sc.Scan())
	assert.Equal(t, 1, p.DropConnections())
	for sc.Scan() {
	}
	assert.Error(t, sc.Err(), "the stream ended cleanly instead of being cut")
}

func TestWriteKubeconfig(t *testing.T) {
	p := upstream(t)
	path := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, p.WriteKubeconfig(path, "ctl", "secret", "ns"))
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	require.NoError(t, err)
	assert.Equal(t, p.URL, cfg.Host)
	assert.Equal(t, "secret", cfg.BearerToken)
}
