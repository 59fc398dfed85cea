// Command fastover-demo is `make demo`: on a local control plane of real
// Kubernetes components (etcd, kube-apiserver, kube-controller-manager,
// kube-scheduler, kwok nodes) it installs fastover with cert-manager, runs
// the example controller, and measures what fastover changes: a node lost,
// the leader killed, the leader stopped for a rolling update, a Service
// migrated from selector mode. As root it runs all of it in a network
// namespace of its own, with kube-proxy (nftables mode), and shows the
// handovers also as a client of the Service's ClusterIP sees them. It
// prints a summary table and writes the timeline as an SVG picture.
//
// It needs the binaries of `make tools` and fastover's own
// (`go build -o bin/ ./cmd/...`); `make demo` builds both. Ctrl-C stops
// it and every process it started. It exits 1 if a scenario failed, 130
// when interrupted.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/fastover/fastover/internal/demo"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// graceDefault is $GRACE if it is set, else demo.DefaultGrace.
func graceDefault() (time.Duration, error) {
	v := strings.TrimSpace(os.Getenv("GRACE"))
	if v == "" {
		return demo.DefaultGrace, nil
	}
	d, err := parseSeconds(v)
	if err != nil {
		return 0, fmt.Errorf("GRACE=%s: %w", v, err)
	}
	return d, nil
}

// parseSeconds parses a duration ("50s", "1m") or a number of seconds
// ("50").
func parseSeconds(v string) (time.Duration, error) {
	if d, err := time.ParseDuration(v); err == nil {
		return d, nil
	}
	d, err := time.ParseDuration(v + "s")
	if err != nil {
		return 0, fmt.Errorf("want a duration such as 50s")
	}
	return d, nil
}

type secondsFlag struct{ d *time.Duration }

func (f secondsFlag) String() string {
	if f.d == nil {
		return ""
	}
	return f.d.String()
}

func (f secondsFlag) Set(v string) error {
	d, err := parseSeconds(v)
	if err != nil {
		return err
	}
	*f.d = d
	return nil
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("fastover-demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var opts demo.Options
	grace, err := graceDefault()
	if err != nil {
		_, _ = fmt.Fprintln(stderr, "fastover-demo:", err)
		return 2
	}
	opts.Grace = grace
	fs.Var(secondsFlag{&opts.Grace}, "grace", "node-monitor grace period: how long a lost node stays Ready (default $GRACE, else 20s; Kubernetes' default is 50s)")
	fs.StringVar(&opts.SVGPath, "svg", "demo-timeline.svg", "where to write the timeline picture (empty: none)")
	fs.BoolVar(&opts.Quick, "quick", false, "short leader election (4s/3s/1s) and observation windows, as the CI test")
	fs.DurationVar(&opts.LeaseDuration, "lease-duration", 0, "the example's lease duration (default 15s; 4s with --quick)")
	fs.DurationVar(&opts.RenewDeadline, "renew-deadline", 0, "the example's renew deadline (default 10s; 3s with --quick)")
	fs.DurationVar(&opts.RetryPeriod, "retry-period", 0, "the example's retry period (default 2s; 1s with --quick)")
	minSync := time.Second
	fs.DurationVar(&minSync, "kube-proxy-min-sync", minSync, "kube-proxy's --iptables-min-sync-period in the kube-proxy lane (1s is kube-proxy's default; 0s syncs at once)")
	fs.StringVar(&opts.Nodes, "nodes", demo.NodesAuto, "the nodes: \"real\" (kubelet, containerd, runc; fastover's images installed by helm: needs root), \"kwok\", or empty for real nodes when they can run here")
	fs.BoolVar(&opts.Keep, "keep", false, "keep the cluster running after the summary, until Ctrl-C, and its files: it says how to reach its API server and the real nodes' containerd")
	fs.StringVar(&opts.BinDir, "bin", "", "directory of the binaries (default $FASTOVER_BIN, else bin/ of the repository)")
	fs.Usage = func() {
		_, _ = fmt.Fprintf(stderr, "Usage: fastover-demo [flags]\n\nShows, on a local control plane of real Kubernetes components, what fastover changes.\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		_, _ = fmt.Fprintf(stderr, "fastover-demo: unexpected arguments %q\n", fs.Args())
		return 2
	}
	switch {
	case minSync < 0:
		_, _ = fmt.Fprintf(stderr, "fastover-demo: --kube-proxy-min-sync=%v: want 0s or more\n", minSync)
		return 2
	case minSync == 0:
		opts.KubeProxyMinSync = -1 // Options' 0s
	default:
		opts.KubeProxyMinSync = minSync
	}
	opts.Out = stdout

	// Ctrl-C or SIGTERM stops the demo and everything it started; a
	// second one exits at once (the processes die with this one).
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	go func() {
		sig := <-sigs
		_, _ = fmt.Fprintf(stderr, "\nfastover-demo: %v: stopping every process it started (again to exit at once)\n", sig)
		cancel()
		<-sigs
		_, _ = fmt.Fprintln(stderr, "fastover-demo: exiting at once")
		os.Exit(130)
	}()

	sum, err := demo.Run(ctx, opts)
	switch {
	case opts.Keep && err == nil && ctx.Err() != nil:
		_, _ = fmt.Fprintln(stderr, "fastover-demo: stopped; every process it started is stopped, its files kept")
		if !sum.Passed() {
			return 1
		}
		return 0
	case ctx.Err() != nil:
		_, _ = fmt.Fprintln(stderr, "fastover-demo: interrupted; every process it started is stopped")
		return 130
	case err != nil:
		_, _ = fmt.Fprintln(stderr, "fastover-demo:", err)
		return 1
	case !sum.Passed():
		_, _ = fmt.Fprintln(stderr, "fastover-demo: a scenario failed")
		return 1
	}
	return 0
}
