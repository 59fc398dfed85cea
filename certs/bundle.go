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

// LoadOrCreateCA reads the CA in dir (ca.crt and ca.key) or, if there is
// none, makes one valid for validity and writes it there. Reusing the CA
// is what keeps a webhook's caBundle unchanged when its serving
// certificate is renewed. created reports a new CA.
func LoadOrCreateCA(dir, commonName string, validity time.Duration) (ca *CA, created bool, err error) {
	certPEM, certErr := os.ReadFile(filepath.Join(dir, CAFile))
	keyPEM, keyErr := os.ReadFile(filepath.Join(dir, CAKeyFile))
	switch {
	case certErr == nil && keyErr == nil:
		ca, err = LoadCA(certPEM, keyPEM)
		if err != nil {
			return nil, false, fmt.Errorf("CA in %s: %w", dir, err)
		}
		return ca, false, nil
	case errors.Is(certErr, fs.ErrNotExist) && errors.Is(keyErr, fs.ErrNotExist):
	case certErr != nil && !errors.Is(certErr, fs.ErrNotExist):
		return nil, false, certErr
	case keyErr != nil && !errors.Is(keyErr, fs.ErrNotExist):
		return nil, false, keyErr
	default:
		return nil, false, fmt.Errorf("CA in %s: one of %s and %s is missing; remove the other to make a new CA", dir, CAFile, CAKeyFile)
	}
	if ca, err = NewCA(commonName, validity); err != nil {
		return nil, false, err
	}
	keyPEM, err = ca.KeyPEM()
	if err != nil {
		return nil, false, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, false, err
	}
	if err := writeAtomic(filepath.Join(dir, CAKeyFile), keyPEM, 0o600); err != nil {
		return nil, false, err
	}
	if err := writeAtomic(filepath.Join(dir, CAFile), ca.CertPEM, 0o644); err != nil {
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
