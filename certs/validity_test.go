package certs

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// caTemplate is a CA certificate as NewCA makes it, valid from notBefore
// to notAfter.
func caTemplate(notBefore, notAfter time.Time) *x509.Certificate {
	return &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "test-ca"},
		NotBefore:             notBefore,
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
}

// selfSigned signs tmpl with a new key; it returns the certificate and key
// PEM-encoded, and the CA they make (whatever its validity).
func selfSigned(t testing.TB, tmpl *x509.Certificate) (certPEM, keyPEM []byte, ca *CA) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	keyDER, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	certPEM = pemBlock("CERTIFICATE", der)
	return certPEM, pemBlock("EC PRIVATE KEY", keyDER), &CA{cert: cert, key: key, CertPEM: certPEM}
}

func TestLoadCARefusesWhatCannotSign(t *testing.T) {
	now := time.Now()
	expiredCert, expiredKey, _ := selfSigned(t, caTemplate(now.Add(-48*time.Hour), now.Add(-time.Hour)))
	futureCert, futureKey, _ := selfSigned(t, caTemplate(now.Add(time.Hour), now.Add(48*time.Hour)))
	noSign := caTemplate(now.Add(-time.Hour), now.Add(time.Hour))
	noSign.KeyUsage = x509.KeyUsageDigitalSignature
	noSignCert, noSignKey, _ := selfSigned(t, noSign)
	leaf := caTemplate(now.Add(-time.Hour), now.Add(time.Hour))
	leaf.IsCA = false
	leaf.KeyUsage = x509.KeyUsageDigitalSignature
	leafCert, leafKey, _ := selfSigned(t, leaf)
	goodCert, goodKey, _ := selfSigned(t, caTemplate(now.Add(-time.Hour), now.Add(time.Hour)))

	for _, tc := range []struct {
		name          string
		certPEM, key  []byte
		wantErrSubstr string
	}{
		{"expired", expiredCert, expiredKey, "expired at"},
		{"not yet valid", futureCert, futureKey, "not valid before"},
		{"no certificate signing", noSignCert, noSignKey, "does not allow signing"},
		{"not a CA", leafCert, leafKey, "not a CA"},
		{"key of another CA", goodCert, expiredKey, "does not match"},
		{"two certificates", append(append([]byte{}, goodCert...), expiredCert...), goodKey, "more than one"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ca, err := LoadCA(tc.certPEM, tc.key)
			require.Error(t, err, "LoadCA accepted a CA that must not sign")
			assert.Nil(t, ca)
			assert.Contains(t, err.Error(), tc.wantErrSubstr)
		})
	}
	_, err := LoadCA(goodCert, goodKey)
	assert.NoError(t, err)
}

func TestLoadCAAcceptsPKCS8(t *testing.T) {
	ca, err := NewCA("pkcs8", time.Hour)
	require.NoError(t, err)
	der, err := x509.MarshalPKCS8PrivateKey(ca.key)
	require.NoError(t, err)
	loaded, err := LoadCA(ca.CertPEM, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}))
	require.NoError(t, err)
	assert.Equal(t, ca.CertPEM, loaded.CertPEM)
}

// A CA loaded while valid may have expired by the time it issues.
func TestIssueRefusesAnInvalidCA(t *testing.T) {
	now := time.Now()
	_, _, expired := selfSigned(t, caTemplate(now.Add(-48*time.Hour), now.Add(-time.Second)))
	kp, err := expired.Issue([]string{"a.svc"}, time.Hour)
	require.Error(t, err, "an expired CA issued a certificate")
	assert.Nil(t, kp)
	assert.Contains(t, err.Error(), "expired at")

	_, _, future := selfSigned(t, caTemplate(now.Add(time.Hour), now.Add(48*time.Hour)))
	_, err = future.Issue([]string{"a.svc"}, time.Hour)
	require.Error(t, err, "a CA not valid yet issued a certificate")
	assert.Contains(t, err.Error(), "not valid before")

	_, err = (&CA{CertPEM: []byte("x")}).Issue([]string{"a.svc"}, time.Hour)
	assert.ErrorContains(t, err, "no certificate and key")
}

// A serving certificate lies within its CA's validity, at both ends.
func TestIssueStaysWithinTheCA(t *testing.T) {
	now := time.Now().Truncate(time.Second)
	_, _, ca := selfSigned(t, caTemplate(now.Add(-time.Minute), now.Add(time.Hour)))
	kp, err := ca.Issue([]string{"a.svc"}, 90*24*time.Hour)
	require.NoError(t, err)
	block, _ := pem.Decode(kp.CertPEM)
	leaf, err := x509.ParseCertificate(block.Bytes)
	require.NoError(t, err)
	assert.True(t, leaf.NotAfter.Equal(ca.NotAfter()), "NotAfter %s, CA's %s", leaf.NotAfter, ca.NotAfter())
	assert.True(t, kp.NotAfter.Equal(leaf.NotAfter), "KeyPair.NotAfter %s, certificate's %s", kp.NotAfter, leaf.NotAfter)
	assert.False(t, leaf.NotBefore.Before(ca.cert.NotBefore), "NotBefore %s before the CA's %s", leaf.NotBefore, ca.cert.NotBefore)

	// Shorter than the CA: as asked, to the second the certificate holds.
	kp, err = ca.Issue([]string{"a.svc"}, 10*time.Minute)
	require.NoError(t, err)
	block, _ = pem.Decode(kp.CertPEM)
	leaf, err = x509.ParseCertificate(block.Bytes)
	require.NoError(t, err)
	assert.True(t, kp.NotAfter.Equal(leaf.NotAfter), "KeyPair.NotAfter %s, certificate's %s", kp.NotAfter, leaf.NotAfter)
	assert.WithinDuration(t, time.Now().Add(10*time.Minute), leaf.NotAfter, time.Minute)
}
