package certs

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"time"
)

// File names in a certificate directory, as the webhook reads them.
const (
	CertFile = "tls.crt"
	KeyFile  = "tls.key"
	CAFile   = "ca.crt"
)

// CA is a certificate authority that issues serving certificates (and
// the client certificates of a test's control plane).
type CA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	// CertPEM is the CA certificate, PEM-encoded: the caBundle of a
	// webhook configuration.
	CertPEM []byte
}

// KeyPair is a certificate and its private key, PEM-encoded.
type KeyPair struct {
	CertPEM []byte
	KeyPEM  []byte
	// Serial is the certificate's serial number.
	Serial *big.Int
	// NotAfter is when it expires.
	NotAfter time.Time
}

// NewCA makes a self-signed CA valid for the given duration.
func NewCA(commonName string, validity time.Duration) (*CA, error) {
	if validity <= 0 {
		return nil, fmt.Errorf("CA validity must be positive, got %v", validity)
	}
	key, serial, err := newKey()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: commonName},
		NotBefore:             now.Add(-5 * time.Minute), // tolerate clock skew
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{cert: cert, key: key, CertPEM: pemBlock("CERTIFICATE", der)}, nil
}

// LoadCA reads a CA from its PEM-encoded certificate and EC private key
// (SEC 1 "EC PRIVATE KEY" or PKCS #8 "PRIVATE KEY"). It refuses, with an
// error that says why, a certificate that is not a CA (no CA basic
// constraint, or key usage without certificate signing), one that has
// expired or is not valid yet, and a key that is not the certificate's.
func LoadCA(certPEM, keyPEM []byte) (*CA, error) {
	cb, rest := pem.Decode(certPEM)
	for cb != nil && cb.Type != "CERTIFICATE" {
		cb, rest = pem.Decode(rest)
	}
	if cb == nil {
		return nil, errors.New("CA certificate: no PEM CERTIFICATE block")
	}
	for next, more := pem.Decode(rest); next != nil; next, more = pem.Decode(more) {
		if next.Type == "CERTIFICATE" {
			return nil, errors.New("CA certificate: more than one CERTIFICATE block; give the CA's certificate only")
		}
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("CA certificate: %w", err)
	}
	if !cert.BasicConstraintsValid || !cert.IsCA {
		return nil, fmt.Errorf("CA certificate %q: not a CA (no CA basic constraint)", cert.Subject.CommonName)
	}
	if cert.KeyUsage != 0 && cert.KeyUsage&x509.KeyUsageCertSign == 0 {
		return nil, fmt.Errorf("CA certificate %q: its key usage does not allow signing certificates", cert.Subject.CommonName)
	}
	key, err := parseECKey(keyPEM)
	if err != nil {
		return nil, fmt.Errorf("CA key: %w", err)
	}
	if !key.PublicKey.Equal(cert.PublicKey) {
		return nil, errors.New("CA key does not match the CA certificate")
	}
	ca := &CA{cert: cert, key: key, CertPEM: pemBlock("CERTIFICATE", cb.Bytes)}
	if err := ca.checkValid(time.Now()); err != nil {
		return nil, err
	}
	return ca, nil
}

// parseECKey reads the first private key block of keyPEM: an EC key in
// SEC 1 or PKCS #8 form.
func parseECKey(keyPEM []byte) (*ecdsa.PrivateKey, error) {
	kb, rest := pem.Decode(keyPEM)
	for kb != nil && kb.Type != "EC PRIVATE KEY" && kb.Type != "PRIVATE KEY" {
		kb, rest = pem.Decode(rest)
	}
	if kb == nil {
		return nil, errors.New("no PEM EC PRIVATE KEY or PRIVATE KEY block")
	}
	if kb.Type == "EC PRIVATE KEY" {
		return x509.ParseECPrivateKey(kb.Bytes)
	}
	k, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
	if err != nil {
		return nil, err
	}
	ec, ok := k.(*ecdsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("a %T key; fastover-certs signs with ECDSA keys only", k)
	}
	return ec, nil
}

