// Command fastover-webhook serves fastover's mutating admission webhook:
// pods of namespaces labelled fastover.io/inject=enabled get an
// unreachable:NoExecute toleration of the rule's tolerationSeconds (0 by
// default). The rule is --rule-file, the ConfigMap fastover-rule mounted
// as a volume, re-read and applied without a restart; a rule flag given
// (--toleration-seconds, ...) wins over it for this process.
//
// It needs no access to the API server: the API server calls it. With
// --reconcile it also runs the retrofit reconciler on one replica, elected
// through a Lease: pods of enabled namespaces that missed injection (the
// webhook fails open) are fixed in place.
package main

import (
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/manager/signals"

	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/fastover/fastover/internal/version"
	"github.com/fastover/fastover/toleration"
	"github.com/fastover/fastover/webhook"
)

func main() {
	if err := run(os.Args[1:], os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		fmt.Fprintln(os.Stderr, "fastover-webhook:", err)
		os.Exit(1)
	}
}

// config is the parsed command line.
type config struct {
	opts      webhook.Options
	zap       zap.Options
	reconcile reconcileConfig
}

func parseFlags(args []string, out io.Writer) (*config, error) {
	fs := flag.NewFlagSet("fastover-webhook", flag.ContinueOnError)
	fs.SetOutput(out)
	c := &config{}
	rule := toleration.DefaultRule()
	tlsMin := "1.2"
	fs.StringVar(&c.opts.Host, "host", "", "address the webhook binds to (default: all)")
	fs.IntVar(&c.opts.Port, "port", 9443, "port of the webhook's HTTPS server")
	fs.StringVar(&c.opts.CertDir, "cert-dir", "/tmp/k8s-webhook-server/serving-certs",
		"directory with tls.crt and tls.key; new files are picked up without a restart")
	fs.StringVar(&tlsMin, "tls-min-version", tlsMin, "lowest TLS version accepted: 1.2 or 1.3")
	fs.BoolVar(&c.opts.EnableHTTP2, "enable-http2", false, "serve HTTP/2 as well as HTTP/1.1")
	fs.StringVar(&c.opts.MetricsBindAddress, "metrics-bind-address", ":8080", `address of the Prometheus metrics endpoint ("0" disables it)`)
	fs.StringVar(&c.opts.HealthProbeBindAddress, "health-probe-bind-address", ":8081", `address of /healthz and /readyz ("0" disables them)`)
	fs.DurationVar(&c.opts.ShutdownDelay, "shutdown-delay", 5*time.Second,
		"on SIGTERM, fail /readyz and keep serving this long, while the endpoints move to other replicas, before draining (0: none)")
	fs.DurationVar(&c.opts.ShutdownTimeout, "shutdown-timeout", 15*time.Second,
		"then wait at most this long for the requests in flight; terminationGracePeriodSeconds must exceed both together")
	fs.StringVar(&c.opts.RuleFile, "rule-file", "",
		"the rule: the directory the ConfigMap fastover-rule is mounted as, a file per key (the manifests mount it at "+toleration.RuleFile+
			"), or a rule file (apiVersion: fastover.io/v1alpha1, kind: Rule), re-read every few seconds and applied without a restart; a rule flag given here wins over it, for this process only (empty: the rule flags alone)")
	rule.AddFlags(fs)
	c.reconcile.bindFlags(fs)
	c.zap.BindFlags(fs)
	showVersion := fs.Bool("version", false, "print the version and exit")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if *showVersion {
		fmt.Println(version.String("fastover-webhook"))
		return nil, flag.ErrHelp
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	switch tlsMin {
	case "1.2":
		c.opts.TLSMinVersion = tls.VersionTLS12
	case "1.3":
		c.opts.TLSMinVersion = tls.VersionTLS13
	default:
		return nil, fmt.Errorf("--tls-min-version: want 1.2 or 1.3, got %q", tlsMin)
	}
	if err := rule.Validate(); err != nil {
		return nil, err
	}
	if c.opts.ShutdownDelay < 0 {
		return nil, fmt.Errorf("--shutdown-delay must not be negative, got %v", c.opts.ShutdownDelay)
	}
	if c.opts.ShutdownTimeout <= 0 {
		return nil, fmt.Errorf("--shutdown-timeout must be positive, got %v", c.opts.ShutdownTimeout)
	}
	if c.opts.ShutdownDelay == 0 {
		c.opts.ShutdownDelay = -1 // the option's zero means its default
	}
	if err := c.reconcile.validate(); err != nil {
		return nil, err
	}
	c.opts.Rule = &rule
	// The rule flags given explicitly win over the rule file.
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	c.opts.RuleOverride = func(r toleration.Rule) toleration.Rule {
		return r.WithFlags(rule, func(name string) bool { return given[name] })
	}
	return c, nil
}

func run(args []string, stderr io.Writer) error {
	c, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	logf.SetLogger(zap.New(zap.UseFlagOptions(&c.zap), zap.WriteTo(stderr)))
	setMemoryLimit(logf.Log.WithName("memory"), "/")
	if c.reconcile.only {
		return c.reconcile.runAlone(signals.SetupSignalHandler(), c.opts, logf.Log.WithName("reconciler"))
	}
	srv, err := webhook.NewServer(c.opts)
	if err != nil {
		return err
	}
	// SIGTERM or SIGINT: fail readiness, serve for --shutdown-delay, stop
	// accepting, answer what is in flight, exit. A second signal exits at
	// once.
	ctx := signals.SetupSignalHandler()
	if !c.reconcile.enabled {
		return srv.Start(ctx)
	}
	// The reconciler follows the server's rule.
	rec, err := c.reconcile.build(srv.Rules(), c.opts.Registry, logf.Log.WithName("reconciler"))
	if err != nil {
		return err
	}
	// A lost Lease stops the server too: the process exits (see run).
	return rec.runBeside(ctx, srv.Start)
}
