// Command fastover-example is a small highly available "controller" built
// on fastover's leader library: run several replicas; one is the leader and
// the only endpoint of the selector-less Service, the others stand by.
//
// It serves GET / (its identity, one line), /healthz (the election's
// liveness check), /readyz (ready once the election runs, standbys too) and
// /metrics; with --tls-cert-file, over HTTPS, and with the aggregated API
// example.fastover.io/v1alpha1 under /apis (aggapi.go). SIGTERM hands leadership over; a lost Lease makes it exit with
// status 1, to be restarted as a fresh standby.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/fastover/fastover/internal/crashsignal"
	"github.com/fastover/fastover/internal/version"
	"github.com/fastover/fastover/leader"
)

func main() {
	err := run(os.Args[1:], os.Stderr)
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
	case errors.Is(err, leader.ErrLeadershipLost):
		fmt.Fprintln(os.Stderr, "fastover-example:", err, "(exiting, to be restarted as a standby)")
		os.Exit(1)
	default:
		fmt.Fprintln(os.Stderr, "fastover-example:", err)
		os.Exit(1)
	}
}

type options struct {
	kubeconfig     string
	namespace      string
	service        string
	lease          string
	id             string
	address        string
	listen         string
	port           int
	leaseDuration  time.Duration
	renewDeadline  time.Duration
	retryPeriod    time.Duration
	removeSelector bool
	podName        string
	podIPs         string
	servicePorts   bool
	drain          time.Duration
	actingLog      string
	tlsCert        string
	tlsKey         string
	requestCA      string
	allowedNames   string
	apiStandby     string
	apiPolicies    int
	apiPolicySize  int
	apiVersions    string
	standby        string
	crashTakeover  bool
	crashSignals   bool
	debugPprof     bool
}