// checkValid reports an error unless the CA may sign at now.
func (ca *CA) checkValid(now time.Time) error {
	name := ca.cert.Subject.CommonName
	if now.Before(ca.cert.NotBefore) {
		return fmt.Errorf("CA %q is not valid before %s (now %s): check the clock, or make a new CA",
			name, ca.cert.NotBefore.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))
	}
	if !now.Before(ca.cert.NotAfter) {
		return fmt.Errorf("CA %q expired at %s: make a new CA (its certificate becomes the new caBundle)",
			name, ca.cert.NotAfter.UTC().Format(time.RFC3339))
	}
	return nil
}

// NotAfter is when the CA expires; no certificate it issues outlives it.
func (ca *CA) NotAfter() time.Time { return ca.cert.NotAfter }

// KeyPEM returns the CA's private key, PEM-encoded.
func (ca *CA) KeyPEM() ([]byte, error) {
	der, err := x509.MarshalECPrivateKey(ca.key)
	if err != nil {
		return nil, err
	}
	return pemBlock("EC PRIVATE KEY", der), nil
}

// Issue makes a serving certificate for the hosts (DNS names or IP
// addresses), signed by the CA, valid for the given duration but never
// outside the CA's own validity: its NotAfter is clamped to the CA's
// (KeyPair.NotAfter says when it really ends; compare it with
// CA.NotAfter to know). A CA that has expired, or is not valid yet, issues
// nothing: Issue returns an error instead of a certificate no client would
// accept.
func (ca *CA) Issue(hosts []string, validity time.Duration) (*KeyPair, error) {
	if len(hosts) == 0 {
		return nil, errors.New("a serving certificate needs at least one DNS name or IP address")
	}
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: hosts[0]},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	return ca.sign(tmpl, validity)
}

// IssueClient makes a client certificate for the user commonName in the
// groups orgs (a Kubernetes API server reads them so), signed by the CA,
// valid as Issue's are.
func (ca *CA) IssueClient(commonName string, orgs []string, validity time.Duration) (*KeyPair, error) {
	if commonName == "" {
		return nil, errors.New("a client certificate needs a common name")
	}
	return ca.sign(&x509.Certificate{
		Subject:     pkix.Name{CommonName: commonName, Organization: orgs},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, validity)
}

// sign completes tmpl (its key, serial, validity and key usage) and signs
// it with the CA's key.
func (ca *CA) sign(tmpl *x509.Certificate, validity time.Duration) (*KeyPair, error) {
	if validity <= 0 {
		return nil, fmt.Errorf("certificate validity must be positive, got %v", validity)
	}
	if ca.cert == nil || ca.key == nil {
		return nil, errors.New("this CA has no certificate and key to sign with (make it with NewCA or LoadCA)")
	}
	now := time.Now()
	if err := ca.checkValid(now); err != nil {
		return nil, err
	}
	key, serial, err := newKey()
	if err != nil {
		return nil, err
	}
	tmpl.SerialNumber = serial
	tmpl.NotBefore = now.Add(-5 * time.Minute) // tolerate clock skew
	if tmpl.NotBefore.Before(ca.cert.NotBefore) {
		tmpl.NotBefore = ca.cert.NotBefore
	}
	tmpl.NotAfter = now.Add(validity).Truncate(time.Second) // what a certificate can say
	if tmpl.NotAfter.After(ca.cert.NotAfter) {
		tmpl.NotAfter = ca.cert.NotAfter
	}
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	return &KeyPair{
		CertPEM:  pemBlock("CERTIFICATE", der),
		KeyPEM:   pemBlock("EC PRIVATE KEY", keyDER),
		Serial:   serial,
		NotAfter: tmpl.NotAfter,
	}, nil
}

// newKey makes a certificate's key and a random serial number for it.
func newKey() (*ecdsa.PrivateKey, *big.Int, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, nil, err
	}
	return key, serial, nil
}

func pemBlock(kind string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der})
}
