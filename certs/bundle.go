package certs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
)

// CAKeyFile is the CA's private key in a CA directory, beside CAFile.
const CAKeyFile = "ca.key"

// ErrNoCA is returned by ReadCA for a directory that holds neither
// ca.crt nor ca.key.
var ErrNoCA = errors.New("no CA")

// ReadCA reads the CA in dir (ca.crt and ca.key), checked as LoadCA checks
// it. A directory with neither file, or none at all, gives an error that
// is ErrNoCA (and fs.ErrNotExist).
func ReadCA(dir string) (*CA, error) {
	certPEM, certErr := os.ReadFile(filepath.Join(dir, CAFile))
	keyPEM, keyErr := os.ReadFile(filepath.Join(dir, CAKeyFile))
	switch {
	case certErr == nil && keyErr == nil:
		ca, err := LoadCA(certPEM, keyPEM)
		if err != nil {
			return nil, fmt.Errorf("CA in %s: %w", dir, err)
		}
		return ca, nil
	case errors.Is(certErr, fs.ErrNotExist) && errors.Is(keyErr, fs.ErrNotExist):
		return nil, fmt.Errorf("%w in %s: %w", ErrNoCA, dir, fs.ErrNotExist)
	case certErr != nil && !errors.Is(certErr, fs.ErrNotExist):
		return nil, certErr
	case keyErr != nil && !errors.Is(keyErr, fs.ErrNotExist):
		return nil, keyErr
	default:
		return nil, fmt.Errorf("CA in %s: one of %s and %s is missing; remove the other to make a new CA", dir, CAFile, CAKeyFile)
	}
}

// SaveCA writes the CA into dir as ca.key (mode 0600) and ca.crt, each
// replaced in one rename and synced to disk, the key first. dir is made
// with mode 0700 if missing.
func SaveCA(dir string, ca *CA) error {
	keyPEM, err := ca.KeyPEM()
	if err != nil {
		return err
	}
	if err := mkdirDurable(dir, 0o700); err != nil {
		return err
	}
	if err := writeAtomic(filepath.Join(dir, CAKeyFile), keyPEM, 0o600); err != nil {
		return err
	}
	return writeAtomic(filepath.Join(dir, CAFile), ca.CertPEM, 0o644)
}

// LoadOrCreateCA reads the CA in dir (ca.crt and ca.key) or, if there is
// none, makes one valid for validity and writes it there. Reusing the CA
// is what keeps a webhook's caBundle unchanged when its serving
// certificate is renewed. created reports a new CA. A CA that has expired,
// or is not valid yet, is an error: a new CA changes the caBundle, which
// is the caller's decision.
func LoadOrCreateCA(dir, commonName string, validity time.Duration) (ca *CA, created bool, err error) {
	ca, err = ReadCA(dir)
	if err == nil {
		return ca, false, nil
	}
	if !errors.Is(err, ErrNoCA) {
		return nil, false, err
	}
	if ca, err = NewCA(commonName, validity); err != nil {
		return nil, false, err
	}
	if err := SaveCA(dir, ca); err != nil {
		return nil, false, err
	}
	return ca, true, nil
}

// PatchCABundle sets the caBundle of every webhook of the
// MutatingWebhookConfiguration to caPEM. It reports whether anything
// changed; a configuration that already trusts caPEM is left as it is.
func PatchCABundle(ctx context.Context, client kubernetes.Interface, name string, caPEM []byte) (changed bool, err error) {
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		changed = false
		cfg, err := client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if len(cfg.Webhooks) == 0 {
			return fmt.Errorf("MutatingWebhookConfiguration %s has no webhooks", name)
		}
		for i := range cfg.Webhooks {
			if !bytes.Equal(cfg.Webhooks[i].ClientConfig.CABundle, caPEM) {
				cfg.Webhooks[i].ClientConfig.CABundle = caPEM
				changed = true
			}
		}
		if !changed {
			return nil
		}
		_, err = client.AdmissionregistrationV1().MutatingWebhookConfigurations().Update(ctx, cfg, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return false, fmt.Errorf("caBundle of MutatingWebhookConfiguration %s: %w", name, err)
	}
	return changed, nil
}

// MoveCA moves the CA in fromDir (ca.crt and ca.key) to toDir, which must
// hold no CA or the same one; ca.key is then removed from fromDir (ca.crt,
// a public certificate, stays). It reports whether fromDir held a CA key.
// It is how a certificate directory written by an older fastover-certs,
// with the CA key beside the serving key, gives its CA up: the CA, hence
// the caBundle, stays the same.
func MoveCA(fromDir, toDir string) (moved bool, err error) {
	keyPath := filepath.Join(fromDir, CAKeyFile)
	if _, err := os.Lstat(keyPath); errors.Is(err, fs.ErrNotExist) {
		return false, nil
	} else if err != nil {
		return false, err
	}
	ca, err := ReadCA(fromDir)
	if err != nil {
		return false, err
	}
	current, err := ReadCA(toDir)
	switch {
	case errors.Is(err, ErrNoCA):
		if err := SaveCA(toDir, ca); err != nil {
			return false, err
		}
	case err != nil:
		return false, err
	case !bytes.Equal(current.CertPEM, ca.CertPEM):
		return false, fmt.Errorf("%s and %s hold two different CAs: keep one (the one the caBundle trusts) and remove the other's %s and %s",
			fromDir, toDir, CAFile, CAKeyFile)
	}
	if err := os.Remove(keyPath); err != nil {
		return false, err
	}
	return true, syncDir(fromDir)
}
