package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"

	"github.com/fastover/fastover/internal/cluster"
)

type fakeReplica struct {
	id      string
	leading bool
	term    int32
}

func (f *fakeReplica) Identity() string { return f.id }
func (f *fakeReplica) IsLeader() bool   { return f.leading }
func (f *fakeReplica) Term() int32      { return f.term }
func (f *fakeReplica) Leader() string {
	if f.leading {
		return f.id
	}
	return "other"
}

// certs of a front proxy of the test's own.
type proxyCerts struct {
	caPEM   []byte
	cert    *x509.Certificate
	keyPair tls.Certificate
}

func newProxyCerts(t *testing.T, cn string) proxyCerts {
	t.Helper()
	certPEM, keyPEM, caPEM, err := cluster.NewClientCert(cn)
	require.NoError(t, err)
	kp, err := tls.X509KeyPair(certPEM, keyPEM)
	require.NoError(t, err)
	b, _ := pem.Decode(certPEM)
	c, err := x509.ParseCertificate(b.Bytes)
	require.NoError(t, err)
	return proxyCerts{caPEM: caPEM, cert: c, keyPair: kp}
}

func newTestAPI(t *testing.T, src replicaSource) (*aggAPI, proxyCerts) {
	t.Helper()
	pc := newProxyCerts(t, "front-proxy-client")
	auth, err := newFrontProxyAuth(pc.caPEM, []string{"front-proxy-client"}, nil, "test")
	require.NoError(t, err)
	return newAggAPI(src, auth), pc
}

// do serves one request as if it came through a TLS connection with the
// client certificate (nil: none).
func do(api http.Handler, method, path string, cert *x509.Certificate, header http.Header) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, path, nil)
	r.TLS = &tls.ConnectionState{}
	if cert != nil {
		r.TLS.PeerCertificates = []*x509.Certificate{cert}
	}
	for k, v := range header {
		r.Header[k] = v
	}
	if r.Header.Get("X-Remote-User") == "" {
		r.Header.Set("X-Remote-User", "system:admin")
	}
	w := httptest.NewRecorder()
	api.ServeHTTP(w, r)
	return w
}

func decodeStatus(t *testing.T, w *httptest.ResponseRecorder) metav1.Status {
	t.Helper()
	var s metav1.Status
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &s), w.Body.String())
	assert.Equal(t, "Status", s.Kind)
	assert.Equal(t, metav1.StatusFailure, s.Status)
	assert.Equal(t, int32(w.Code), s.Code)
	return s
}

func TestAggAPIDiscovery(t *testing.T) {
	api, pc := newTestAPI(t, &fakeReplica{id: "r-1", leading: true, term: 3})
	w := do(api, "GET", "/apis", pc.cert, nil)
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	assert.Equal(t, "application/json", w.Header().Get("Content-Type"))
	var groups metav1.APIGroupList
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &groups))
	assert.Equal(t, "APIGroupList", groups.Kind)
	require.Len(t, groups.Groups, 1)
	assert.Equal(t, "example.fastover.io", groups.Groups[0].Name)
	assert.Equal(t, "example.fastover.io/v1alpha1", groups.Groups[0].PreferredVersion.GroupVersion)

	w = do(api, "GET", "/apis/example.fastover.io", pc.cert, nil)
	require.Equal(t, http.StatusOK, w.Code)
	var group metav1.APIGroup
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &group))
	assert.Equal(t, "APIGroup", group.Kind)
	assert.Equal(t, "example.fastover.io", group.Name)

	w = do(api, "GET", "/apis/example.fastover.io/v1alpha1/", pc.cert, nil)
	require.Equal(t, http.StatusOK, w.Code)
	var res metav1.APIResourceList
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &res))
	assert.Equal(t, "example.fastover.io/v1alpha1", res.GroupVersion)
	require.Len(t, res.APIResources, 2)
	for i, want := range [][2]string{{"replicas", "Replica"}, {"policies", "Policy"}} {
		r := res.APIResources[i]
		assert.Equal(t, want[0], r.Name)
		assert.Equal(t, want[1], r.Kind)
		assert.False(t, r.Namespaced)
		assert.ElementsMatch(t, []string{"get", "list", "watch"}, r.Verbs)
	}
}

