package certs

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestIssueVerifies(t *testing.T) {
	ca, err := NewCA("test-ca", time.Hour)
	require.NoError(t, err)
	kp, err := ca.Issue([]string{"webhook.fastover-system.svc", "127.0.0.1"}, 2*time.Hour)
	require.NoError(t, err)

	pair, err := tls.X509KeyPair(kp.CertPEM, kp.KeyPEM)
	require.NoError(t, err)
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	require.NoError(t, err)
	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(ca.CertPEM))
	for _, host := range []string{"webhook.fastover-system.svc", "127.0.0.1"} {
		_, err = leaf.Verify(x509.VerifyOptions{DNSName: host, Roots: pool})
		assert.NoError(t, err, host)
	}
	_, err = leaf.Verify(x509.VerifyOptions{DNSName: "other.svc", Roots: pool})
	assert.Error(t, err)
	assert.False(t, kp.NotAfter.After(ca.cert.NotAfter), "never outlives its CA")
}

func TestIssueClientVerifiesForClientsOnly(t *testing.T) {
	ca, err := NewCA("test-ca", time.Hour)
	require.NoError(t, err)
	kp, err := ca.IssueClient("system:node:node-a", []string{"system:nodes"}, 2*time.Hour)
	require.NoError(t, err)

	pair, err := tls.X509KeyPair(kp.CertPEM, kp.KeyPEM)
	require.NoError(t, err)
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	require.NoError(t, err)
	assert.Equal(t, "system:node:node-a", leaf.Subject.CommonName)
	assert.Equal(t, []string{"system:nodes"}, leaf.Subject.Organization)
	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(ca.CertPEM))
	_, err = leaf.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	assert.NoError(t, err)
	_, err = leaf.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	assert.Error(t, err, "a client certificate serves nothing")
	assert.False(t, kp.NotAfter.After(ca.cert.NotAfter), "never outlives its CA")

	_, err = ca.IssueClient("", nil, time.Hour)
	assert.ErrorContains(t, err, "common name")
	_, err = ca.IssueClient("user", nil, 0)
	assert.ErrorContains(t, err, "validity")
}

func TestLoadCARoundTrip(t *testing.T) {
	ca, err := NewCA("test-ca", time.Hour)
	require.NoError(t, err)
	keyPEM, err := ca.KeyPEM()
	require.NoError(t, err)
	loaded, err := LoadCA(ca.CertPEM, keyPEM)
	require.NoError(t, err)
	kp, err := loaded.Issue([]string{"a"}, time.Hour)
	require.NoError(t, err)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.CertPEM)
	block, _ := pem.Decode(kp.CertPEM)
	leaf, err := x509.ParseCertificate(block.Bytes)
	require.NoError(t, err)
	_, err = leaf.Verify(x509.VerifyOptions{DNSName: "a", Roots: pool})
	assert.NoError(t, err)

	other, err := NewCA("other", time.Hour)
	require.NoError(t, err)
	_, err = LoadCA(other.CertPEM, keyPEM)
	assert.ErrorContains(t, err, "does not match")
	_, err = LoadCA([]byte("junk"), keyPEM)
	assert.Error(t, err)
	_, err = LoadCA(ca.CertPEM, []byte("junk"))
	assert.Error(t, err)
}

func TestBadArguments(t *testing.T) {
	_, err := NewCA("x", 0)
	assert.Error(t, err)
	ca, err := NewCA("x", time.Hour)
	require.NoError(t, err)
	_, err = ca.Issue(nil, time.Hour)
	assert.Error(t, err)
	_, err = ca.Issue([]string{"a"}, -time.Second)
	assert.Error(t, err)
}

func TestWriteDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "certs")
	ca, err := NewCA("x", time.Hour)
	require.NoError(t, err)
	kp, err := ca.Issue([]string{"localhost"}, time.Hour)
	require.NoError(t, err)
	require.NoError(t, WriteDir(dir, kp, ca))
	_, err = tls.LoadX509KeyPair(filepath.Join(dir, CertFile), filepath.Join(dir, KeyFile))
	require.NoError(t, err)
	info, err := os.Stat(filepath.Join(dir, KeyFile))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), info.Mode().Perm())
	got, err := os.ReadFile(filepath.Join(dir, CAFile))
	require.NoError(t, err)
	assert.Equal(t, ca.CertPEM, got)
	assertOneGeneration(t, dir, CertFile, KeyFile, CAFile)
}

func TestLoadOrCreateCAReuses(t *testing.T) {
	dir := t.TempDir()
	first, created, err := LoadOrCreateCA(dir, "ca", time.Hour)
	require.NoError(t, err)
	assert.True(t, created)
	again, created, err := LoadOrCreateCA(dir, "ca", time.Hour)
	require.NoError(t, err)
	assert.False(t, created)
	assert.Equal(t, first.CertPEM, again.CertPEM, "the same CA, so the caBundle stays")

	require.NoError(t, os.Remove(filepath.Join(dir, CAKeyFile)))
	_, _, err = LoadOrCreateCA(dir, "ca", time.Hour)
	assert.ErrorContains(t, err, "missing")
}
