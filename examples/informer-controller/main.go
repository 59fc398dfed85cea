// Command informer-controller is a client-go controller (a shared informer
// over many ConfigMaps, event handlers, a work queue, workers) made highly
// available by fastover's leader library, with warm standbys: every
// replica starts its informers and waits for their caches in
// leader.Config.Prepare, while another replica leads, and competes for
// the Lease only then. When the leader stops, a standby takes over with
// its cache full, and its work starts at once.
//
// With --warm=false it starts its informers only once it leads, the usual
// client-go pattern, and its work waits for the caches to sync first: the
// benchmark (tests/bench/warmstandby) compares the two.
//
// The leader's first unit of work stamps the ConfigMap --stamp with its
// identity, the time and the number of ConfigMaps in its cache
// (annotations example.fastover.io/stamped-by, stamped-at, cached); then
// its workers process the queue. It serves /readyz (ready once the caches
// are synced, standbys too) and /healthz on --probe-address.
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
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/fastover/fastover/leader"
)

func main() {
	err := run(os.Args[1:], os.Stderr)
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
	case errors.Is(err, leader.ErrLeadershipLost):
		fmt.Fprintln(os.Stderr, "informer-controller:", err, "(exiting, to be restarted as a standby)")
		os.Exit(1)
	default:
		fmt.Fprintln(os.Stderr, "informer-controller:", err)
		os.Exit(1)
	}
}

type options struct {
	kubeconfig, namespace, lease, service, address, id, stamp, probeAddress string
	warm                                                                    bool
	workers                                                                 int
	leaseDuration, renewDeadline, retryPeriod                               time.Duration
}

func parseFlags(args []string, out io.Writer) (*options, error) {
	fs := flag.NewFlagSet("informer-controller", flag.ContinueOnError)
	fs.SetOutput(out)
	o := &options{}
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig file (default: in-cluster config)")
	fs.StringVar(&o.namespace, "namespace", os.Getenv("POD_NAMESPACE"), "namespace of the ConfigMaps, the Lease and the Service (default $POD_NAMESPACE)")
	fs.StringVar(&o.lease, "lease", "informer-controller", "name of the Lease")
	fs.StringVar(&o.service, "service", "", "selector-less Service the leader publishes itself in (empty: election only)")
	fs.StringVar(&o.address, "address", os.Getenv("POD_IP"), "IP address the leader publishes (default $POD_IP)")
	fs.StringVar(&o.id, "id", "", "identity of this replica (default $POD_NAME, else the host name, and a random suffix)")
	fs.StringVar(&o.stamp, "stamp", "", "ConfigMap the leader stamps first (default: the Lease's name)")
	fs.StringVar(&o.probeAddress, "probe-address", ":8081", "address of /readyz and /healthz; \"0\" disables them")
	fs.BoolVar(&o.warm, "warm", true, "start the informers while standing by (leader.Config.Prepare); false: only once leading")
	fs.IntVar(&o.workers, "workers", 2, "workers processing the queue")
	fs.DurationVar(&o.leaseDuration, "lease-duration", leader.DefaultLeaseDuration, "lease duration")
	fs.DurationVar(&o.renewDeadline, "renew-deadline", leader.DefaultRenewDeadline, "renew deadline")
	fs.DurationVar(&o.retryPeriod, "retry-period", leader.DefaultRetryPeriod, "retry period")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	switch {
	case fs.NArg() > 0:
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	case o.namespace == "":
		return nil, errors.New("--namespace is required (or $POD_NAMESPACE)")
	case o.workers < 1:
		return nil, fmt.Errorf("--workers=%d: want at least 1", o.workers)
	}
	if o.stamp == "" {
		o.stamp = o.lease
	}
	return o, nil
}

func run(args []string, out io.Writer) error {
	o, err := parseFlags(args, out)
	if err != nil {
		return err
	}
	var cfg *rest.Config
	if o.kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", o.kubeconfig)
	} else {
		cfg, err = rest.InClusterConfig()
	}
	if err != nil {
		return err
	}
	// A controller with a large cache lists a lot at once.
	cfg.QPS, cfg.Burst = 50, 100
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	if o.id == "" {
		o.id = leader.DefaultIdentity()
	}
	c, err := newController(client, o.namespace, o.id, o.stamp)
	if err != nil {
		return err
	}
	defer c.factory.Shutdown()

	lc := leader.Config{
		Client: client, Namespace: o.namespace, LeaseName: o.lease, Identity: o.id,
		LeaseDuration: o.leaseDuration, RenewDeadline: o.renewDeadline, RetryPeriod: o.retryPeriod,
	}
	if o.service != "" {
		lc.Endpoint = leader.EndpointFromEnv(o.service)
		lc.Endpoint.Address = o.address
	}
	if o.warm {
		// The warm standby: caches synced before the replica competes.
		lc.Prepare = c.startInformers
	}
	elector, err := leader.New(lc)
	if err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if o.probeAddress != "0" {
		if err := serveProbes(ctx, o.probeAddress, elector); err != nil {
			return err
		}
	}
	return elector.Run(ctx, func(ctx context.Context) error {
		if !o.warm {
			// The usual pattern: informers started by the leader.
			if err := c.startInformers(ctx); err != nil {
				return err
			}
		}
		return c.lead(ctx, o.workers)
	})
}

// serveProbes serves /readyz and /healthz (the elector's checks) until ctx
// ends.
func serveProbes(ctx context.Context, addr string, elector *leader.Elector) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
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
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	// Stopped as fastover-example's server is (leader.ServerStopper): at
	// once, streams included, the probes under way given a second.
	stopper, err := leader.NewServerStopper(srv)
	if err != nil {
		_ = ln.Close()
		return err
	}
	go func() { _ = srv.Serve(ln) }()
	context.AfterFunc(ctx, func() { _ = stopper.Stop(time.Second) })
	return nil
}
