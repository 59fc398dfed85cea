package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/fastover/fastover/leader"
	"github.com/fastover/fastover/retrofit"
	"github.com/fastover/fastover/webhook"
)

// reconcileConfig holds the flags of the --reconcile mode.
type reconcileConfig struct {
	enabled       bool
	only          bool
	kubeconfig    string
	qps           float64
	namespace     string
	lease         string
	identity      string
	leaseDuration time.Duration
	renewDeadline time.Duration
	retryPeriod   time.Duration
}

func (r *reconcileConfig) bindFlags(fs *flag.FlagSet) {
	ns := os.Getenv("POD_NAMESPACE")
	if ns == "" {
		ns = "fastover-system"
	}
	fs.BoolVar(&r.enabled, "reconcile", false,
		"also fix, in place, pods of enabled namespaces that missed injection (one replica at a time, elected through a Lease)")
	fs.BoolVar(&r.only, "reconcile-only", false,
		"run the reconciler alone (implies --reconcile): no webhook server and no certificates; metrics and probes are served as with the webhook")
	fs.StringVar(&r.kubeconfig, "kubeconfig", "", "kubeconfig for --reconcile (default: in-cluster config)")
	fs.Float64Var(&r.qps, "reconcile-qps", retrofit.DefaultQPS, "most pods patched per second by --reconcile")
	fs.StringVar(&r.namespace, "leader-election-namespace", ns, "namespace of the reconciler's Lease (default $POD_NAMESPACE, else fastover-system)")
	fs.StringVar(&r.lease, "leader-election-id", "fastover-reconciler", "name of the reconciler's Lease")
	fs.StringVar(&r.identity, "leader-election-identity", "", "identity in the Lease (default $POD_NAME, else the host name)")
	fs.DurationVar(&r.leaseDuration, "leader-lease-duration", leader.DefaultLeaseDuration, "lease duration of the reconciler's election")
	fs.DurationVar(&r.renewDeadline, "leader-renew-deadline", leader.DefaultRenewDeadline, "renew deadline of the reconciler's election")
	fs.DurationVar(&r.retryPeriod, "leader-retry-period", leader.DefaultRetryPeriod, "retry period of the reconciler's election")
}

func (r *reconcileConfig) validate() error {
	if r.only {
		r.enabled = true
	}
	if r.qps <= 0 {
		return fmt.Errorf("--reconcile-qps must be positive, got %v", r.qps)
	}
	return nil
}

// reconcileRunner runs the reconciler whenever this replica leads.
type reconcileRunner struct {
	cfg     *reconcileConfig
	client  kubernetes.Interface
	rec     *retrofit.Reconciler
	rules   *webhook.RuleSource
	metrics *leader.Metrics
	log     logr.Logger
}

func (r *reconcileConfig) build(rules *webhook.RuleSource, registry *prometheus.Registry, log logr.Logger) (*reconcileRunner, error) {
	restConfig, err := clientcmd.BuildConfigFromFlags("", r.kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("--reconcile: %w", err)
	}
	restConfig.UserAgent = "fastover-webhook/reconciler"
	// The reconciler paces its patches itself (--reconcile-qps); leave
	// room above that for its watches and the Lease, instead of
	// client-go's default of 5 requests per second.
	restConfig.QPS = float32(r.qps) + 10
	restConfig.Burst = int(r.qps) + 20
	client, err := kubernetes.NewForConfig(restConfig)
	if err != nil {
		return nil, err
	}
	// The webhook server's registry: its own if set, controller-runtime's
	// otherwise (a nil *Registry must not become a non-nil Registerer).
	var reg prometheus.Registerer = crmetrics.Registry
	if registry != nil {
		reg = registry
	}
	rm, err := retrofit.NewMetrics(reg)
	if err != nil {
		return nil, err
	}
	lm, err := leader.NewMetrics(reg)
	if err != nil {
		return nil, err
	}
	return &reconcileRunner{
		cfg:    r,
		client: client,
		rec: &retrofit.Reconciler{
			Client:  client,
			Auditor: retrofit.Auditor{Rule: rules.Rule()},
			QPS:     r.qps,
			Metrics: rm,
			Logger:  log,
		},
		rules:   rules,
		metrics: lm,
		log:     log,
	}, nil
}