func TestAggAPIReplicas(t *testing.T) {
	src := &fakeReplica{id: "r-1", leading: true, term: 3}
	api, pc := newTestAPI(t, src)
	w := do(api, "GET", "/apis/example.fastover.io/v1alpha1/replicas", pc.cert, nil)
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	var list ReplicaList
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &list))
	assert.Equal(t, "ReplicaList", list.Kind)
	assert.Equal(t, "example.fastover.io/v1alpha1", list.APIVersion)
	require.Len(t, list.Items, 1)
	assert.Equal(t, "r-1", list.Items[0].Name)
	assert.Equal(t, ReplicaStatus{Leading: true, Term: 3, Leader: "r-1"}, list.Items[0].Status)

	w = do(api, "GET", "/apis/example.fastover.io/v1alpha1/replicas/r-1", pc.cert, nil)
	require.Equal(t, http.StatusOK, w.Code)
	var one Replica
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &one))
	assert.Equal(t, "Replica", one.Kind)
	assert.Equal(t, "r-1", one.Name)

	// A standby says so.
	src.leading = false
	w = do(api, "GET", "/apis/example.fastover.io/v1alpha1/replicas/r-1", pc.cert, nil)
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &one))
	assert.False(t, one.Status.Leading)

	// Told to, a replica that does not lead refuses the resource, not
	// discovery.
	api.refuseStandby = true
	w = do(api, "GET", "/apis/example.fastover.io/v1alpha1/replicas", pc.cert, nil)
	require.Equal(t, http.StatusServiceUnavailable, w.Code)
	assert.Equal(t, metav1.StatusReasonServiceUnavailable, decodeStatus(t, w).Reason)
	assert.Equal(t, "1", w.Header().Get("Retry-After"))
	w = do(api, "GET", "/apis/example.fastover.io/v1alpha1", pc.cert, nil)
	require.Equal(t, http.StatusOK, w.Code)
	src.leading = true
	w = do(api, "GET", "/apis/example.fastover.io/v1alpha1/replicas/r-1", pc.cert, nil)
	require.Equal(t, http.StatusOK, w.Code)
	api.refuseStandby = false

	// kubectl get asks for a Table.
	w = do(api, "GET", "/apis/example.fastover.io/v1alpha1/replicas", pc.cert, http.Header{
		"Accept": {"application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"},
	})
	require.Equal(t, http.StatusOK, w.Code)
	var table metav1.Table
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &table))
	assert.Equal(t, "Table", table.Kind)
	require.Len(t, table.Rows, 1)
	assert.Equal(t, "r-1", table.Rows[0].Cells[0])
}

