// Command cert-manager-local runs a real cert-manager in one process, for
// fastover's tests and demo: the controllers of cert-manager's controller
// binary that the SelfSigned and CA issuers need (Issuers, ClusterIssuers,
// the Certificate controllers, the CertificateRequest approver and the
// SelfSigned and CA CertificateRequest issuers), and its cainjector, against
// the cluster of --kubeconfig. There is no leader election, no webhook (the
// CRDs' schemas validate), no ACME, Vault or Venafi.
//
// It prints "cert-manager-local ready" on stderr, and /readyz on
// --health-probe-bind-address answers 200, once every informer has synced;
// SIGTERM or SIGINT stops it cleanly.
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
	"os/signal"
	"sort"
	"sync/atomic"
	"syscall"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	kscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/klog/v2"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crconfig "sigs.k8s.io/controller-runtime/pkg/client/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmscheme "github.com/cert-manager/cert-manager/pkg/client/clientset/versioned/scheme"
	controllerpkg "github.com/cert-manager/cert-manager/pkg/controller"
	"github.com/cert-manager/cert-manager/pkg/controller/cainjector"
	"github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/approver"
	crca "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/ca"
	crselfsigned "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/selfsigned"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/issuing"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/keymanager"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/readiness"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/requestmanager"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/revisionmanager"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/trigger"
	"github.com/cert-manager/cert-manager/pkg/controller/clusterissuers"
	"github.com/cert-manager/cert-manager/pkg/controller/issuers"
	logf "github.com/cert-manager/cert-manager/pkg/logs"
	"github.com/cert-manager/cert-manager/pkg/util"

	// The issuer implementations that the Issuer and ClusterIssuer
	// controllers check (they register themselves).
	_ "github.com/cert-manager/cert-manager/pkg/issuer/ca"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/selfsigned"
)

// controllers are the cert-manager controllers run, by their registered
// names; each is registered by the init of its package, imported above.
var controllers = []string{
	issuers.ControllerName,
	clusterissuers.ControllerName,
	trigger.ControllerName,
	issuing.ControllerName,
	keymanager.ControllerName,
	requestmanager.ControllerName,
	readiness.ControllerName,
	revisionmanager.ControllerName,
	approver.ControllerName,
	crselfsigned.CRControllerName,
	crca.CRControllerName,
}

type options struct {
	clusterResourceNamespace string
	namespace                string
	workers                  int
	healthAddr               string
	metricsAddr              string
	qps                      float64
	burst                    int
	minBackoff, maxBackoff   time.Duration
}

func main() {
	var o options
	flag.StringVar(&o.clusterResourceNamespace, "cluster-resource-namespace", "cert-manager",
		"namespace of the Secrets that ClusterIssuers refer to")
	flag.StringVar(&o.namespace, "namespace", "", "only watch this namespace (all namespaces if empty); ClusterIssuers are then not served")
	flag.IntVar(&o.workers, "workers", 5, "workers per controller")
	flag.StringVar(&o.healthAddr, "health-probe-bind-address", "", "address of /healthz and /readyz (empty: none)")
	flag.StringVar(&o.metricsAddr, "metrics-bind-address", "0", "address of the cainjector's controller-runtime metrics (0: none)")
	flag.Float64Var(&o.qps, "kube-api-qps", 50, "client QPS, if the API server has no priority and fairness")
	flag.IntVar(&o.burst, "kube-api-burst", 100, "client burst, if the API server has no priority and fairness")
	flag.DurationVar(&o.minBackoff, "certificate-request-minimum-backoff-duration", time.Hour,
		"first wait before a failed issuance is retried")
	flag.DurationVar(&o.maxBackoff, "certificate-request-maximum-backoff-duration", 32*time.Hour,
		"longest wait before a failed issuance is retried")
	klog.InitFlags(flag.CommandLine)
	// cert-manager logs its Info level at 2, as it is deployed.
	_ = flag.Set("v", "2")
	// --kubeconfig is controller-runtime's flag (registered on
	// flag.CommandLine by its config package).
	flag.Parse()

	log := klog.NewKlogr().WithName("cert-manager-local")
	ctrl.SetLogger(log)
	logf.Log = log

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	err := run(logf.NewContext(ctx, log), o)
	stop()
	if err != nil {
		log.Error(err, "cert-manager-local failed")
		klog.Flush()
		os.Exit(1)
	}
	log.Info("cert-manager-local stopped")
	klog.Flush()
}

