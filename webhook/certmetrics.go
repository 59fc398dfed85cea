package webhook

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/certwatcher"
)

// certMetrics exports when the serving certificate ends: the one served
// now and the one in the certificate directory, read at each scrape. The
// first close to its end means the renewal failed; the second later than
// the first for long means a renewed certificate is not being served.
type certMetrics struct {
	file   string
	served atomic.Pointer[certwatcher.CertWatcher]

	servedDesc *prometheus.Desc
	fileDesc   *prometheus.Desc
}

func newCertMetrics(file string) *certMetrics {
	return &certMetrics{
		file: file,
		servedDesc: prometheus.NewDesc("fastover_webhook_certificate_expiry_timestamp_seconds",
			"When the serving certificate the webhook serves now expires (Unix seconds); absent until it serves.", nil, nil),
		fileDesc: prometheus.NewDesc("fastover_webhook_certificate_file_expiry_timestamp_seconds",
			"When the certificate in the certificate directory (tls.crt) expires (Unix seconds); absent while it cannot be read.", nil, nil),
	}
}

// serve says where the served certificate comes from.
func (m *certMetrics) serve(cw *certwatcher.CertWatcher) { m.served.Store(cw) }

func (m *certMetrics) Describe(ch chan<- *prometheus.Desc) {
	ch <- m.servedDesc
	ch <- m.fileDesc
}

func (m *certMetrics) Collect(ch chan<- prometheus.Metric) {
	if cw := m.served.Load(); cw != nil {
		if c, err := cw.GetCertificate(nil); err == nil {
			if leaf, err := leafOf(c); err == nil {
				ch <- prometheus.MustNewConstMetric(m.servedDesc, prometheus.GaugeValue, float64(leaf.NotAfter.Unix()))
			}
		}
	}
	if notAfter, err := fileNotAfter(m.file); err == nil {
		ch <- prometheus.MustNewConstMetric(m.fileDesc, prometheus.GaugeValue, float64(notAfter))
	}
}

// leafOf is the certificate's own (first) X.509 certificate.
func leafOf(c *tls.Certificate) (*x509.Certificate, error) {
	if c == nil || len(c.Certificate) == 0 {
		return nil, errors.New("no certificate")
	}
	if c.Leaf != nil {
		return c.Leaf, nil
	}
	return x509.ParseCertificate(c.Certificate[0])
}

// fileNotAfter reads the first certificate of a PEM file and returns
// when it expires, in Unix seconds.
func fileNotAfter(path string) (int64, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	n, err := pemNotAfter(data)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	return n, nil
}

// pemNotAfter is when the first certificate of PEM data expires, in Unix
// seconds.
func pemNotAfter(data []byte) (int64, error) {
	for {
		var b *pem.Block
		b, data = pem.Decode(data)
		if b == nil {
			return 0, errors.New("no PEM certificate")
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return 0, err
		}
		return c.NotAfter.Unix(), nil
	}
}