func TestAggAPIBadRequests(t *testing.T) {
	api, pc := newTestAPI(t, &fakeReplica{id: "r-1"})
	for _, tc := range []struct {
		method, path string
		code         int
		reason       metav1.StatusReason
	}{
		{"GET", "/apis/example.fastover.io/v1alpha1/replicas/r-2", http.StatusNotFound, metav1.StatusReasonNotFound},
		{"GET", "/apis/example.fastover.io/v1alpha1/replicas/r-1/status", http.StatusNotFound, metav1.StatusReasonNotFound},
		{"GET", "/apis/example.fastover.io/v1alpha1/widgets", http.StatusNotFound, metav1.StatusReasonNotFound},
		{"GET", "/apis/example.fastover.io/v2", http.StatusNotFound, metav1.StatusReasonNotFound},
		{"GET", "/apis/other.io", http.StatusNotFound, metav1.StatusReasonNotFound},
		{"GET", "/apis/example.fastover.io/v1alpha1/namespaces/x/replicas", http.StatusNotFound, metav1.StatusReasonNotFound},
		{"POST", "/apis/example.fastover.io/v1alpha1/replicas", http.StatusMethodNotAllowed, metav1.StatusReasonMethodNotAllowed},
		{"PUT", "/apis/example.fastover.io/v1alpha1/replicas/r-1", http.StatusMethodNotAllowed, metav1.StatusReasonMethodNotAllowed},
		{"DELETE", "/apis/example.fastover.io/v1alpha1/replicas/r-1", http.StatusMethodNotAllowed, metav1.StatusReasonMethodNotAllowed},
		{"PATCH", "/apis", http.StatusMethodNotAllowed, metav1.StatusReasonMethodNotAllowed},
		{"GET", "/apis/example.fastover.io/v1alpha1/replicas?watch=true&timeoutSeconds=soon", http.StatusBadRequest, metav1.StatusReasonBadRequest},
	} {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			w := do(api, tc.method, tc.path, pc.cert, nil)
			require.Equal(t, tc.code, w.Code, w.Body.String())
			s := decodeStatus(t, w)
			assert.Equal(t, tc.reason, s.Reason)
			assert.NotEmpty(t, s.Message)
		})
	}
}

func TestAggAPIAuthentication(t *testing.T) {
	api, pc := newTestAPI(t, &fakeReplica{id: "r-1"})
	stranger := newProxyCerts(t, "front-proxy-client") // right name, wrong CA
	for name, tc := range map[string]struct {
		cert   *x509.Certificate
		header http.Header
	}{
		"no certificate":       {},
		"another CA":           {cert: stranger.cert},
		"no user":              {cert: pc.cert, header: http.Header{"X-Remote-User": {" "}}},
		"server's certificate": {cert: serverCert(t)},
	} {
		t.Run(name, func(t *testing.T) {
			w := do(api, "GET", "/apis/example.fastover.io/v1alpha1/replicas", tc.cert, tc.header)
			require.Equal(t, http.StatusUnauthorized, w.Code, w.Body.String())
			assert.Equal(t, metav1.StatusReasonUnauthorized, decodeStatus(t, w).Reason)
			assert.NotContains(t, w.Body.String(), "r-1")
		})
	}

	// A certificate of the right CA with a name not allowed.
	other := newProxyCerts(t, "someone")
	auth, err := newFrontProxyAuth(other.caPEM, []string{"front-proxy-client"}, nil, "test")
	require.NoError(t, err)
	w := do(newAggAPI(&fakeReplica{id: "r-1"}, auth), "GET", "/apis", other.cert, nil)
	require.Equal(t, http.StatusUnauthorized, w.Code)
	assert.Contains(t, decodeStatus(t, w).Message, "allowed names")
	// No allowed names: any name the CA signed.
	auth, err = newFrontProxyAuth(other.caPEM, nil, nil, "test")
	require.NoError(t, err)
	w = do(newAggAPI(&fakeReplica{id: "r-1"}, auth), "GET", "/apis", other.cert, nil)
	require.Equal(t, http.StatusOK, w.Code)
}

