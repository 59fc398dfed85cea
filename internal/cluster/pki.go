package cluster

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net/netip"
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

	// The aggregation layer's own CA, separate from the cluster's as in
	// a real control plane, and the client certificate kube-apiserver
	// presents to aggregated API servers, signed by it.
	frontProxyCA   []byte // PEM
	frontProxyFile string
	proxyCert      string
	proxyKey       string

	// ca signs the real nodes' client certificates; kubeletClientCert
	// and Key are kube-apiserver's client certificate to kubelets.
	ca                                  *certs.CA
	kubeletClientCert, kubeletClientKey string
}

// FrontProxyClientCN is the common name of the client certificate
// kube-apiserver presents to aggregated API servers, and the one name of
// --requestheader-allowed-names.
const FrontProxyClientCN = "front-proxy-client"

// newPKI writes a fresh PKI into dir; the serving certificate names the
// address kube-apiserver binds and, as a cluster's does, the kubernetes
// Service: its ClusterIP (serviceIP, where pods reach the API server) and
// its DNS names.
func newPKI(dir, apiAddr string, serviceIP netip.Addr) (*pki, error) {
	ca, err := certs.NewCA("fastover-test-ca", 24*time.Hour)
	if err != nil {
		return nil, err
	}
	hosts := []string{
		"localhost", "127.0.0.1", serviceIP.String(),
		"kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local",
	}
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

	frontCA, err := certs.NewCA("fastover-test-front-proxy-ca", 24*time.Hour)
	if err != nil {
		return nil, err
	}
	proxy, err := frontCA.IssueClient(FrontProxyClientCN, nil, 24*time.Hour)
	if err != nil {
		return nil, fmt.Errorf("front-proxy client certificate: %w", err)
	}
	kubeletClient, err := ca.IssueClient("kube-apiserver-kubelet-client", []string{"system:masters"}, 24*time.Hour)
	if err != nil {
		return nil, fmt.Errorf("kube-apiserver's client certificate to kubelets: %w", err)
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

		frontProxyCA:   frontCA.CertPEM,
		frontProxyFile: filepath.Join(dir, "front-proxy-ca.crt"),
		proxyCert:      filepath.Join(dir, "front-proxy-client.crt"),
		proxyKey:       filepath.Join(dir, "front-proxy-client.key"),

		ca:                ca,
		kubeletClientCert: filepath.Join(dir, "apiserver-kubelet-client.crt"),
		kubeletClientKey:  filepath.Join(dir, "apiserver-kubelet-client.key"),
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

		p.frontProxyFile: frontCA.CertPEM,
		p.proxyCert:      proxy.CertPEM,
		p.proxyKey:       proxy.KeyPEM,

		p.kubeletClientCert: kubeletClient.CertPEM,
		p.kubeletClientKey:  kubeletClient.KeyPEM,
	}
	for name, data := range files {
		if err := os.WriteFile(name, data, 0o600); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// issueNodeCert makes the client certificate of a real node's kubelet:
// system:node:<name> in system:nodes, signed by the cluster's CA.
func issueNodeCert(p *pki, node string) (*certs.KeyPair, error) {
	return p.ca.IssueClient("system:node:"+node, []string{"system:nodes"}, 24*time.Hour)
}

// NewServingCert makes a CA of its own and a serving certificate for the
// DNS names (or IP addresses) signed by it, valid for a day: what an
// aggregated API server or a webhook of a test serves, with caPEM its
// caBundle.
func NewServingCert(dnsNames ...string) (certPEM, keyPEM, caPEM []byte, err error) {
	if len(dnsNames) == 0 {
		return nil, nil, nil, fmt.Errorf("cluster: NewServingCert needs at least one DNS name")
	}
	ca, err := certs.NewCA("fastover-test-serving-ca", 24*time.Hour)
	if err != nil {
		return nil, nil, nil, err
	}
	kp, err := ca.Issue(dnsNames, 24*time.Hour)
	if err != nil {
		return nil, nil, nil, err
	}
	return kp.CertPEM, kp.KeyPEM, ca.CertPEM, nil
}

// NewClientCert makes a CA of its own and a client certificate with the
// common name signed by it, valid for a day: a front-proxy client of a
// test's own, or a stranger's certificate an aggregated server must refuse.
func NewClientCert(commonName string) (certPEM, keyPEM, caPEM []byte, err error) {
	if commonName == "" {
		return nil, nil, nil, fmt.Errorf("cluster: NewClientCert needs a common name")
	}
	ca, err := certs.NewCA("fastover-test-client-ca", 24*time.Hour)
	if err != nil {
		return nil, nil, nil, err
	}
	kp, err := ca.IssueClient(commonName, nil, 24*time.Hour)
	if err != nil {
		return nil, nil, nil, err
	}
	return kp.CertPEM, kp.KeyPEM, ca.CertPEM, nil
}
