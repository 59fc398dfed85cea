// Command fastover-run makes any process active/standby without touching
// it: every replica runs fastover-run, which takes part in a Lease
// election; only the leader runs COMMAND, and publishes itself as the
// only endpoint of a selector-less Service once COMMAND is ready.
//
//	fastover-run --lease=my-controller --service=my-controller \
//	    --ready-http=http://127.0.0.1:8080/readyz -- my-controller --flag=value
//
// When COMMAND exits while leading, fastover-run releases the Lease at once
// and exits with COMMAND's status, so the kubelet restarts the container
// as a standby and another replica starts COMMAND. SIGTERM (a pod being
// deleted, a rolling update) is passed on to COMMAND; once it has ended
// (SIGKILL after --grace-period), the Lease is released: a planned
// handover. When the Lease cannot be renewed, COMMAND is stopped before
// another replica can lead. fastover-run reaps every child as PID 1 of a
// container must, and passes SIGHUP, SIGUSR1 and SIGUSR2 on to COMMAND.
//
// docs/run.md says when to use it rather than the leader library, with
// the Role it needs and the Deployment it runs in.
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
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/fastover/fastover/internal/supervisor"
	"github.com/fastover/fastover/internal/version"
	"github.com/fastover/fastover/leader"
)

// Exit statuses of fastover-run itself; otherwise it exits with
// COMMAND's.
const (
	exitFailed = 1 // fastover-run failed (configuration, the API server, the Lease lost)
	exitUsage  = 2 // a command line it cannot run
)

func main() {
	os.Exit(run(os.Args[1:], os.Stderr))
}

// options is the parsed command line.
type options struct {
	kubeconfig, namespace, lease, service, address, id, probeAddress, copyTo string
	check                                                                    supervisor.Check
	grace, leaseDuration, renewDeadline, retryPeriod                         time.Duration
	skipChecks, showVersion                                                  bool
	command                                                                  []string
}

const usage = `Usage: fastover-run [flags] -- COMMAND [ARG...]

Runs COMMAND on the leader of a Lease election only; with --service, the
leader is the Service's only endpoint once COMMAND is ready. Every replica
of the workload runs fastover-run; the standbys run nothing until they lead.

Flags:
`

