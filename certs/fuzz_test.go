package certs

import (
	"crypto/x509"
	"encoding/pem"
	"testing"
	"time"
)

// FuzzLoadCA feeds LoadCA any bytes as certificate and key: it returns a
// CA or an error, never panics, and a CA it returns is valid now and
// issues certificates that verify against it.
func FuzzLoadCA(f *testing.F) {
	ca, err := NewCA("seed", time.Hour)
	if err != nil {
		f.Fatal(err)
	}
	keyPEM, err := ca.KeyPEM()
	if err != nil {
		f.Fatal(err)
	}
	pkcs8, err := x509.MarshalPKCS8PrivateKey(ca.key)
	if err != nil {
		f.Fatal(err)
	}
	other, err := NewCA("other", time.Hour)
	if err != nil {
		f.Fatal(err)
	}
	leaf, err := ca.Issue([]string{"a.svc"}, time.Hour)
	if err != nil {
		f.Fatal(err)
	}
	now := time.Now()
	expiredCert, expiredKey, _ := selfSigned(f, caTemplate(now.Add(-2*time.Hour), now.Add(-time.Hour)))

	f.Add(ca.CertPEM, keyPEM)
	f.Add(ca.CertPEM, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pkcs8}))
	f.Add(other.CertPEM, keyPEM)
	f.Add(leaf.CertPEM, leaf.KeyPEM)
	f.Add(expiredCert, expiredKey)
	f.Add(append(append([]byte{}, ca.CertPEM...), other.CertPEM...), keyPEM)
	f.Add(append([]byte("junk\n"), ca.CertPEM...), append(append([]byte{}, leaf.CertPEM...), keyPEM...))
	f.Add([]byte("-----BEGIN CERTIFICATE-----\n\n-----END CERTIFICATE-----\n"), []byte("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"))
	f.Add([]byte{}, []byte{})

	f.Fuzz(func(t *testing.T, certPEM, keyPEM []byte) {
		loaded, err := LoadCA(certPEM, keyPEM)
		if err != nil {
			if loaded != nil {
				t.Fatal("a CA and an error")
			}
			return
		}
		if !time.Now().Before(loaded.NotAfter()) {
			t.Fatalf("loaded a CA that expired at %s", loaded.NotAfter())
		}
		kp, err := loaded.Issue([]string{"a.svc"}, time.Hour)
		if err != nil {
			t.Fatalf("a loaded CA cannot issue: %v", err)
		}
		block, _ := pem.Decode(kp.CertPEM)
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		if cert.NotAfter.After(loaded.NotAfter()) {
			t.Fatalf("the certificate outlives its CA: %s > %s", cert.NotAfter, loaded.NotAfter())
		}
		roots := x509.NewCertPool()
		if !roots.AppendCertsFromPEM(loaded.CertPEM) {
			t.Fatal("the CA's CertPEM does not parse")
		}
		if _, err := cert.Verify(x509.VerifyOptions{DNSName: "a.svc", Roots: roots}); err != nil {
			t.Fatalf("the issued certificate does not verify: %v", err)
		}
	})
}
