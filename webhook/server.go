package webhook

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	stdlog "log"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/net/netutil"
	"golang.org/x/sync/errgroup"
	"sigs.k8s.io/controller-runtime/pkg/certwatcher"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/fastover/fastover/toleration"
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
	// connections, and not ready again from the start of the shutdown.
	HealthProbeBindAddress string

	// MaxRequestBytes bounds an AdmissionReview's body; default
	// DefaultMaxRequestBytes (3 MiB). Larger ones are refused unread (413).
	MaxRequestBytes int64
	// SmallRequestBytes, MaxRequestsInFlight and MaxLargeRequestsInFlight:
	// reviews up to SmallRequestBytes (default 64 KiB) are handled
	// MaxRequestsInFlight (default 32) at a time, larger ones
	// MaxLargeRequestsInFlight (default 2) at a time, in a separate pool so
	// that they never hold up the small ones. A request that waits 5 s for
	// its place is refused with 429.
	SmallRequestBytes        int64
	MaxRequestsInFlight      int
	MaxLargeRequestsInFlight int
	// MaxConnections bounds the open connections of the TLS server;
	// default 256. Further clients wait to be accepted.
	MaxConnections int
	// ReadHeaderTimeout and ReadTimeout bound the time to read a request's
	// headers, and all of it; defaults 5 s and 10 s. IdleTimeout closes a
	// kept-alive connection left idle; default 120 s, longer than the
	// 90 s after which the API server's client drops idle connections,
	// so that the server never closes one the client is about to use.
	ReadHeaderTimeout time.Duration
	ReadTimeout       time.Duration
	IdleTimeout       time.Duration

	// ShutdownDelay: when Start's context ends, the webhook first fails
	// /readyz and asks its clients to close their connections, then keeps
	// serving for ShutdownDelay, so that the endpoints move to the other
	// replicas before it stops accepting; then it drains (see
	// ShutdownTimeout). Default 5 s; negative: no delay.
	ShutdownDelay time.Duration
	// ShutdownTimeout bounds the drain of the requests in flight after
	// the delay; default 15 s. The pod's terminationGracePeriodSeconds
	// must exceed ShutdownDelay + ShutdownTimeout.
	ShutdownTimeout time.Duration

	// Rule is the toleration rule when RuleFile is empty; nil means
	// toleration.DefaultRule(). With RuleFile, RuleOverride says which of
	// its fields win over the file.
	Rule *toleration.Rule
	// RuleFile, if set, is the rule in force: the directory the ConfigMap
	// fastover-rule is mounted as (toleration.RuleFile in the manifests;
	// toleration.ParseRuleData), or a rule file in the format of
	// toleration.ParseRuleConfig. NewServer fails if it
	// cannot be read or parsed; then it is read again every
	// RuleReloadInterval (default toleration.DefaultRuleFileInterval), and a
	// change is applied to new requests without a restart. A change that
	// does not parse is logged and counted
	// (fastover_webhook_rule_reload_errors_total), and the last good rule
	// stays in force. See RuleSource.
	RuleFile           string
	RuleReloadInterval time.Duration
	// RuleOverride, if not nil, is applied to each rule read from RuleFile:
	// the rule flags given on the command line win over the file, for this
	// process only (see toleration.Rule.WithFlags).
	RuleOverride func(toleration.Rule) toleration.Rule
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
	setDefault(&o.MaxRequestBytes, DefaultMaxRequestBytes)
	setDefault(&o.SmallRequestBytes, DefaultSmallRequestBytes)
	setDefault(&o.MaxRequestsInFlight, DefaultMaxRequestsInFlight)
	setDefault(&o.MaxLargeRequestsInFlight, DefaultMaxLargeRequestsInFlight)
	setDefault(&o.MaxConnections, DefaultMaxConnections)
	setDefault(&o.ReadHeaderTimeout, 5*time.Second)
	setDefault(&o.ReadTimeout, 10*time.Second)
	setDefault(&o.IdleTimeout, 120*time.Second)
	setDefault(&o.ShutdownDelay, 5*time.Second)
	setDefault(&o.ShutdownTimeout, 15*time.Second)
	setDefault(&o.RuleReloadInterval, toleration.DefaultRuleFileInterval)
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