// TestAggAPIAuthenticationPerConnection: over TLS, with withConnVerdict,
// a connection's client certificate is verified on its first request
// only; each connection has its own verdict.
func TestAggAPIAuthenticationPerConnection(t *testing.T) {
	api, pc := newTestAPI(t, &fakeReplica{id: "r-1"})
	srv := httptest.NewUnstartedServer(api)
	srv.EnableHTTP2 = true
	srv.TLS = &tls.Config{ClientAuth: tls.RequestClientCert, MinVersion: tls.VersionTLS12}
	srv.Config.ConnContext = withConnVerdict
	srv.StartTLS()
	defer srv.Close()
	client := func(cert tls.Certificate) *http.Client {
		c := srv.Client()
		tr := c.Transport.(*http.Transport).Clone()
		tr.TLSClientConfig.Certificates = []tls.Certificate{cert}
		c.Transport = tr
		return c
	}
	get := func(c *http.Client) int {
		req, err := http.NewRequest(http.MethodGet, srv.URL+"/apis/example.fastover.io/v1alpha1/replicas", nil)
		require.NoError(t, err)
		req.Header.Set("X-Remote-User", "agent")
		resp, err := c.Do(req)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		assert.Equal(t, 2, resp.ProtoMajor, "HTTP/2: one connection")
		return resp.StatusCode
	}
	a := client(pc.keyPair)
	for range 5 {
		require.Equal(t, http.StatusOK, get(a))
	}
	assert.EqualValues(t, 1, api.auth.verified.Load(), "five requests on one connection: one verification")
	require.Equal(t, http.StatusOK, get(client(pc.keyPair)))
	assert.EqualValues(t, 2, api.auth.verified.Load(), "a second connection: its own verification")
	// A refused certificate stays refused on its connection.
	b := client(newProxyCerts(t, "front-proxy-client").keyPair) // another CA
	for range 3 {
		require.Equal(t, http.StatusUnauthorized, get(b))
	}
	assert.EqualValues(t, 3, api.auth.verified.Load())
}

func serverCert(t *testing.T) *x509.Certificate {
	certPEM, _, _, err := cluster.NewServingCert("x.y.svc")
	require.NoError(t, err)
	b, _ := pem.Decode(certPEM)
	c, err := x509.ParseCertificate(b.Bytes)
	require.NoError(t, err)
	return c
}

func TestLoadFrontProxyAuth(t *testing.T) {
	pc := newProxyCerts(t, "front-proxy-client")
	ctx := context.Background()

	// From the ConfigMap, as kube-apiserver publishes it.
	client := fake.NewClientset(&corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "extension-apiserver-authentication"},
		Data: map[string]string{
			"requestheader-client-ca-file":   string(pc.caPEM),
			"requestheader-allowed-names":    `["front-proxy-client"]`,
			"requestheader-username-headers": `["X-Remote-User"]`,
		},
	})
	auth, err := loadFrontProxyAuth(ctx, client, "", "")
	require.NoError(t, err)
	assert.Equal(t, []string{"front-proxy-client"}, auth.allowed)
	assert.Equal(t, []string{"X-Remote-User"}, auth.userHeaders)

	// No ConfigMap: an error that says what to grant.
	_, err = loadFrontProxyAuth(ctx, fake.NewClientset(), "", "")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "extension-apiserver-authentication-reader")

	// A ConfigMap without the request-header CA, or with bad lists.
	for data, want := range map[string]string{
		"":        "no requestheader-client-ca-file",
		"garbage": "no PEM certificate",
	} {
		c := fake.NewClientset(&corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "extension-apiserver-authentication"},
			Data:       map[string]string{"requestheader-client-ca-file": data},
		})
		_, err = loadFrontProxyAuth(ctx, c, "", "")
		require.Error(t, err)
		assert.Contains(t, err.Error(), want)
	}
	c := fake.NewClientset(&corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "extension-apiserver-authentication"},
		Data:       map[string]string{"requestheader-client-ca-file": string(pc.caPEM), "requestheader-allowed-names": "front-proxy-client"},
	})
	_, err = loadFrontProxyAuth(ctx, c, "", "")
	require.ErrorContains(t, err, "JSON list")

	// From a file, with names from the flag.
	dir := t.TempDir()
	caFile := filepath.Join(dir, "ca.crt")
	require.NoError(t, os.WriteFile(caFile, pc.caPEM, 0o600))
	auth, err = loadFrontProxyAuth(ctx, nil, caFile, " a, b ,")
	require.NoError(t, err)
	assert.Equal(t, []string{"a", "b"}, auth.allowed)
	_, err = loadFrontProxyAuth(ctx, nil, filepath.Join(dir, "missing"), "")
	require.ErrorContains(t, err, "--requestheader-client-ca-file")
}

func TestTLSFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--tls-cert-file=a"},
		{"--tls-private-key-file=b"},
		{"--requestheader-client-ca-file=c"},
		{"--tls-cert-file=a", "--tls-private-key-file=b", "--requestheader-allowed-names=x"},
		{"--api-standby=maybe"},
	} {
		_, err := parseFlags(append([]string{"--namespace=ns"}, args...), io.Discard)
		assert.Error(t, err, "%v", args)
	}
	o, err := parseFlags([]string{"--namespace=ns", "--tls-cert-file=a", "--tls-private-key-file=b"}, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, "a", o.tlsCert)
}

// TestAggAPIOverTLS serves the API over TLS as the replica does and reads
// it with client-go's discovery client presenting the front proxy's
// certificate, and / without one.
// startAPIServer serves mux, with the aggregated API of src added as
// serveAPI adds it, over HTTPS (HTTP/2 too if h2), and returns the server,
// a rest.Config that reaches it as the aggregation layer does (its client
// certificate, a user header), and the server's CA.
func startAPIServer(t *testing.T, mux *http.ServeMux, src replicaSource, h2 bool, tune ...func(*options)) (*httptest.Server, *rest.Config, []byte) {
	t.Helper()
	certPEM, keyPEM, caPEM, err := cluster.NewServingCert("127.0.0.1")
	require.NoError(t, err)
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	require.NoError(t, os.WriteFile(certFile, certPEM, 0o600))
	require.NoError(t, os.WriteFile(keyFile, keyPEM, 0o600))
	pc := newProxyCerts(t, "front-proxy-client")
	caFile := filepath.Join(dir, "proxy-ca.crt")
	require.NoError(t, os.WriteFile(caFile, pc.caPEM, 0o600))

	o := &options{tlsCert: certFile, tlsKey: keyFile, requestCA: caFile, allowedNames: "front-proxy-client"}
	for _, f := range tune {
		f(o)
	}
	srv := httptest.NewUnstartedServer(mux)
	srv.TLS, err = serveAPI(mux, o, nil, src)
	require.NoError(t, err)
	srv.EnableHTTP2 = h2
	srv.StartTLS()
	t.Cleanup(srv.Close)

	cfg := &rest.Config{Host: srv.URL, TLSClientConfig: rest.TLSClientConfig{
		CAData: caPEM, CertData: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: pc.cert.Raw}), KeyData: mustKeyPEM(t, pc.keyPair),
	}, WrapTransport: func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			r = r.Clone(r.Context())
			r.Header.Set("X-Remote-User", "admin")
			return rt.RoundTrip(r)
		})
	}}
	return srv, cfg, caPEM
}

func TestAggAPIOverTLS(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "r-1\n") })
	srv, cfg, caPEM := startAPIServer(t, mux, &fakeReplica{id: "r-1", leading: true}, false)
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	require.NoError(t, err)
	res, err := dc.ServerResourcesForGroupVersion("example.fastover.io/v1alpha1")
	require.NoError(t, err)
	require.Len(t, res.APIResources, 2)
	assert.Equal(t, "replicas", res.APIResources[0].Name)
	groups, err := dc.ServerGroups()
	require.NoError(t, err)
	require.Len(t, groups.Groups, 1)

	// Without a client certificate: / answers, /apis does not.
	plain := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool(t, caPEM), MinVersion: tls.VersionTLS12}}}
	resp, err := plain.Get(srv.URL + "/")
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "r-1\n", string(b))
	resp, err = plain.Get(srv.URL + "/apis")
	require.NoError(t, err)
	_ = resp.Body.Close()
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func mustKeyPEM(t *testing.T, kp tls.Certificate) []byte {
	der, err := x509.MarshalPKCS8PrivateKey(kp.PrivateKey)
	require.NoError(t, err)
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
}

func pool(t *testing.T, caPEM []byte) *x509.CertPool {
	p := x509.NewCertPool()
	require.True(t, p.AppendCertsFromPEM(caPEM))
	return p
}
