package cluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestNewServingCert(t *testing.T) {
	certPEM, keyPEM, caPEM, err := NewServingCert("api.ns.svc", "192.0.2.1")
	require.NoError(t, err)
	_, err = tls.X509KeyPair(certPEM, keyPEM)
	require.NoError(t, err)
	roots := x509.NewCertPool()
	require.True(t, roots.AppendCertsFromPEM(caPEM))
	b, _ := pem.Decode(certPEM)
	require.NotNil(t, b)
	cert, err := x509.ParseCertificate(b.Bytes)
	require.NoError(t, err)
	_, err = cert.Verify(x509.VerifyOptions{DNSName: "api.ns.svc", Roots: roots})
	require.NoError(t, err)
	_, err = cert.Verify(x509.VerifyOptions{DNSName: "other.ns.svc", Roots: roots})
	require.Error(t, err)

	_, _, _, err = NewServingCert()
	require.Error(t, err)
}

func TestIssueClientCert(t *testing.T) {
	_, _, caPEM, err := NewServingCert("x")
	require.NoError(t, err)
	// A client certificate signed by a CA of its own verifies for client
	// authentication only, with its common name.
	dir := t.TempDir()
	p, err := newPKI(dir, "127.0.0.1", netip.MustParseAddr("10.96.0.1"))
	require.NoError(t, err)
	roots := x509.NewCertPool()
	require.True(t, roots.AppendCertsFromPEM(p.frontProxyCA))
	cert := readCert(t, p.proxyCert)
	assert.Equal(t, FrontProxyClientCN, cert.Subject.CommonName)
	_, err = cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	require.NoError(t, err)
	_, err = cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	require.Error(t, err)
	// The front-proxy CA is not the cluster's, nor the serving one's.
	other := x509.NewCertPool()
	require.True(t, other.AppendCertsFromPEM(p.caCert))
	require.True(t, other.AppendCertsFromPEM(caPEM))
	_, err = cert.Verify(x509.VerifyOptions{Roots: other, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	require.Error(t, err)
}

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	pair, err := tls.LoadX509KeyPair(path, path[:len(path)-len(".crt")]+".key")
	require.NoError(t, err)
	cert, err := x509.ParseCertificate(pair.Certificate[0])
	require.NoError(t, err)
	return cert
}

// TestAggregationLayer: kube-apiserver publishes the request-header
// configuration an aggregated API server reads, with the front-proxy CA.
func TestAggregationLayer(t *testing.T) {
	env := Start(t, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cm, err := env.Client.CoreV1().ConfigMaps(metav1.NamespaceSystem).Get(ctx, "extension-apiserver-authentication", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, string(env.FrontProxyCA()), cm.Data["requestheader-client-ca-file"])
	assert.Equal(t, `["front-proxy-client"]`, cm.Data["requestheader-allowed-names"])
	assert.Equal(t, `["X-Remote-User"]`, cm.Data["requestheader-username-headers"])
	certFile, keyFile := env.FrontProxyClientFiles()
	_, err = tls.LoadX509KeyPair(certFile, keyFile)
	require.NoError(t, err)
}
