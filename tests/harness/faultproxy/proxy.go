// Package faultproxy puts a fault-injecting HTTP proxy between one client
// (a replica of a leader-elected controller) and kube-apiserver: added
// latency per request, delayed watch streams, dropped connections, and a
// full partition while the client's process keeps running.
//
// The client speaks TLS to the proxy on loopback (a certificate the proxy
// makes for itself: client-go sends credentials over TLS only), with its
// own bearer token; the proxy speaks TLS to kube-apiserver and passes the
// token through, so the API server sees the client as itself.
package faultproxy

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Proxy is one client's way to kube-apiserver.
type Proxy struct {
	// URL is where the client connects: https://127.0.0.1:PORT.
	URL string
	// CA is the PEM certificate the proxy serves, for the client to
	// trust.
	CA []byte

	srv   *http.Server
	proxy *httputil.ReverseProxy

	mu          sync.Mutex
	latency     time.Duration
	watchDelay  time.Duration
	partitioned bool
	healed      chan struct{} // closed when a partition ends
	conns       map[net.Conn]struct{}
	requests    map[Request]int // by kind, since Start (count.go)
	openWatches int
}

// Start starts a proxy to the API server that upstream reaches (its host
// and CA; not its credentials: the client brings its own). The proxy
// listens on 127.0.0.1 of this process's network; it reaches the API
// server with upstream.Dial if set (a control plane in a network namespace
// sets it), else directly.
func Start(upstream *rest.Config) (*Proxy, error) {
	return StartListening(upstream, net.Listen)
}

// StartListening is Start with the listener made by listen: for a client
// inside a network namespace, the namespace's own Listen, so that the proxy
// listens on the namespace's 127.0.0.1.
func StartListening(upstream *rest.Config, listen func(network, address string) (net.Listener, error)) (*Proxy, error) {
	target, err := url.Parse(upstream.Host)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(upstream.CAData) {
		return nil, errors.New("faultproxy: no CA certificate in the upstream config")
	}
	cert, caPEM, err := selfSigned()
	if err != nil {
		return nil, err
	}
	l, err := listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{URL: "https://" + l.Addr().String(), CA: caPEM, healed: make(chan struct{}), conns: map[net.Conn]struct{}{}}
	close(p.healed)
	p.proxy = &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(target)
			r.Out.Host = target.Host
		},
		Transport: &http.Transport{
			TLSClientConfig:     &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
			MaxIdleConnsPerHost: 100,
			ForceAttemptHTTP2:   false,
			DialContext:         upstream.Dial,
		},
		FlushInterval: -1, // watch events as they come
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			http.Error(w, "faultproxy: "+err.Error(), http.StatusBadGateway)
		},
	}
	p.srv = &http.Server{
		Handler:           http.HandlerFunc(p.serve),
		TLSConfig:         &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12, NextProtos: []string{"http/1.1"}},
		ReadHeaderTimeout: 10 * time.Second,
		ConnState: func(c net.Conn, s http.ConnState) {
			p.mu.Lock()
			defer p.mu.Unlock()
			switch s {
			case http.StateNew:
				p.conns[c] = struct{}{}
			case http.StateClosed, http.StateHijacked:
				delete(p.conns, c)
			}
		},
	}
	go func() { _ = p.srv.ServeTLS(l, "", "") }()
	return p, nil
}

// selfSigned makes a certificate for 127.0.0.1, valid for a day.
func selfSigned() (tls.Certificate, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "faultproxy"},
		NotBefore:    time.Now().Add(-time.Minute),
		NotAfter:     time.Now().Add(24 * time.Hour),
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA:         true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), nil
}

// Close stops the proxy and drops every connection.
func (p *Proxy) Close() {
	p.Partition(false)
	_ = p.srv.Close()
}

// SetLatency delays every request by d before it is forwarded.
func (p *Proxy) SetLatency(d time.Duration) {
	p.mu.Lock()
	p.latency = d
	p.mu.Unlock()
}

// SetWatchDelay delivers each chunk of every watch stream d after the API
// server sent it (existing watches included).
func (p *Proxy) SetWatchDelay(d time.Duration) {
	p.mu.Lock()
	p.watchDelay = d
	p.mu.Unlock()
}