func setDefault[T int | int64 | time.Duration](p *T, v T) {
	if *p == 0 {
		*p = v
	}
}

var webhookLog = logf.Log.WithName("fastover-webhook")

// Server runs the webhook, its metrics and its health probes.
//
// The hook is registered with controller-runtime's webhook server (which
// adds its controller_runtime_webhook_* metrics) into a mux that Server
// serves with its own http.Server: controller-runtime's builds its
// http.Server inside Start (headers may take 32 s, no read timeout, no
// bound on connections) and closes its listener as soon as its context
// ends, which this server needs to control.
type Server struct {
	opts     Options
	mux      *http.ServeMux
	handler  *Handler
	certs    *certMetrics
	serving  atomic.Bool // the TLS server accepts connections
	stopping atomic.Bool // shutting down: not ready, connections closed after each response
}

// Validate reports every problem of the options at once, each naming its
// field ("Options.CertDir: ..."). Zero values stand for their defaults and
// are valid, but for CertDir, which is required. It reads nothing but the
// options: the rule file is read by NewServer.
func (o Options) Validate() error {
	d := o
	d.setDefaults()
	var errs []error
	add := func(field, format string, args ...any) {
		errs = append(errs, errors.New("Options."+field+": "+fmt.Sprintf(format, args...)))
	}
	if o.Port < 0 || o.Port > 65535 {
		add("Port", "want 1-65535 (0: 9443), got %d", o.Port)
	}
	if o.CertDir == "" {
		add("CertDir", "required: the directory with tls.crt and tls.key")
	}
	if d.TLSMinVersion != tls.VersionTLS12 && d.TLSMinVersion != tls.VersionTLS13 {
		add("TLSMinVersion", "want tls.VersionTLS12 or tls.VersionTLS13, got %#x", o.TLSMinVersion)
	}
	for _, a := range []struct {
		field, addr string
	}{{"MetricsBindAddress", d.MetricsBindAddress}, {"HealthProbeBindAddress", d.HealthProbeBindAddress}} {
		if a.addr == "0" {
			continue
		}
		if _, port, err := net.SplitHostPort(a.addr); err != nil {
			add(a.field, "want host:port, :port or \"0\" (disabled), got %q", a.addr)
		} else if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
			add(a.field, "want a port number, got %q", port)
		}
	}
	for _, n := range []struct {
		field string
		v     int64
	}{
		{"MaxRequestBytes", o.MaxRequestBytes}, {"SmallRequestBytes", o.SmallRequestBytes},
		{"MaxRequestsInFlight", int64(o.MaxRequestsInFlight)}, {"MaxLargeRequestsInFlight", int64(o.MaxLargeRequestsInFlight)},
		{"MaxConnections", int64(o.MaxConnections)},
	} {
		if n.v < 0 {
			add(n.field, "must not be negative, got %d", n.v)
		}
	}
	for _, t := range []struct {
		field string
		v     time.Duration
	}{
		{"ReadHeaderTimeout", o.ReadHeaderTimeout}, {"ReadTimeout", o.ReadTimeout}, {"IdleTimeout", o.IdleTimeout},
		{"ShutdownTimeout", o.ShutdownTimeout}, {"RuleReloadInterval", o.RuleReloadInterval},
	} {
		if t.v < 0 {
			add(t.field, "must not be negative, got %v", t.v)
		}
	}
	if d.MaxRequestsInFlight >= 0 && d.MaxLargeRequestsInFlight >= 0 && d.MaxConnections >= 0 &&
		d.MaxConnections < d.MaxRequestsInFlight+d.MaxLargeRequestsInFlight {
		add("MaxConnections", "must be at least the requests in flight (MaxRequestsInFlight %d + MaxLargeRequestsInFlight %d), got %d",
			d.MaxRequestsInFlight, d.MaxLargeRequestsInFlight, d.MaxConnections)
	}
	if o.SmallRequestBytes > 0 && d.SmallRequestBytes > d.MaxRequestBytes {
		add("SmallRequestBytes", "must not exceed MaxRequestBytes (%d), got %d", d.MaxRequestBytes, o.SmallRequestBytes)
	}
	if o.Rule != nil {
		if err := o.Rule.Validate(); err != nil {
			add("Rule", "%v", err)
		}
	}
	return errors.Join(errs...)
}

