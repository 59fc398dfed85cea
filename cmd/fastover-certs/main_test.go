package main

import (
	"bytes"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fastover/fastover/certs"
)

// certsRun runs the command with args; it returns stdout and stderr.
func certsRun(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	err := run(args, &stdout, &stderr)
	return stdout.String(), stderr.String(), err
}

// servingLeaf loads the pair in dir, as the webhook does, and verifies it
// for host against the CA certificate caPEM.
func servingLeaf(t *testing.T, dir string, caPEM []byte, host string) *x509.Certificate {
	t.Helper()
	pair, err := tls.LoadX509KeyPair(filepath.Join(dir, certs.CertFile), filepath.Join(dir, certs.KeyFile))
	require.NoError(t, err)
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	require.NoError(t, err)
	roots := x509.NewCertPool()
	require.True(t, roots.AppendCertsFromPEM(caPEM))
	_, err = leaf.Verify(x509.VerifyOptions{DNSName: host, Roots: roots})
	require.NoError(t, err)
	return leaf
}

// The CA key is kept out of the cert dir by default; the cert dir holds
// what the webhook needs and nothing that signs.
func TestDefaultCADirIsNotTheCertDir(t *testing.T) {
	base := t.TempDir()
	certDir := filepath.Join(base, "certs")
	out, _, err := certsRun(t, "--cert-dir="+certDir, "--hosts=webhook.svc")
	require.NoError(t, err)
	caDir := certDir + "-ca"
	assert.Contains(t, out, "made a new CA in "+caDir)

	assert.NoFileExists(t, filepath.Join(certDir, certs.CAKeyFile), "the CA key sits beside the serving key")
	assert.FileExists(t, filepath.Join(caDir, certs.CAKeyFile))
	info, err := os.Stat(caDir)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o700), info.Mode().Perm())
	caPEM, err := os.ReadFile(filepath.Join(caDir, certs.CAFile))
	require.NoError(t, err)
	inCertDir, err := os.ReadFile(filepath.Join(certDir, certs.CAFile))
	require.NoError(t, err)
	assert.Equal(t, caPEM, inCertDir, "ca.crt, public, is still in the cert dir")
	first := servingLeaf(t, certDir, caPEM, "webhook.svc")

	// Renewal: the same CA from the same default place.
	out, _, err = certsRun(t, "--cert-dir="+certDir, "--hosts=webhook.svc")
	require.NoError(t, err)
	assert.NotContains(t, out, "made a new CA")
	again := servingLeaf(t, certDir, caPEM, "webhook.svc")
	assert.NotEqual(t, first.SerialNumber, again.SerialNumber)
}

func TestCADirInTheCertDirIsRefused(t *testing.T) {
	base := t.TempDir()
	certDir := filepath.Join(base, "certs")
	require.NoError(t, os.Mkdir(certDir, 0o755))
	require.NoError(t, os.Symlink(certDir, filepath.Join(base, "link")))
	for _, caDir := range []string{
		certDir,
		certDir + "/",
		filepath.Join(certDir, "ca"),
		filepath.Join(base, "link"),     // the cert dir through a link
		filepath.Join(base, "link/sub"), // inside it through a link
	} {
		_, _, err := certsRun(t, "--cert-dir="+certDir, "--ca-dir="+caDir, "--hosts=webhook.svc")
		if assert.Error(t, err, "--ca-dir=%s accepted", caDir) {
			assert.Contains(t, err.Error(), "inside it")
		}
	}
	entries, err := os.ReadDir(certDir)
	require.NoError(t, err)
	assert.Empty(t, entries, "nothing written")

	// Elsewhere is fine, a parent of the cert dir too.
	_, _, err = certsRun(t, "--cert-dir="+certDir, "--ca-dir="+base, "--hosts=webhook.svc")
	require.NoError(t, err)
	assert.FileExists(t, filepath.Join(base, certs.CAKeyFile))
	assert.NoFileExists(t, filepath.Join(certDir, certs.CAKeyFile))
}

