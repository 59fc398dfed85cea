package webhook

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/sync/errgroup"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// Options configure the webhook server. The zero value of each field means
// its default.
type Options struct {
	// Host and Port are where the webhook serves TLS; Port defaults to 9443.
	Host string
	Port int
	// CertDir holds tls.crt and tls.key. They are watched: new files are
	// served on new connections without a restart.
	CertDir string
	// TLSMinVersion is the lowest TLS version accepted; default TLS 1.2.
	TLSMinVersion uint16
	// EnableHTTP2 serves HTTP/2 too; off by default.
	EnableHTTP2 bool

	// MetricsBindAddress serves Prometheus metrics on /metrics; "0"
	// disables it. Default ":8080".
	MetricsBindAddress string
	// HealthProbeBindAddress serves /healthz and /readyz; "0" disables it.
	// Default ":8081". /readyz is ready once the TLS server accepts
	// connections.
	HealthProbeBindAddress string

	// Rule is the toleration rule; the zero value means DefaultRule().
	Rule *Rule
	// Registry receives the metrics; default controller-runtime's
	// registry, which already holds its webhook metrics.
	Registry *prometheus.Registry
	// Logger logs; default controller-runtime's logger.
	Logger logr.Logger
}

func (o *Options) setDefaults() {
	if o.Port == 0 {
		o.Port = 9443
	}
	if o.TLSMinVersion == 0 {
		o.TLSMinVersion = tls.VersionTLS12
	}
	if o.MetricsBindAddress == "" {
		o.MetricsBindAddress = ":8080"
	}
	if o.HealthProbeBindAddress == "" {
		o.HealthProbeBindAddress = ":8081"
	}
	if o.Rule == nil {
		r := DefaultRule()
		o.Rule = &r
	}
	if o.Registry == nil {
		if reg, ok := crmetrics.Registry.(*prometheus.Registry); ok {
			o.Registry = reg
		} else {
			o.Registry = prometheus.NewRegistry()
		}
	}
	if o.Logger.GetSink() == nil {
		o.Logger = webhookLog
	}
}

var webhookLog = logf.Log.WithName("fastover-webhook")

// Server runs the webhook, its metrics and its health probes.
type Server struct {
	opts    Options
	webhook webhook.Server
	handler *Handler
}

// NewServer validates the options and builds a server; Start runs it.
func NewServer(opts Options) (*Server, error) {
	opts.setDefaults()
	if err := opts.Rule.Validate(); err != nil {
		return nil, err
	}
	if opts.TLSMinVersion != tls.VersionTLS12 && opts.TLSMinVersion != tls.VersionTLS13 {
		return nil, fmt.Errorf("TLS minimum version must be 1.2 or 1.3")
	}
	if opts.CertDir == "" {
		return nil, errors.New("a certificate directory (with tls.crt and tls.key) is required")
	}
	metrics, err := NewMetrics(opts.Registry)
	if err != nil {
		return nil, fmt.Errorf("register metrics: %w", err)
	}
	tlsOpts := []func(*tls.Config){func(c *tls.Config) { c.MinVersion = opts.TLSMinVersion }}
	if !opts.EnableHTTP2 {
		// HTTP/2 stays off unless asked for (its rapid-reset and stream
		// attacks need not be this server's problem).
		tlsOpts = append(tlsOpts, func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} })
	}
	s := &Server{
		opts: opts,
		webhook: webhook.NewServer(webhook.Options{
			Host:    opts.Host,
			Port:    opts.Port,
			CertDir: opts.CertDir,
			TLSOpts: tlsOpts,
		}),
		handler: &Handler{Rule: *opts.Rule, Metrics: metrics},
	}
	s.webhook.Register(Path, &admission.Webhook{Handler: s.handler})
	return s, nil
}

// Start serves until ctx is cancelled, then shuts down gracefully: requests
// in flight are answered. It returns the first error of any listener.
func (s *Server) Start(ctx context.Context) error {
	log := s.opts.Logger
	ctx = logr.NewContext(ctx, log)
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return s.webhook.Start(ctx) })

	if s.opts.HealthProbeBindAddress != "0" {
		mux := http.NewServeMux()
		handleChecks(mux, "/healthz", map[string]healthz.Checker{"ping": healthz.Ping})
		handleChecks(mux, "/readyz", map[string]healthz.Checker{"webhook": s.webhook.StartedChecker()})
		g.Go(func() error { return serveHTTP(ctx, log, "health probes", s.opts.HealthProbeBindAddress, mux) })
	}
	if s.opts.MetricsBindAddress != "0" {
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(s.opts.Registry, promhttp.HandlerOpts{}))
		g.Go(func() error { return serveHTTP(ctx, log, "metrics", s.opts.MetricsBindAddress, mux) })
	}
	log.Info("starting fastover webhook", "port", s.opts.Port, "certDir", s.opts.CertDir, "path", Path,
		"tolerationSeconds", s.handler.Rule.TolerationSeconds)
	return g.Wait()
}

// handleChecks serves the checks on path, and each one alone on
// path/NAME, as controller-runtime's manager does.
func handleChecks(mux *http.ServeMux, path string, checks map[string]healthz.Checker) {
	h := http.StripPrefix(path, &healthz.Handler{Checks: checks})
	mux.Handle(path, h)
	mux.Handle(path+"/", h)
}

// serveHTTP serves plain HTTP until ctx ends.
func serveHTTP(ctx context.Context, log logr.Logger, what, addr string, h http.Handler) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	log.Info("serving "+what, "address", l.Addr().String())
	if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}
