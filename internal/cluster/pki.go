package cluster

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/fastover/fastover/certs"
)

// pki holds the files of the control plane's own small PKI: a CA, the API
// server's serving certificate signed by it, the service-account signing
// key, and the static token of the admin user.
type pki struct {
	caCert     []byte // PEM
	caFile     string
	serveCert  string
	serveKey   string
	saKey      string // ECDSA private key, signs service-account tokens
	saPub      string // its public key, verifies them
	tokenFile  string // static token file of kube-apiserver
	adminToken string
}

// newPKI writes a fresh PKI into dir; the serving certificate names the
// address kube-apiserver binds besides the usual names.
func newPKI(dir, apiAddr string) (*pki, error) {
	ca, err := certs.NewCA("fastover-test-ca", 24*time.Hour)
	if err != nil {
		return nil, err
	}
	hosts := []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "127.0.0.1"}
	if apiAddr != "127.0.0.1" {
		hosts = append(hosts, apiAddr)
	}
	serving, err := ca.Issue(hosts, 24*time.Hour)
	if err != nil {
		return nil, err
	}
	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	saKeyDER, err := x509.MarshalECPrivateKey(saKey)
	if err != nil {
		return nil, err
	}
	saPubDER, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return nil, err
	}
	token := make([]byte, 16)
	if _, err := rand.Read(token); err != nil {
		return nil, err
	}

	p := &pki{
		caCert:     ca.CertPEM,
		caFile:     filepath.Join(dir, "ca.crt"),
		serveCert:  filepath.Join(dir, "apiserver.crt"),
		serveKey:   filepath.Join(dir, "apiserver.key"),
		saKey:      filepath.Join(dir, "sa.key"),
		saPub:      filepath.Join(dir, "sa.pub"),
		tokenFile:  filepath.Join(dir, "tokens.csv"),
		adminToken: fmt.Sprintf("%x", token),
	}
	files := map[string][]byte{
		p.caFile:    ca.CertPEM,
		p.serveCert: serving.CertPEM,
		p.serveKey:  serving.KeyPEM,
		p.saKey:     pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: saKeyDER}),
		p.saPub:     pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: saPubDER}),
		// The admin user is in system:masters: the tests, kwok and the
		// controllers all use it.
		p.tokenFile: fmt.Appendf(nil, "%s,admin,admin,system:masters\n", p.adminToken),
	}
	for name, data := range files {
		if err := os.WriteFile(name, data, 0o600); err != nil {
			return nil, err
		}
	}
	return p, nil
}