// RuleSourceOptions are the options' rule settings, for a RuleSource of
// the same rule (the --reconcile-only reconciler's).
func (o Options) RuleSourceOptions() RuleSourceOptions {
	return RuleSourceOptions{Rule: o.Rule, File: o.RuleFile, Interval: o.RuleReloadInterval, Override: o.RuleOverride, Logger: o.Logger}
}

// NewServer validates the options, reads the rule (from RuleFile if set)
// and builds a server; Start runs it.
func NewServer(opts Options) (*Server, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	opts.setDefaults()
	metrics, err := NewMetrics(opts.Registry)
	if err != nil {
		return nil, fmt.Errorf("register metrics: %w", err)
	}
	ruleMetrics, err := NewRuleMetrics(opts.Registry)
	if err != nil {
		return nil, fmt.Errorf("register metrics: %w", err)
	}
	ro := opts.RuleSourceOptions()
	ro.Metrics = ruleMetrics
	rules, err := NewRuleSource(ro)
	if err != nil {
		return nil, err
	}
	// The process's own figures (go_memstats_*, process_resident_memory_bytes):
	// its memory is bounded, and worth watching.
	for _, c := range []prometheus.Collector{collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})} {
		if err := opts.Registry.Register(c); err != nil && !errors.As(err, new(prometheus.AlreadyRegisteredError)) {
			return nil, fmt.Errorf("register metrics: %w", err)
		}
	}
	certs := newCertMetrics(filepath.Join(opts.CertDir, "tls.crt"))
	if err := opts.Registry.Register(certs); err != nil {
		return nil, fmt.Errorf("register metrics: %w", err)
	}
	s := &Server{
		opts:    opts,
		mux:     http.NewServeMux(),
		handler: &Handler{Rules: rules, Metrics: metrics},
		certs:   certs,
	}
	lim := newLimiter(&s.opts, metrics, &s.stopping)
	// Registered only: the mux is served by Start below.
	webhook.NewServer(webhook.Options{WebhookMux: s.mux}).
		Register(Path, lim.wrap(&admission.Webhook{Handler: s.handler}))
	return s, nil
}

// Start serves until ctx is cancelled, then shuts down gracefully: /readyz
// fails at once, responses ask clients to close their connections, the
// webhook keeps serving for ShutdownDelay (while the endpoints move to
// other replicas), then stops accepting and answers the requests in
// flight (for up to ShutdownTimeout). It returns the first error of any
// listener.
func (s *Server) Start(ctx context.Context) error {
	log := s.opts.Logger
	ctx = logr.NewContext(ctx, log)
	tlsServer, ln, err := s.listen(ctx)
	if err != nil {
		return err
	}
	// The other servers outlive ctx until the webhook has drained.
	done := make(chan struct{})
	stopCtx, stopOthers := context.WithCancel(context.WithoutCancel(ctx))
	defer stopOthers()
	g, gctx := errgroup.WithContext(stopCtx)

	// The rule file, followed until the servers stop.
	g.Go(func() error {
		s.handler.Rules.Watch(gctx)
		return nil
	})
	g.Go(func() error {
		defer close(done)
		s.serving.Store(true)
		log.Info("serving webhook", "address", ln.Addr().String(), "path", Path)
		if err := tlsServer.ServeTLS(ln, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("webhook: %w", err)
		}
		return nil
	})
	g.Go(func() error {
		select {
		case <-gctx.Done(): // another listener failed
			_ = tlsServer.Close()
			return nil
		case <-ctx.Done():
		}
		s.stopping.Store(true)
		if s.opts.ShutdownDelay > 0 {
			log.Info("shutting down: not ready; serving until the endpoints have moved", "delay", s.opts.ShutdownDelay)
			select {
			case <-time.After(s.opts.ShutdownDelay):
			case <-gctx.Done():
			}
		}
		log.Info("shutting down: draining the requests in flight", "timeout", s.opts.ShutdownTimeout)
		drain, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.opts.ShutdownTimeout)
		defer cancel()
		if err := tlsServer.Shutdown(drain); err != nil {
			log.Error(err, "webhook shutdown")
			_ = tlsServer.Close()
		}
		<-done
		stopOthers()
		return nil
	})

	if s.opts.HealthProbeBindAddress != "0" {
		mux := http.NewServeMux()
		handleChecks(mux, "/healthz", map[string]healthz.Checker{"ping": healthz.Ping})
		handleChecks(mux, "/readyz", map[string]healthz.Checker{"webhook": s.ready})
		g.Go(func() error { return serveHTTP(gctx, log, "health probes", s.opts.HealthProbeBindAddress, mux) })
	}
	if s.opts.MetricsBindAddress != "0" {
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(s.opts.Registry, promhttp.HandlerOpts{}))
		g.Go(func() error { return serveHTTP(gctx, log, "metrics", s.opts.MetricsBindAddress, mux) })
	}
	log.Info("starting fastover webhook", append([]any{"port", s.opts.Port, "certDir", s.opts.CertDir, "path", Path,
		"ruleFile", s.opts.RuleFile, "maxRequestBytes", s.opts.MaxRequestBytes,
		"maxRequestsInFlight", s.opts.MaxRequestsInFlight, "shutdownDelay", s.opts.ShutdownDelay}, ruleKeys(s.handler.Rules.Rule())...)...)
	return g.Wait()
}

