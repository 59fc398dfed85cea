package install

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/fastover/fastover/certs"
)

// MirrorSecret does for a webhook that runs outside the cluster what the
// kubelet does for a Secret volume: it writes the TLS Secret ns/name into
// dir (tls.crt, tls.key, ca.crt) and rewrites the files whenever the
// Secret changes, each file replaced atomically. It returns once the files
// are first written (waiting for the Secret to exist and hold a key pair),
// and keeps mirroring in the background until ctx is done. Changes are
// picked up within the poll interval.
func MirrorSecret(ctx context.Context, client kubernetes.Interface, ns, name, dir string, poll time.Duration) error {
	var last string
	sync := func(ctx context.Context) (bool, error) {
		s, err := client.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		if err != nil {
			return false, nil //nolint:nilerr // transient: try again at the next poll
		}
		if s.ResourceVersion == last || len(s.Data[corev1.TLSCertKey]) == 0 || len(s.Data[corev1.TLSPrivateKeyKey]) == 0 {
			return last != "", nil
		}
		kp := &certs.KeyPair{CertPEM: s.Data[corev1.TLSCertKey], KeyPEM: s.Data[corev1.TLSPrivateKeyKey]}
		var ca *certs.CA
		if pem := s.Data[certs.CAFile]; len(pem) > 0 {
			ca = &certs.CA{CertPEM: pem}
		}
		if err := certs.WriteDir(dir, kp, ca); err != nil {
			return false, fmt.Errorf("mirror Secret %s/%s into %s: %w", ns, name, dir, err)
		}
		last = s.ResourceVersion
		return true, nil
	}
	if err := wait.PollUntilContextCancel(ctx, poll, true, sync); err != nil {
		return fmt.Errorf("wait for Secret %s/%s: %w", ns, name, err)
	}
	go func() {
		_ = wait.PollUntilContextCancel(ctx, poll, false, func(ctx context.Context) (bool, error) {
			_, err := sync(ctx)
			return false, err
		})
	}()
	return nil
}