// run takes part in the election until ctx ends, and reconciles while
// this replica leads. It returns nil when ctx ends (a leader hands the
// Lease over first) or the reconciler returned, and Run's error otherwise:
// above all leader.ErrLeadershipLost (no renewal within the renew
// deadline, or the Lease taken). Then the process exits and its restart
// policy brings it back as a fresh standby, as the leader library asks:
// an Elector runs once, and the work of a lost term may still be running.
func (r *reconcileRunner) run(ctx context.Context) error {
	el, err := leader.New(leader.Config{
		Client:        r.client,
		Namespace:     r.cfg.namespace,
		LeaseName:     r.cfg.lease,
		Identity:      r.cfg.identity,
		LeaseDuration: r.cfg.leaseDuration,
		RenewDeadline: r.cfg.renewDeadline,
		RetryPeriod:   r.cfg.retryPeriod,
		Metrics:       r.metrics,
		Logger:        r.log,
	})
	if err != nil {
		return fmt.Errorf("reconciler election: %w", err)
	}
	err = el.Run(ctx, r.reconcile)
	switch {
	case ctx.Err() != nil && !errors.Is(err, leader.ErrLeadershipLost):
		return nil
	case errors.Is(err, leader.ErrLeadershipLost):
		r.log.Error(err, "reconciler lost its leadership; exiting, to be restarted as a standby")
	case err != nil:
		r.log.Error(err, "reconciler election failed; exiting")
	}
	return err
}

// runBeside runs the reconciler's election beside serve (the webhook
// server) until ctx ends. If the election fails (a lost Lease above all),
// serve's context is cancelled, so the server shuts down as on SIGTERM,
// and the election's error is returned: the process exits.
func (r *reconcileRunner) runBeside(ctx context.Context, serve func(context.Context) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	elected := make(chan error, 1)
	go func() {
		err := r.run(ctx)
		if err != nil {
			cancel()
		}
		elected <- err
	}()
	err := serve(ctx)
	cancel()
	return errors.Join(<-elected, err)
}

// runAlone is --reconcile-only: the reconciler and its election, with the
// metrics (/metrics) and probes (/healthz, /readyz) of opts' addresses, and
// no webhook server. It returns when ctx ends, or with the election's
// error (see run).
func (r *reconcileConfig) runAlone(ctx context.Context, opts webhook.Options, log logr.Logger) error {
	var reg interface {
		prometheus.Registerer
		prometheus.Gatherer
	} = crmetrics.Registry
	if opts.Registry != nil {
		reg = opts.Registry
	}
	// The process's own figures: the reconciler runs in a container of
	// its own, whose memory is worth watching (go_memstats_*).
	for _, c := range []prometheus.Collector{collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})} {
		if err := reg.Register(c); err != nil && !errors.As(err, new(prometheus.AlreadyRegisteredError)) {
			return err
		}
	}
	// The rule, followed as its file changes, as the webhook does.
	rules, err := newRuleSource(opts, reg, log)
	if err != nil {
		return err
	}
	go rules.Watch(ctx)
	rec, err := r.build(rules, opts.Registry, log)
	if err != nil {
		return err
	}
	ok := func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }
	var servers []*http.Server
	serve := func(addr string, mux *http.ServeMux) error {
		if addr == "0" {
			return nil
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return fmt.Errorf("listen on %s: %w", addr, err)
		}
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second}
		servers = append(servers, srv)
		go func() {
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error(err, "serving", "address", addr)
			}
		}()
		return nil
	}
	metrics := http.NewServeMux()
	metrics.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	health := http.NewServeMux()
	health.HandleFunc("/healthz", ok)
	health.HandleFunc("/readyz", ok)
	defer func() {
		for _, srv := range servers {
			_ = srv.Close()
		}
	}()
	if err := serve(opts.MetricsBindAddress, metrics); err != nil {
		return err
	}
	if err := serve(opts.HealthProbeBindAddress, health); err != nil {
		return err
	}
	log.Info("reconciler running alone, without the webhook server")
	return rec.run(ctx)
}