func run(ctx context.Context, o options) error {
	log := logf.FromContext(ctx)
	kubeconfig := ""
	if f := flag.Lookup(crconfig.KubeconfigFlagName); f != nil {
		kubeconfig = f.Value.String()
	}
	if kubeconfig == "" {
		kubeconfig = os.Getenv("KUBECONFIG")
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var ready atomic.Bool

	if o.healthAddr != "" {
		if err := serveHealth(ctx, o.healthAddr, &ready); err != nil {
			return err
		}
	}

	// The cainjector: a controller-runtime manager.
	mgr, err := newInjector(ctx, o)
	if err != nil {
		return err
	}

	// The controllers: built from cert-manager's registry, then the
	// informer factories are started (after every controller has asked
	// for its informers).
	factory, err := controllerpkg.NewContextFactory(ctx, controllerpkg.ContextOptions{
		Kubeconfig:         kubeconfig,
		KubernetesAPIQPS:   float32(o.qps),
		KubernetesAPIBurst: o.burst,
		Namespace:          o.namespace,
		IssuerOptions: controllerpkg.IssuerOptions{
			ClusterResourceNamespace:        o.clusterResourceNamespace,
			ClusterIssuerAmbientCredentials: true,
		},
		CertificateOptions: controllerpkg.CertificateOptions{
			// cert-manager's defaults (its internal config package):
			// copy every annotation but those of kubectl, Flux and Argo CD.
			CopiedAnnotationPrefixes:                 []string{"*", "-kubectl.kubernetes.io/", "-fluxcd.io/", "-argocd.argoproj.io/"},
			CertificateRequestMinimumBackoffDuration: o.minBackoff,
			CertificateRequestMaximumBackoffDuration: o.maxBackoff,
		},
	})
	if err != nil {
		return fmt.Errorf("controller context: %w", err)
	}
	type runner struct {
		name string
		ctrl controllerpkg.Interface
	}
	var (
		runners []runner
		running []string
	)
	known := controllerpkg.Known()
	for _, name := range controllers {
		if o.namespace != "" && name == clusterissuers.ControllerName {
			continue
		}
		construct, ok := known[name]
		if !ok {
			return fmt.Errorf("controller %s is not registered", name)
		}
		c, err := construct(factory)
		if err != nil {
			return fmt.Errorf("construct controller %s: %w", name, err)
		}
		runners = append(runners, runner{name, c})
		running = append(running, name)
	}
	registered := make([]string, 0, len(known))
	for name := range known {
		registered = append(registered, name)
	}
	sort.Strings(registered)
	log.Info("controllers", "running", running, "registered", registered)
	shared, err := factory.Build()
	if err != nil {
		return err
	}

	errs := make(chan error, len(runners)+1)
	for _, r := range runners {
		go func() {
			err := r.ctrl.Run(o.workers, ctx)
			if err != nil {
				err = fmt.Errorf("controller %s: %w", r.name, err)
			}
			errs <- err
		}()
	}
	go func() {
		err := mgr.Start(ctx)
		if err != nil {
			err = fmt.Errorf("cainjector: %w", err)
		}
		errs <- err
	}()
	shared.SharedInformerFactory.Start(ctx.Done())
	shared.KubeSharedInformerFactory.Start(ctx.Done())
	defer func() {
		shared.KubeSharedInformerFactory.Shutdown()
		shared.SharedInformerFactory.Shutdown()
	}()

	syncErr := make(chan error, 1)
	go func() {
		if err := waitSynced(ctx, shared, mgr.GetCache()); err != nil {
			if ctx.Err() == nil {
				syncErr <- err
			}
			return
		}
		ready.Store(true)
		log.Info("cert-manager-local ready", "controllers", len(runners), "clusterResourceNamespace", o.clusterResourceNamespace)
	}()

	// Run until a signal, or until a part fails; then stop the others and
	// wait for them.
	var firstErr error
	pending := len(runners) + 1
	select {
	case <-ctx.Done():
	case firstErr = <-syncErr:
	case firstErr = <-errs:
		pending--
		if firstErr == nil {
			firstErr = errors.New("a controller stopped by itself")
		}
	}
	log.Info("stopping")
	cancel()
	timeout := time.After(30 * time.Second)
	for ; pending > 0; pending-- {
		select {
		case err := <-errs:
			if firstErr == nil && err != nil {
				firstErr = err
			}
		case <-timeout:
			return errors.Join(firstErr, errors.New("controllers did not stop within 30s"))
		}
	}
	return firstErr
}

// newInjector returns the cainjector's manager, with reconcilers for
// every injectable kind (webhook configurations, APIServices, CRDs).
func newInjector(ctx context.Context, o options) (ctrl.Manager, error) {
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	cfg = util.RestConfigWithUserAgent(cfg, "cainjector")
	cfg.QPS, cfg.Burst = float32(o.qps), o.burst

	scheme := runtime.NewScheme()
	utilruntime.Must(kscheme.AddToScheme(scheme))
	utilruntime.Must(cmscheme.AddToScheme(scheme))
	utilruntime.Must(apiextensionsv1.AddToScheme(scheme))
	utilruntime.Must(apiregistrationv1.AddToScheme(scheme))

	var namespaces map[string]cache.Config
	if o.namespace != "" {
		namespaces = map[string]cache.Config{o.namespace: {}}
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme: scheme,
		Cache: cache.Options{
			ReaderFailOnMissingInformer: true,
			DefaultNamespaces:           namespaces,
		},
		// As cainjector does: Secrets are watched as metadata only, and
		// read from the API server when an injectable is reconciled.
		Client:         client.Options{Cache: &client.CacheOptions{DisableFor: []client.Object{&corev1.Secret{}}}},
		LeaderElection: false,
		Metrics:        metricsserver.Options{BindAddress: o.metricsAddr},
	})
	if err != nil {
		return nil, fmt.Errorf("cainjector manager: %w", err)
	}
	err = cainjector.RegisterAllInjectors(ctx, mgr, cainjector.SetupOptions{
		Namespace:                    o.namespace,
		EnableCertificatesDataSource: true,
		EnabledReconcilersFor: map[string]bool{
			cainjector.MutatingWebhookConfigurationName:   true,
			cainjector.ValidatingWebhookConfigurationName: true,
			cainjector.APIServiceName:                     true,
			cainjector.CustomResourceDefinitionName:       true,
		},
	})
	if err != nil {
		return nil, fmt.Errorf("cainjector: %w", err)
	}
	return mgr, nil
}