// Partition cuts the client off (on) or lets it through again (off). While
// cut off, nothing flows either way: new requests and responses in flight,
// watch streams included, wait for the partition to end (or for the client
// to give up), as packets would.
func (p *Proxy) Partition(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case on && !p.partitioned:
		p.partitioned = true
		p.healed = make(chan struct{})
	case !on && p.partitioned:
		p.partitioned = false
		close(p.healed)
	}
}

// DropConnections closes every connection of the client, as a reset
// would; the client reconnects.
func (p *Proxy) DropConnections() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(p.conns)
	for c := range p.conns {
		_ = c.Close()
	}
	return n
}

// gate waits while the client is partitioned; false if ctx ended first.
func (p *Proxy) gate(ctx context.Context) bool {
	p.mu.Lock()
	healed := p.healed
	p.mu.Unlock()
	select {
	case <-healed:
		return true
	case <-ctx.Done():
		return false
	}
}

func (p *Proxy) serve(w http.ResponseWriter, r *http.Request) {
	defer p.count(r)()
	ctx := r.Context()
	if !p.gate(ctx) {
		return
	}
	p.mu.Lock()
	latency := p.latency
	p.mu.Unlock()
	if latency > 0 {
		t := time.NewTimer(latency)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return
		}
	}
	if !p.gate(ctx) {
		return
	}
	sw := &streamWriter{p: p, w: w, ctx: ctx, watch: isWatch(r), queue: make(chan chunk, 1024), done: make(chan struct{})}
	go sw.deliver()
	p.proxy.ServeHTTP(sw, r)
	close(sw.queue)
	<-sw.done
}

func isWatch(r *http.Request) bool {
	return r.URL.Query().Get("watch") == "true" || r.URL.Query().Get("watch") == "1" || strings.Contains(r.URL.Path, "/watch/")
}

// chunk is a piece of a response body, with when it came from upstream.
type chunk struct {
	at   time.Time
	data []byte
}

// streamWriter passes a response through a queue, so that its body can be
// held back (partition) or delayed (watch lag) without slowing the read
// from upstream.
type streamWriter struct {
	p     *Proxy
	w     http.ResponseWriter
	ctx   context.Context
	watch bool
	queue chan chunk
	done  chan struct{}
}

func (s *streamWriter) Header() http.Header { return s.w.Header() }

func (s *streamWriter) WriteHeader(code int) {
	s.w.WriteHeader(code)
	if f, ok := s.w.(http.Flusher); ok {
		f.Flush()
	}
}

func (s *streamWriter) Write(b []byte) (int, error) {
	select {
	case s.queue <- chunk{at: time.Now(), data: append([]byte(nil), b...)}:
		return len(b), nil
	case <-s.ctx.Done():
		return 0, s.ctx.Err()
	}
}

// Flush is done by deliver after each chunk.
func (s *streamWriter) Flush() {}

// deliver writes the queued chunks to the client: each no earlier than the
// watch delay after it came, and only while the client is not
// partitioned.
func (s *streamWriter) deliver() {
	defer close(s.done)
	flusher, _ := s.w.(http.Flusher)
	broken := false
	for c := range s.queue {
		if broken {
			continue
		}
		if s.watch {
			s.p.mu.Lock()
			delay := s.p.watchDelay
			s.p.mu.Unlock()
			if wait := time.Until(c.at.Add(delay)); wait > 0 {
				t := time.NewTimer(wait)
				select {
				case <-t.C:
				case <-s.ctx.Done():
					t.Stop()
					broken = true
					continue
				}
			}
		}
		if !s.p.gate(s.ctx) {
			broken = true
			continue
		}
		if _, err := s.w.Write(c.data); err != nil {
			broken = true
			continue
		}
		if flusher != nil {
			flusher.Flush()
		}
	}
}

// WriteKubeconfig writes a kubeconfig at path that reaches the API server
// through the proxy with the bearer token.
func (p *Proxy) WriteKubeconfig(path, user, token, namespace string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["proxy"] = &clientcmdapi.Cluster{Server: p.URL, CertificateAuthorityData: p.CA}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts["proxy"] = &clientcmdapi.Context{Cluster: "proxy", AuthInfo: user, Namespace: namespace}
	cfg.CurrentContext = "proxy"
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return fmt.Errorf("faultproxy: %w", err)
	}
	return nil
}
