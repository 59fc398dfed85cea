package install

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/fastover/fastover/toleration"
)

// SetWebhookURL points the only webhook of a rendered
// MutatingWebhookConfiguration at url, in place of its Service if it
// names one (overlays/local names port 9443; a test or the demo picks a
// free one).
func SetWebhookURL(mwc *unstructured.Unstructured, url string) error {
	name := "MutatingWebhookConfiguration " + mwc.GetName()
	hooks, _, err := unstructured.NestedSlice(mwc.Object, "webhooks")
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	if len(hooks) != 1 {
		return fmt.Errorf("%s: %d webhooks, want one", name, len(hooks))
	}
	hook, ok := hooks[0].(map[string]any)
	if !ok {
		return fmt.Errorf("%s: malformed webhook", name)
	}
	// A webhook is called at a URL or through a Service, never both.
	unstructured.RemoveNestedField(hook, "clientConfig", "service")
	if err := unstructured.SetNestedField(hook, url, "clientConfig", "url"); err != nil {
		return err
	}
	return unstructured.SetNestedSlice(mwc.Object, hooks, "webhooks")
}

// WaitInjecting waits, up to timeout, until the API server calls the
// webhook for pods of the namespace (it picks a configuration up
// asynchronously), probing with dry-run pods.
func WaitInjecting(ctx context.Context, client kubernetes.Interface, ns string, timeout time.Duration) error {
	probe := probePod(nil)
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		pod, err := client.CoreV1().Pods(ns).Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err == nil && pod.Annotations[toleration.AnnotationInjected] != "", nil
	})
	if err != nil {
		return fmt.Errorf("the API server does not call fastover-webhook for pods of %s: %w", ns, err)
	}
	return nil
}

// probePod is the pod the waits create with a dry run to see what the
// API server's admission does to it.
func probePod(annotations map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "probe", Annotations: annotations},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}}},
	}
}

// WaitCABundle waits, up to timeout, until cert-manager's cainjector has
// put the CA of the TLS Secret secretNS/secret (its ca.crt) into the
// caBundle of every webhook of the MutatingWebhookConfiguration mwc, and
// returns that CA.
func WaitCABundle(ctx context.Context, client kubernetes.Interface, mwc, secretNS, secret string, timeout time.Duration) ([]byte, error) {
	var ca []byte
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		s, err := client.CoreV1().Secrets(secretNS).Get(ctx, secret, metav1.GetOptions{})
		if err != nil || len(s.Data["ca.crt"]) == 0 {
			return false, nil //nolint:nilerr // not issued yet: retried
		}
		cfg, err := client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, mwc, metav1.GetOptions{})
		if err != nil || len(cfg.Webhooks) == 0 {
			return false, nil //nolint:nilerr // retried
		}
		ca = s.Data["ca.crt"]
		for _, w := range cfg.Webhooks {
			if string(w.ClientConfig.CABundle) != string(ca) {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return nil, errors.Join(fmt.Errorf("the cainjector never set the caBundle of %s to the CA of Secret %s/%s", mwc, secretNS, secret), err)
	}
	return ca, nil
}
