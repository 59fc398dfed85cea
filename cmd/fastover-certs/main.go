// Command fastover-certs makes the webhook's certificates without
// cert-manager: a CA (kept in --ca-dir and reused, so the caBundle never
// changes), a serving certificate for --hosts written to --cert-dir as
// tls.crt and tls.key, and, with --webhook-configuration, the caBundle of
// that MutatingWebhookConfiguration. Run it again to renew the serving
// certificate: the webhook picks the new files up without a restart.
//
// The CA's key never goes into the cert dir, which is what the webhook (or
// a Secret made from it) gets: --ca-dir defaults to the cert dir's path
// with -ca appended, and a --ca-dir that is the cert dir, or inside it, is
// refused. A cert dir written by an older version, with ca.key in it, has
// its CA moved to --ca-dir on the next run (the same CA, so the caBundle
// stays).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/fastover/fastover/certs"
	"github.com/fastover/fastover/internal/version"
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
	certDir := fs.String("cert-dir", "", "directory for tls.crt, tls.key and ca.crt, as the webhook reads it (required)")
	caDir := fs.String("ca-dir", "", "directory of the CA (ca.crt, ca.key), made on first use; not the cert dir nor inside it (default: the cert dir's path followed by -ca)")
	hosts := fs.String("hosts", "", "comma-separated DNS names and IP addresses of the webhook (required), e.g. fastover-webhook.fastover-system.svc")
	validity := fs.Duration("validity", 90*24*time.Hour, "validity of the serving certificate")
	caValidity := fs.Duration("ca-validity", 10*365*24*time.Hour, "validity of a new CA")
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig, for --webhook-configuration (default: in-cluster)")
	webhookConfig := fs.String("webhook-configuration", "", "MutatingWebhookConfiguration whose caBundle to set")
	showVersion := fs.Bool("version", false, "print the version and exit")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *showVersion {
		_, err := fmt.Fprintln(stdout, version.String("fastover-certs"))
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if *certDir == "" || *hosts == "" {
		return errors.New("--cert-dir and --hosts are required")
	}
	if *validity <= 0 || *caValidity <= 0 {
		return errors.New("--validity and --ca-validity must be positive")
	}
	var err error
	if *caDir, err = caDirFor(*certDir, *caDir); err != nil {
		return err
	}
	var names []string
	for _, h := range strings.Split(*hosts, ",") {
		if h = strings.TrimSpace(h); h != "" {
			names = append(names, h)
		}
	}
	if len(names) == 0 {
		return errors.New("--hosts names no DNS name or IP address")
	}

	moved, err := certs.MoveCA(*certDir, *caDir)
	if err != nil {
		return fmt.Errorf("the cert dir %s holds a CA key (written by an older fastover-certs), to be moved to %s: %w", *certDir, *caDir, err)
	}
	if moved {
		_, _ = fmt.Fprintf(stdout, "moved the CA key from %s to %s: the cert dir no longer holds it (same CA, same caBundle)\n", *certDir, *caDir)
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
	if kp.NotAfter.Equal(ca.NotAfter()) {
		_, _ = fmt.Fprintf(stderr, "WARNING: the CA in %s expires at %s, before the %v asked for: the serving certificate ends then too. "+
			"Make a new CA before then (remove its %s and %s and run again with --webhook-configuration, which sets the new caBundle).\n",
			*caDir, ca.NotAfter().UTC().Format(time.RFC3339), *validity, certs.CAFile, certs.CAKeyFile)
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

// caDirFor returns the CA directory to use with certDir: caDir if given,
// else certDir's path followed by -ca. It refuses a CA directory that is
// certDir or lies inside it (symbolic links resolved as far as the paths
// exist): whatever reads the cert dir would get the CA key, which signs
// certificates for any name.
func caDirFor(certDir, caDir string) (string, error) {
	certAbs, err := filepath.Abs(certDir)
	if err != nil {
		return "", err
	}
	if caDir == "" {
		if filepath.Dir(certAbs) == certAbs {
			return "", fmt.Errorf("--cert-dir is %s: give --ca-dir", certAbs)
		}
		caDir = certAbs + "-ca"
	}
	caAbs, err := filepath.Abs(caDir)
	if err != nil {
		return "", err
	}
	certReal, caReal := resolve(certAbs), resolve(caAbs)
	if rel, err := filepath.Rel(certReal, caReal); err == nil && (rel == "." || filepath.IsLocal(rel)) {
		return "", fmt.Errorf("--ca-dir %s is the cert dir %s or inside it: the CA key would be handed to whatever reads the cert dir (the webhook, a Secret made from it); "+
			"choose a directory outside it (the default is %s-ca)", caDir, certDir, certAbs)
	}
	return caDir, nil
}

// resolve evaluates the symbolic links of the longest part of the
// absolute path p that exists, and appends the rest.
func resolve(p string) string {
	if real, err := filepath.EvalSymlinks(p); err == nil {
		return real
	}
	parent := filepath.Dir(p)
	if parent == p {
		return p
	}
	return filepath.Join(resolve(parent), filepath.Base(p))
}