func parseFlags(args []string, out io.Writer) (*options, error) {
	fs := flag.NewFlagSet("fastover-run", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.Usage = func() {
		_, _ = fmt.Fprint(out, usage)
		fs.PrintDefaults()
		_, _ = fmt.Fprint(out, `
Environment (the downward API, as the leader library reads it): POD_NAMESPACE,
POD_NAME, POD_IP, POD_IPS, NODE_NAME, POD_UID, CONTAINER_NAME.

Exit status: COMMAND's, as a shell reports it (128+N if a signal N ended it,
127 if it was not found, 126 if it could not be executed); 1 if fastover-run
itself failed or lost the Lease; 2 for a command line it cannot run.
`)
	}
	o := &options{}
	fs.StringVar(&o.lease, "lease", "", "name of the Lease the replicas elect their leader with (required)")
	fs.StringVar(&o.namespace, "namespace", os.Getenv("POD_NAMESPACE"), "namespace of the Lease and the Service (default $POD_NAMESPACE)")
	fs.StringVar(&o.service, "service", "", "selector-less Service whose only endpoint the leader becomes once COMMAND is ready (empty: election only)")
	fs.StringVar(&o.address, "address", os.Getenv("POD_IP"), "IP address the leader publishes (default $POD_IP)")
	fs.StringVar(&o.check.HTTP, "ready-http", "", "COMMAND is ready when this URL answers a GET with a status below 400, e.g. http://127.0.0.1:8080/readyz")
	fs.StringVar(&o.check.TCP, "ready-tcp", "", "COMMAND is ready when this host:port takes a connection, e.g. 127.0.0.1:8080 (neither check: ready once started)")
	fs.DurationVar(&o.grace, "grace-period", 25*time.Second, "on SIGTERM, how long COMMAND has to exit before SIGKILL; keep it below the pod's terminationGracePeriodSeconds")
	fs.DurationVar(&o.leaseDuration, "lease-duration", leader.DefaultLeaseDuration, "lease duration")
	fs.DurationVar(&o.renewDeadline, "renew-deadline", leader.DefaultRenewDeadline, "renew deadline: COMMAND is stopped when the Lease could not be renewed within it")
	fs.DurationVar(&o.retryPeriod, "retry-period", leader.DefaultRetryPeriod, "retry period")
	fs.StringVar(&o.id, "id", "", "identity of this replica (default $POD_NAME, else the host name, and a random suffix)")
	fs.StringVar(&o.probeAddress, "probe-address", ":8484", `address of /readyz (ready once standing by) and /healthz, for the pod's probes, and of /metrics (the election's fastover_leader_* metrics); "0" disables them`)
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig file (default: the in-cluster config)")
	fs.BoolVar(&o.skipChecks, "skip-checks", false, "start without checking the Service and the Role first")
	fs.StringVar(&o.copyTo, "copy-to", "", "copy this binary into the directory and exit: an init container's command, for an emptyDir the controller's container mounts")
	fs.BoolVar(&o.showVersion, "version", false, "print the version and exit")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if o.showVersion {
		return o, nil
	}
	if o.copyTo != "" {
		if fs.NArg() > 0 {
			return nil, fmt.Errorf("--copy-to takes no COMMAND (got %q)", fs.Args())
		}
		return o, nil
	}
	o.command = fs.Args()
	var problems []string
	if len(o.command) == 0 {
		problems = append(problems, "no COMMAND: give it after the flags, as fastover-run [flags] -- COMMAND [ARG...]")
	}
	if o.lease == "" {
		problems = append(problems, "--lease is required")
	}
	if o.namespace == "" {
		problems = append(problems, "--namespace is required (or $POD_NAMESPACE, from the downward API's metadata.namespace)")
	}
	if o.service != "" && o.address == "" {
		problems = append(problems, "--service needs the leader's address: --address or $POD_IP (the downward API's status.podIP)")
	}
	if err := o.check.Validate(); err != nil {
		problems = append(problems, err.Error())
	}
	if o.grace <= 0 {
		problems = append(problems, fmt.Sprintf("--grace-period=%v: want more than 0", o.grace))
	}
	if len(problems) > 0 {
		return nil, errors.New(strings.Join(problems, "; "))
	}
	return o, nil
}

// run is fastover-run; it returns the process's exit status.
func run(args []string, stderr io.Writer) int {
	o, err := parseFlags(args, stderr)
	switch {
	case errors.Is(err, flag.ErrHelp):
		return 0
	case err != nil:
		_, _ = fmt.Fprintln(stderr, "fastover-run:", err)
		_, _ = fmt.Fprintln(stderr, "Run fastover-run --help for the flags.")
		return exitUsage
	case o.showVersion:
		fmt.Println(version.String("fastover-run"))
		return 0
	case o.copyTo != "":
		path, err := copySelf(o.copyTo)
		if err != nil {
			_, _ = fmt.Fprintln(stderr, "fastover-run: --copy-to:", err)
			return exitFailed
		}
		_, _ = fmt.Fprintln(stderr, "fastover-run: copied to", path)
		return 0
	}
	// A COMMAND that cannot start fails every replica at once, as a shell
	// would, rather than each leader in turn.
	if _, err := supervisor.Find(o.command[0]); err != nil {
		_, _ = fmt.Fprintln(stderr, "fastover-run:", err)
		return supervisor.StatusOf(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	code, err := campaign(ctx, o)
	if err != nil {
		_, _ = fmt.Fprintln(stderr, "fastover-run:", err)
	}
	return code
}

// campaign runs the election and, on the leader, COMMAND; it returns the
// exit status.
func campaign(ctx context.Context, o *options) (int, error) {
	cfg, err := restConfig(o.kubeconfig)
	if err != nil {
		return exitFailed, err
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return exitFailed, err
	}
	reg := prometheus.NewRegistry()
	metrics, err := leader.NewMetrics(reg)
	if err != nil {
		return exitFailed, err
	}
	for _, c := range []prometheus.Collector{collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})} {
		if err := reg.Register(c); err != nil {
			return exitFailed, err
		}
	}
	lc := leader.Config{
		Client: client, Namespace: o.namespace, LeaseName: o.lease, Identity: o.id, Metrics: metrics,
		LeaseDuration: o.leaseDuration, RenewDeadline: o.renewDeadline, RetryPeriod: o.retryPeriod,
		// The work (COMMAND) gets its grace period; the Lease is renewed
		// meanwhile.
		WorkStopTimeout: o.grace + 5*time.Second,
		Logger:          klog.Background(),
	}
	if lc.Identity == "" {
		lc.Identity = leader.DefaultIdentity()
	}
	sup := &supervisor.Supervisor{
		Command: o.command, Check: o.check, Grace: o.grace,
		// When the Lease is lost, COMMAND has ended well before another
		// replica can take it (its work context is cancelled at the
		// renew deadline; the Lease expires a lease duration after the
		// last renewal).
		LostGrace: max((o.leaseDuration-o.renewDeadline)/2, 100*time.Millisecond),
		Stopping:  func() bool { return ctx.Err() != nil },
		Log:       klog.Background().WithName("command"),
	}
	if o.service != "" {
		lc.Endpoint = leader.EndpointFromEnv(o.service)
		lc.Endpoint.Address = o.address
		lc.Endpoint.Ready = sup.Ready
	}
	if !o.skipChecks {
		if err := preflight(ctx, client, o.namespace, lc.Endpoint); err != nil {
			return exitFailed, err
		}
	}
	elector, err := leader.New(lc)
	if err != nil {
		return exitFailed, err
	}
	if o.probeAddress != "0" {
		if err := serveProbes(ctx, o.probeAddress, elector, reg); err != nil {
			return exitFailed, err
		}
	}
	klog.InfoS("fastover-run standing for election", "identity", elector.Identity(), "lease", o.namespace+"/"+o.lease, "service", o.service, "command", o.command, "ready", o.check.String())
	err = elector.Run(ctx, sup.Work)
	code, ended := sup.Status()
	switch {
	case errors.Is(err, leader.ErrLeadershipLost):
		return exitFailed, fmt.Errorf("%w (COMMAND stopped; exiting, to be restarted as a standby)", err)
	case ended && code != 0:
		return code, nil // COMMAND said why
	case err != nil:
		return exitFailed, err
	}
	return 0, nil
}

func restConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig != "" {
		return clientcmd.BuildConfigFromFlags("", kubeconfig)
	}
	cfg, err := rest.InClusterConfig()
	if err != nil {
		return nil, fmt.Errorf("%w (outside a cluster, give --kubeconfig)", err)
	}
	return cfg, nil
}

// serveProbes serves /readyz (the elector's: ready once standing by, so a
// standby is Ready and a rolling update can go on), /healthz and /metrics
// (the registry's: the election's metrics, which fastover's leader alerts
// read) until ctx ends.
func serveProbes(ctx context.Context, addr string, elector *leader.Elector, reg *prometheus.Registry) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("--probe-address: %w", err)
	}
	mux := http.NewServeMux()
	check := func(f func(*http.Request) error) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			if err := f(r); err != nil {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
			_, _ = io.WriteString(w, "ok\n")
		}
	}
	mux.Handle("/readyz", check(elector.Ready))
	mux.Handle("/healthz", check(elector.Check))
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	context.AfterFunc(ctx, func() { _ = srv.Close() })
	return nil
}