func parseFlags(args []string, out io.Writer) (*options, error) {
	fs := flag.NewFlagSet("fastover-example", flag.ContinueOnError)
	fs.SetOutput(out)
	o := &options{}
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig file (default: in-cluster config)")
	fs.StringVar(&o.namespace, "namespace", os.Getenv("POD_NAMESPACE"), "namespace of the Lease and the Service (default $POD_NAMESPACE)")
	fs.StringVar(&o.service, "service", "", "selector-less Service the leader publishes itself in (empty: election only)")
	fs.StringVar(&o.lease, "lease", "fastover-example", "name of the Lease")
	fs.StringVar(&o.id, "id", "", "identity of this replica (default $POD_NAME, else the host name)")
	fs.StringVar(&o.address, "address", os.Getenv("POD_IP"), "IP address published in the EndpointSlice (default $POD_IP)")
	fs.StringVar(&o.listen, "listen", "", "address the HTTP server binds (default :<port>)")
	fs.IntVar(&o.port, "port", 8080, "port published in the EndpointSlice")
	fs.DurationVar(&o.leaseDuration, "lease-duration", leader.DefaultLeaseDuration, "lease duration")
	fs.DurationVar(&o.renewDeadline, "renew-deadline", leader.DefaultRenewDeadline, "renew deadline")
	fs.DurationVar(&o.retryPeriod, "retry-period", leader.DefaultRetryPeriod, "retry period")
	fs.StringVar(&o.podIPs, "pod-ips", os.Getenv("POD_IPS"), "the Pod's addresses, comma-separated, one per family: a dual-stack Service gets the leader's address of each family (default $POD_IPS)")
	fs.StringVar(&o.podName, "pod-name", os.Getenv("POD_NAME"), "name of this replica's Pod: the endpoint's targetRef, and where --service-ports resolves named targetPorts (default $POD_NAME)")
	fs.BoolVar(&o.servicePorts, "service-ports", false, "publish the Service's ports (a named targetPort resolved from this replica's Pod, which needs get on pods) instead of --port")
	fs.BoolVar(&o.removeSelector, "remove-selector", false, "let the leader remove the Service's selector (migration from a selector Service)")
	fs.DurationVar(&o.drain, "drain", 0, "how long the work takes to stop once told to, as a controller that drains its queues (for tests and demos)")
	fs.StringVar(&o.actingLog, "acting-log", "", "append a line to this file each time the leader acts (every 10 ms while it leads), with the wall-clock time in ns, for tests that check no two replicas ever act at once")
	fs.StringVar(&o.tlsCert, "tls-cert-file", "", "serving certificate (PEM): serve HTTPS, and the aggregated API example.fastover.io/v1alpha1 under /apis (needs --tls-private-key-file)")
	fs.StringVar(&o.tlsKey, "tls-private-key-file", "", "private key (PEM) of --tls-cert-file")
	fs.StringVar(&o.requestCA, "requestheader-client-ca-file", "", "CA (PEM) that the aggregation layer's client certificate chains to (default: from ConfigMap kube-system/extension-apiserver-authentication)")
	fs.StringVar(&o.allowedNames, "requestheader-allowed-names", "", "common names allowed for the aggregation layer's client certificate, comma-separated, with --requestheader-client-ca-file (empty: any signed by the CA)")
	fs.StringVar(&o.standby, "standby", "refuse", "what GET / answers on a replica that does not lead: refuse (503 and Connection: close, leader.Only: a client that reached it, on a connection it kept or at the address of a crashed leader's restarted container, dials the Service again) or answer (its identity, as the leader does)")
	fs.StringVar(&o.apiStandby, "api-standby", "answer", "what a replica that does not lead answers to the aggregated API's replicas: answer (itself, status.leading false) or refuse (503 ServiceUnavailable, Retry-After 1)")
	fs.IntVar(&o.apiPolicies, "api-policies", 0, "how many objects the aggregated API's policies resource holds: the payload an agent lists again from each new leader")
	fs.IntVar(&o.apiPolicySize, "api-policy-size", 2048, "bytes of rules in each of --api-policies")
	fs.StringVar(&o.apiVersions, "api-versions", "replica", "the policies' resourceVersions: replica (each replica's own: a watch from another's is 410 Gone, and the client lists again) or shared (the same on every replica: a watch resumes on a new leader)")
	fs.BoolVar(&o.crashTakeover, "crash-takeover", true, "crash takeover (leader.Config.Pod, from $POD_NAME, $POD_NAMESPACE, $POD_UID, $CONTAINER_NAME): standbys take over the moment the kubelet reports the leader's container ended; false: when its Lease expires")
	fs.BoolVar(&o.crashSignals, "crash-signals", false, "crash on a signal, for tests and demos: SIGUSR1 panics, SIGUSR2 allocates memory until the container's memory limit has it OOM-killed")
	fs.BoolVar(&o.debugPprof, "debug-pprof", false, "serve Go's profiles under /debug/pprof/ (net/http/pprof), to see where a replica's CPU goes, e.g. in a storm of reconnecting clients")
	showVersion := fs.Bool("version", false, "print the version and exit")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if *showVersion {
		fmt.Println(version.String("fastover-example"))
		return nil, flag.ErrHelp
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if o.namespace == "" {
		return nil, errors.New("--namespace is required (or POD_NAMESPACE)")
	}
	if o.port < 1 || o.port > 65535 {
		return nil, fmt.Errorf("--port %d: want 1-65535", o.port)
	}
	if o.listen == "" {
		o.listen = ":" + strconv.Itoa(o.port)
	}
	if (o.tlsCert == "") != (o.tlsKey == "") {
		return nil, errors.New("--tls-cert-file and --tls-private-key-file go together")
	}
	if o.tlsCert == "" && (o.requestCA != "" || o.allowedNames != "") {
		return nil, errors.New("--requestheader-client-ca-file and --requestheader-allowed-names need --tls-cert-file (the aggregated API is served over HTTPS only)")
	}
	if o.standby != "answer" && o.standby != "refuse" {
		return nil, fmt.Errorf("--standby %q: want refuse or answer", o.standby)
	}
	if o.apiStandby != "answer" && o.apiStandby != "refuse" {
		return nil, fmt.Errorf("--api-standby %q: want answer or refuse", o.apiStandby)
	}
	if err := checkPolicyFlags(o.apiPolicies, o.apiPolicySize); err != nil {
		return nil, err
	}
	if o.apiVersions != "replica" && o.apiVersions != "shared" {
		return nil, fmt.Errorf("--api-versions %q: want replica or shared", o.apiVersions)
	}
	if o.requestCA == "" && o.allowedNames != "" {
		return nil, errors.New("--requestheader-allowed-names needs --requestheader-client-ca-file (else both come from the ConfigMap)")
	}
	return o, nil
}

func run(args []string, stderr io.Writer) error {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	restConfig, err := clientcmd.BuildConfigFromFlags("", o.kubeconfig)
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(restConfig)
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics, err := leader.NewMetrics(reg)
	if err != nil {
		return err
	}
	cfg := leader.Config{
		Client:        client,
		Namespace:     o.namespace,
		LeaseName:     o.lease,
		Identity:      o.id,
		LeaseDuration: o.leaseDuration,
		RenewDeadline: o.renewDeadline,
		RetryPeriod:   o.retryPeriod,
		Metrics:       metrics,
		Logger:        klog.Background(),

		DisableCrashTakeover: !o.crashTakeover,
	}
	if o.service != "" {
		// The Pod's name and node from the downward API; the address
		// from --address, whose default is $POD_IP.
		cfg.Endpoint = leader.EndpointFromEnv(o.service)
		cfg.Endpoint.Address = o.address
		cfg.Endpoint.PodName = o.podName
		cfg.Endpoint.Addresses = nil
		for _, ip := range strings.Split(o.podIPs, ",") {
			if ip = strings.TrimSpace(ip); ip != "" {
				cfg.Endpoint.Addresses = append(cfg.Endpoint.Addresses, ip)
			}
		}
		cfg.Endpoint.RemoveSelector = o.removeSelector
		if !o.servicePorts {
			cfg.Endpoint.Ports = []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To(int32(o.port))}}
		}
	}
	elector, err := leader.New(cfg)
	if err != nil {
		return err
	}

	mux := http.NewServeMux()
	var identity http.Handler = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = fmt.Fprintln(w, elector.Identity())
	})
	if o.standby == "refuse" {
		identity = leader.Only(elector, identity)
	}
	mux.Handle("GET /{$}", identity)
	mux.HandleFunc("GET /healthz", probe(elector.Check))
	mux.HandleFunc("GET /readyz", probe(elector.Ready))
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	if o.debugPprof {
		mux.HandleFunc("GET /debug/pprof/", pprof.Index)
		mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	}
	var tlsConfig *tls.Config
	if o.tlsCert != "" {
		if tlsConfig, err = serveAPI(mux, o, client, elector); err != nil {
			return err
		}
	}
	l, err := net.Listen("tcp", o.listen)
	if err != nil {
		return err
	}
	if tlsConfig != nil {
		l = tls.NewListener(l, tlsConfig)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	if tlsConfig != nil {
		srv.ConnContext = withConnVerdict
	}
	// When the term ends (Run has returned: the Lease is released or
	// lost), the server stops at once, its watches included: their
	// clients reconnect to the Service and reach the new leader.
	stopper, err := leader.NewServerStopper(srv)
	if err != nil {
		return err
	}
	go func() { _ = srv.Serve(l) }()
	defer func() { _ = stopper.Stop(5 * time.Second) }()

	acts, err := openActingLog(o.actingLog, elector)
	if err != nil {
		return err
	}
	defer acts.close()

	if o.crashSignals {
		crashsignal.Handle("fastover-example")
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	klog.InfoS("fastover-example started", "identity", elector.Identity(), "listen", l.Addr().String(), "service", o.service, "https", tlsConfig != nil)
	err = elector.Run(ctx, func(ctx context.Context) error {
		// The controller's work: here, to be the leader until told to
		// stop, acting every 10 ms if asked to log it.
		klog.InfoS("working as the leader", "identity", elector.Identity(), "term", elector.Term())
		acts.run(ctx)
		if o.drain > 0 {
			klog.InfoS("draining", "for", o.drain)
			time.Sleep(o.drain)
		}
		return nil
	})
	acts.stop(err)
	return err
}

// serveAPI loads the serving certificate and the aggregation layer's CA and
// adds the aggregated API to mux; it returns the server's TLS
// configuration, which asks for (but does not require) a client
// certificate: /, the probes and /metrics stay open.
func serveAPI(mux *http.ServeMux, o *options, client kubernetes.Interface, src replicaSource) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(o.tlsCert, o.tlsKey)
	if err != nil {
		return nil, fmt.Errorf("--tls-cert-file/--tls-private-key-file: %w", err)
	}
	auth, err := loadFrontProxyAuth(context.Background(), client, o.requestCA, o.allowedNames)
	if err != nil {
		return nil, err
	}
	api := newAggAPI(src, auth)
	api.refuseStandby = o.apiStandby == "refuse"
	api.policies = newPolicySet(o.apiPolicies, o.apiPolicySize, src.Identity(), api.started, o.apiVersions == "shared")
	mux.Handle(apisPrefix, api)
	mux.Handle(apisPrefix+"/", api)
	return &tls.Config{
		Certificates: []tls.Certificate{cert},
		ClientAuth:   tls.RequestClientCert,
		MinVersion:   tls.VersionTLS12,
		NextProtos:   []string{"h2", "http/1.1"},
	}, nil
}

func probe(check func(*http.Request) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if err := check(r); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, "ok")
	}
}
