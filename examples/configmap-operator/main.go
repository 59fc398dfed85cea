// Command configmap-operator is a kubebuilder-style operator, one
// reconciler of ConfigMaps, made highly available by fastover's leader
// library through the controller-runtime adapter (leader/ctrlmanager):
// run several replicas; the leader reconciles and is the only endpoint of
// its selector-less Service; the standbys keep warm caches and take over
// at once when it stops (SIGTERM), or when its Lease expires.
//
// The reconciler stamps every ConfigMap labelled
// example.fastover.io/stamp=true in --namespace with the identity of the
// replica that reconciled it (example.fastover.io/stamped-by) and the time
// (stamped-at).
//
// --leader-election=controller-runtime runs the same operator with
// controller-runtime's own leader election instead (and no endpoint), as
// the benchmark (tests/bench/ctrlfailover) compares; none runs without.
package main

import (
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/fastover/fastover/examples/configmap-operator/internal/controller"
	"github.com/fastover/fastover/leader"
	"github.com/fastover/fastover/leader/ctrlmanager"
)

var (
	scheme   = runtime.NewScheme()
	setupLog = ctrl.Log.WithName("setup")
)

func init() {
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
}

func main() {
	var metricsAddr, probeAddr, election, namespace, lease, service, address, id string
	var leaseDuration, renewDeadline, retryPeriod time.Duration
	flag.StringVar(&metricsAddr, "metrics-bind-address", "0", "address the metrics endpoint binds to, also serving GET / (this replica's identity); \"0\" disables it")
	flag.StringVar(&probeAddr, "health-probe-bind-address", ":8081", "address the probe endpoint binds to; \"0\" disables it")
	flag.StringVar(&election, "leader-election", "fastover", "fastover, controller-runtime (its own leader election, no endpoint), or none")
	flag.StringVar(&namespace, "namespace", os.Getenv("POD_NAMESPACE"), "namespace of the ConfigMaps, the Lease and the Service (default $POD_NAMESPACE)")
	flag.StringVar(&lease, "lease", "configmap-operator", "name of the Lease")
	flag.StringVar(&service, "service", "", "selector-less Service the leader publishes itself in (fastover; empty: election only)")
	flag.StringVar(&address, "address", os.Getenv("POD_IP"), "IP address the leader publishes (default $POD_IP)")
	flag.StringVar(&id, "id", "", "identity of this replica (default $POD_NAME, else the host name, and a random suffix)")
	flag.DurationVar(&leaseDuration, "lease-duration", leader.DefaultLeaseDuration, "lease duration")
	flag.DurationVar(&renewDeadline, "renew-deadline", leader.DefaultRenewDeadline, "renew deadline")
	flag.DurationVar(&retryPeriod, "retry-period", leader.DefaultRetryPeriod, "retry period")
	opts := zap.Options{}
	opts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&opts)))
	if namespace == "" {
		setupLog.Error(errors.New("--namespace is required (or POD_NAMESPACE)"), "bad flags")
		os.Exit(2)
	}
	if id == "" {
		id = leader.DefaultIdentity()
	}

	options := ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: metricsAddr, ExtraHandlers: map[string]http.Handler{"/": identity(id)}},
		HealthProbeBindAddress: probeAddr,
		// The ConfigMaps of the namespace that ask for a stamp, no more.
		Cache: cache.Options{
			DefaultNamespaces: map[string]cache.Config{namespace: {}},
			ByObject:          map[client.Object]cache.ByObject{&corev1.ConfigMap{}: {Label: controller.Selector()}},
		},
	}
	// Warm standbys with either election: the comparison is of elections.
	options.Controller.EnableWarmup = ptr.To(true)

	var mgr ctrl.Manager
	var err error
	switch election {
	case "fastover":
		cfg := leader.Config{
			Namespace: namespace, LeaseName: lease, Identity: id,
			LeaseDuration: leaseDuration, RenewDeadline: renewDeadline, RetryPeriod: retryPeriod,
		}
		if service != "" {
			cfg.Endpoint = leader.EndpointFromEnv(service)
			cfg.Endpoint.Address = address
		}
		// fastover_leader_* beside controller-runtime's metrics.
		if cfg.Metrics, err = leader.NewMetrics(ctrlmetrics.Registry); err == nil {
			mgr, err = ctrlmanager.New(ctrl.GetConfigOrDie(), options, cfg)
		}
	case "controller-runtime":
		options.LeaderElection = true
		options.LeaderElectionID = lease
		options.LeaderElectionNamespace = namespace
		options.LeaderElectionReleaseOnCancel = true
		options.LeaseDuration, options.RenewDeadline, options.RetryPeriod = &leaseDuration, &renewDeadline, &retryPeriod
		mgr, err = ctrl.NewManager(ctrl.GetConfigOrDie(), options)
	case "none":
		mgr, err = ctrl.NewManager(ctrl.GetConfigOrDie(), options)
	default:
		err = fmt.Errorf("--leader-election=%q: want fastover, controller-runtime or none", election)
	}
	if err != nil {
		setupLog.Error(err, "unable to start manager")
		os.Exit(1)
	}

	if err := (&controller.ConfigMapReconciler{Client: mgr.GetClient(), Identity: id}).SetupWithManager(mgr); err != nil {
		setupLog.Error(err, "unable to create controller", "controller", "ConfigMap")
		os.Exit(1)
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		setupLog.Error(err, "unable to set up health check")
		os.Exit(1)
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		setupLog.Error(err, "unable to set up ready check")
		os.Exit(1)
	}

	setupLog.Info("starting manager", "identity", id, "leaderElection", election)
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		// With fastover, a lost Lease ends here too (leader.ErrLeadershipLost):
		// exit, to be restarted as a fresh standby.
		setupLog.Error(err, "problem running manager")
		os.Exit(1)
	}
}

// identity answers GET / with this replica's identity, so that a client
// of the Service sees which replica it reached.
func identity(id string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		_, _ = fmt.Fprintln(w, id)
	})
}