// Rules is the rule in force, which the server's handler reads, and
// follows (from Start until it returns) as its file changes.
func (s *Server) Rules() *RuleSource { return s.handler.Rules }

// ready is the /readyz check: the TLS server accepts connections and is
// not shutting down.
func (s *Server) ready(*http.Request) error {
	switch {
	case s.stopping.Load():
		return errors.New("shutting down")
	case !s.serving.Load():
		return errors.New("not serving yet")
	}
	return nil
}

// listen opens the webhook's listener (bounded to MaxConnections) and
// builds its TLS server, serving the certificate files as they change.
func (s *Server) listen(ctx context.Context) (*http.Server, net.Listener, error) {
	o := &s.opts
	cw, err := certwatcher.New(filepath.Join(o.CertDir, "tls.crt"), filepath.Join(o.CertDir, "tls.key"))
	if err != nil {
		return nil, nil, fmt.Errorf("serving certificate: %w", err)
	}
	go func() {
		if err := cw.Start(ctx); err != nil {
			o.Logger.Error(err, "certificate watcher")
		}
	}()
	s.certs.serve(cw)
	cfg := &tls.Config{MinVersion: o.TLSMinVersion, GetCertificate: cw.GetCertificate, NextProtos: []string{"http/1.1"}}
	srv := &http.Server{
		Handler:           s.mux,
		TLSConfig:         cfg,
		ReadHeaderTimeout: o.ReadHeaderTimeout,
		ReadTimeout:       o.ReadTimeout,
		// Long enough for a request that waited for its place.
		WriteTimeout:   o.ReadTimeout + queueTimeout,
		IdleTimeout:    o.IdleTimeout,
		MaxHeaderBytes: 64 << 10,
		// Requests in flight outlive ctx: they are drained.
		BaseContext: func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
		ErrorLog:    stdlog.New(logWriter{o.Logger}, "", 0),
	}
	if o.EnableHTTP2 {
		cfg.NextProtos = []string{"h2", "http/1.1"}
	} else {
		// HTTP/2 stays off unless asked for (its rapid-reset and stream
		// attacks need not be this server's problem).
		srv.TLSNextProto = map[string]func(*http.Server, *tls.Conn, http.Handler){}
	}
	l, err := net.Listen("tcp", net.JoinHostPort(o.Host, strconv.Itoa(o.Port)))
	if err != nil {
		return nil, nil, fmt.Errorf("webhook: %w", err)
	}
	return srv, netutil.LimitListener(l, o.MaxConnections), nil
}

// logWriter passes net/http's own messages (TLS handshake errors and the
// like) to the logger, at debug level.
type logWriter struct{ log logr.Logger }

func (w logWriter) Write(p []byte) (int, error) {
	w.log.V(1).Info(strings.TrimSpace(string(p)))
	return len(p), nil
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