// A cert dir written by an older fastover-certs has ca.crt and ca.key
// beside tls.crt and tls.key. The next run moves the CA out: the same CA,
// so the caBundle already installed keeps working.
func TestOldCertDirGivesUpItsCAKey(t *testing.T) {
	certDir := filepath.Join(t.TempDir(), "certs")
	ca, err := certs.NewCA("old", time.Hour)
	require.NoError(t, err)
	keyPEM, err := ca.KeyPEM()
	require.NoError(t, err)
	kp, err := ca.Issue([]string{"webhook.svc"}, time.Hour)
	require.NoError(t, err)
	require.NoError(t, os.MkdirAll(certDir, 0o755))
	for name, data := range map[string][]byte{
		certs.CertFile: kp.CertPEM, certs.KeyFile: kp.KeyPEM, certs.CAFile: ca.CertPEM, certs.CAKeyFile: keyPEM,
	} {
		require.NoError(t, os.WriteFile(filepath.Join(certDir, name), data, 0o600))
	}

	out, _, err := certsRun(t, "--cert-dir="+certDir, "--hosts=webhook.svc")
	require.NoError(t, err)
	assert.Contains(t, out, "moved the CA key")
	assert.NotContains(t, out, "made a new CA")
	assert.NoFileExists(t, filepath.Join(certDir, certs.CAKeyFile))
	moved, err := certs.ReadCA(certDir + "-ca")
	require.NoError(t, err)
	assert.Equal(t, ca.CertPEM, moved.CertPEM, "the same CA")
	servingLeaf(t, certDir, ca.CertPEM, "webhook.svc")

	// Two different CAs: the command cannot choose, and changes nothing.
	other, err := certs.NewCA("other", time.Hour)
	require.NoError(t, err)
	otherKey, err := other.KeyPEM()
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(certDir, certs.CAKeyFile), otherKey, 0o600))
	require.NoError(t, os.Remove(filepath.Join(certDir, certs.CAFile)))
	require.NoError(t, os.WriteFile(filepath.Join(certDir, certs.CAFile), other.CertPEM, 0o644))
	before, err := os.ReadFile(filepath.Join(certDir, certs.CertFile))
	require.NoError(t, err)
	_, _, err = certsRun(t, "--cert-dir="+certDir, "--hosts=webhook.svc")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "two different CAs")
	after, err := os.ReadFile(filepath.Join(certDir, certs.CertFile))
	require.NoError(t, err)
	assert.Equal(t, before, after)
	assert.FileExists(t, filepath.Join(certDir, certs.CAKeyFile))
}

// writeCA writes into dir a CA valid from notBefore to notAfter.
func writeCA(t *testing.T, dir string, notBefore, notAfter time.Time) {
	t.Helper()
	ca, err := certs.NewCA("seed", time.Hour)
	require.NoError(t, err)
	keyPEM, err := ca.KeyPEM()
	require.NoError(t, err)
	block, _ := pem.Decode(keyPEM)
	key, err := x509.ParseECPrivateKey(block.Bytes)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(7), NotBefore: notBefore, NotAfter: notAfter,
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true, IsCA: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	require.NoError(t, os.MkdirAll(dir, 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(dir, certs.CAKeyFile), keyPEM, 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, certs.CAFile), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644))
}

// An expired CA (or one not valid yet) is an error that says so, and no
// serving certificate is written: one it signed would be refused anyway.
func TestInvalidCAIsAnError(t *testing.T) {
	now := time.Now()
	for name, span := range map[string][2]time.Time{
		"expired at":       {now.Add(-48 * time.Hour), now.Add(-time.Hour)},
		"not valid before": {now.Add(time.Hour), now.Add(48 * time.Hour)},
	} {
		t.Run(name, func(t *testing.T) {
			base := t.TempDir()
			certDir, caDir := filepath.Join(base, "certs"), filepath.Join(base, "ca")
			writeCA(t, caDir, span[0], span[1])
			_, _, err := certsRun(t, "--cert-dir="+certDir, "--ca-dir="+caDir, "--hosts=webhook.svc")
			require.Error(t, err, "a serving certificate from an invalid CA")
			assert.Contains(t, err.Error(), name)
			assert.NoFileExists(t, filepath.Join(certDir, certs.CertFile))
		})
	}
}

// A CA that expires before --validity is over: the certificate ends with
// it, and the command says so.
func TestValidityClampedToTheCA(t *testing.T) {
	certDir := filepath.Join(t.TempDir(), "certs")
	_, stderr, err := certsRun(t, "--cert-dir="+certDir, "--hosts=webhook.svc", "--ca-validity=2h", "--validity=2160h")
	require.NoError(t, err)
	assert.Contains(t, stderr, "WARNING: the CA in "+certDir+"-ca expires at")
	ca, err := certs.ReadCA(certDir + "-ca")
	require.NoError(t, err)
	leaf := servingLeaf(t, certDir, ca.CertPEM, "webhook.svc")
	assert.True(t, leaf.NotAfter.Equal(ca.NotAfter()), "%s != %s", leaf.NotAfter, ca.NotAfter())

	_, stderr, err = certsRun(t, "--cert-dir="+certDir, "--hosts=webhook.svc", "--validity=1h")
	require.NoError(t, err)
	assert.Empty(t, stderr)
}

func TestBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{},
		{"--cert-dir=x"},
		{"--cert-dir=x", "--hosts=,"},
		{"--cert-dir=x", "--hosts=a", "--validity=0s"},
		{"--cert-dir=x", "--hosts=a", "--ca-validity=-1h"},
		{"--cert-dir=/", "--hosts=a"},
		{"--cert-dir=x", "--hosts=a", "extra"},
	} {
		_, _, err := certsRun(t, args...)
		assert.Error(t, err, "%q", args)
	}
}