// serveHealth serves /healthz (200 while the process runs) and /readyz
// (200 once ready is set, 503 before) on addr until ctx ends.
func serveHealth(ctx context.Context, addr string, ready *atomic.Bool) error {
	l, err := (&net.ListenConfig{}).Listen(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("health probe address: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !ready.Load() {
			http.Error(w, "informers not synced yet", http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, "ok\n")
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }()
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	return nil
}

// waitSynced waits until the controllers' informers and the informers
// that the cainjector's reconcilers watch have synced.
func waitSynced(ctx context.Context, shared *controllerpkg.Context, c cache.Cache) error {
	for name, ok := range shared.SharedInformerFactory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("informer for %v did not sync", name)
		}
	}
	for name, ok := range shared.KubeSharedInformerFactory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("informer for %v did not sync", name)
		}
	}
	secrets := &metav1.PartialObjectMetadata{}
	secrets.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
	for _, obj := range []client.Object{
		&admissionregistrationv1.MutatingWebhookConfiguration{},
		&admissionregistrationv1.ValidatingWebhookConfiguration{},
		&apiregistrationv1.APIService{},
		&apiextensionsv1.CustomResourceDefinition{},
		&cmapi.Certificate{},
		secrets,
	} {
		// GetInformer waits until the manager's cache has started and
		// the informer has synced.
		if _, err := c.GetInformer(ctx, obj); err != nil {
			return fmt.Errorf("cainjector informer for %T: %w", obj, err)
		}
	}
	return nil
}
