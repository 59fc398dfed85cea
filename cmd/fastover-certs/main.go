// Command fastover-certs makes the webhook's certificates without
// cert-manager: a CA (kept in --ca-dir and reused, so the caBundle never
// changes), a serving certificate for --hosts written to --cert-dir as
// tls.crt and tls.key, and, with --webhook-configuration, the caBundle of
// that MutatingWebhookConfiguration. Run it again to renew the serving
// certificate: the webhook picks the new files up without a restart.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/fastover/fastover/certs"
)

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		fmt.Fprintln(os.Stderr, "fastover-certs:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("fastover-certs", flag.ContinueOnError)
	fs.SetOutput(stderr)
	certDir := fs.String("cert-dir", "", "directory for tls.crt, tls.key and ca.crt (required)")
	caDir := fs.String("ca-dir", "", "directory of the CA (ca.crt, ca.key), made on first use (default: --cert-dir)")
	hosts := fs.String("hosts", "", "comma-separated DNS names and IP addresses of the webhook (required), e.g. fastover-webhook.fastover-system.svc")
	validity := fs.Duration("validity", 90*24*time.Hour, "validity of the serving certificate")
	caValidity := fs.Duration("ca-validity", 10*365*24*time.Hour, "validity of a new CA")
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig, for --webhook-configuration (default: in-cluster)")
	webhookConfig := fs.String("webhook-configuration", "", "MutatingWebhookConfiguration whose caBundle to set")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if *certDir == "" || *hosts == "" {
		return errors.New("--cert-dir and --hosts are required")
	}
	if *caDir == "" {
		*caDir = *certDir
	}
	var names []string
	for _, h := range strings.Split(*hosts, ",") {
		if h = strings.TrimSpace(h); h != "" {
			names = append(names, h)
		}
	}

	ca, created, err := certs.LoadOrCreateCA(*caDir, "fastover-webhook-ca", *caValidity)
	if err != nil {
		return err
	}
	if created {
		_, _ = fmt.Fprintf(stdout, "made a new CA in %s\n", *caDir)
	}
	kp, err := ca.Issue(names, *validity)
	if err != nil {
		return err
	}
	if err := certs.WriteDir(*certDir, kp, ca); err != nil {
		return err
	}
	_, _ = fmt.Fprintf(stdout, "wrote a serving certificate for %s to %s (serial %x, valid until %s)\n",
		strings.Join(names, ", "), *certDir, kp.Serial, kp.NotAfter.UTC().Format(time.RFC3339))

	if *webhookConfig == "" {
		return nil
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	changed, err := certs.PatchCABundle(ctx, client, *webhookConfig, ca.CertPEM)
	if err != nil {
		return err
	}
	if changed {
		_, _ = fmt.Fprintf(stdout, "set the caBundle of MutatingWebhookConfiguration %s\n", *webhookConfig)
	} else {
		_, _ = fmt.Fprintf(stdout, "the caBundle of MutatingWebhookConfiguration %s is already this CA\n", *webhookConfig)
	}
	return nil
}
