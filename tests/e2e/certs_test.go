package e2e

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/fastover/fastover/certs"
	"github.com/fastover/fastover/internal/cluster"
	"github.com/fastover/fastover/toleration"
)

// TestCertsCommand installs the webhook without cert-manager:
// fastover-certs makes the CA and the serving certificate and sets the
// caBundle; the API server then trusts the webhook. Run again, it renews
// the serving certificate from the same CA: the caBundle stays, the
// webhook serves the new certificate without a restart. The CA's key never
// enters the cert dir the webhook reads.
func TestCertsCommand(t *testing.T) {
	t.Parallel()
	env := cluster.Start(t, cluster.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := filepath.Join(t.TempDir(), "certs")
	certsCmd := func(extra ...string) string {
		t.Helper()
		out, err := exec.Command(binary(t, "fastover-certs"), append([]string{
			"--cert-dir=" + dir, "--hosts=127.0.0.1", "--kubeconfig=" + env.Kubeconfig,
		}, extra...)...).CombinedOutput()
		require.NoError(t, err, "%s", out)
		return string(out)
	}
	servingSerial := func() string {
		data, err := os.ReadFile(filepath.Join(dir, certs.CertFile))
		require.NoError(t, err)
		block, _ := pem.Decode(data)
		cert, err := x509.ParseCertificate(block.Bytes)
		require.NoError(t, err)
		return cert.SerialNumber.String()
	}
	caBundle := func() []byte {
		cfg, err := env.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "fastover", metav1.GetOptions{})
		require.NoError(t, err)
		return cfg.Webhooks[0].ClientConfig.CABundle
	}

	// Certificates first, then the webhook, registered with no caBundle:
	// the API server cannot trust it yet.
	// The CA is kept beside the cert dir, not in it: the webhook gets no
	// key that signs.
	assert.Contains(t, certsCmd(), "made a new CA in "+dir+"-ca")
	assert.NoFileExists(t, filepath.Join(dir, certs.CAKeyFile))
	caPEM, err := os.ReadFile(filepath.Join(dir, certs.CAFile))
	require.NoError(t, err)
	keyPEM, err := os.ReadFile(filepath.Join(dir+"-ca", certs.CAKeyFile))
	require.NoError(t, err)
	w := &webhookServer{certDir: dir}
	w.ca, err = certs.LoadCA(caPEM, keyPEM)
	require.NoError(t, err)
	w.run(t, env)
	w.configure(ctx, t, env, admissionregistrationv1.Fail, nil)
	require.NoError(t, env.CreateNamespace(ctx, "certs", injectLabel()))
	// Once the API server has the configuration, creations fail: it
	// cannot verify the webhook (failurePolicy Fail makes that visible).
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := env.Client.CoreV1().Pods("certs").Create(ctx, bare("untrusted"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err != nil, nil
	}), "without a caBundle the API server should not trust the webhook")

	out := certsCmd("--webhook-configuration=fastover")
	assert.Contains(t, out, "set the caBundle")
	assert.Equal(t, caPEM, caBundle())
	waitInjecting(ctx, t, env)
	pod, err := env.Client.CoreV1().Pods("certs").Create(ctx, bare("trusted"), metav1.CreateOptions{})
	require.NoError(t, err)
	assertEffectiveSeconds(t, pod, corev1.TaintNodeUnreachable, ptr.To[int64](0))
	assert.Equal(t, "unreachable=0s", pod.Annotations[toleration.AnnotationInjected])

	// Renewal: same CA, new serving certificate, no restart.
	pid := w.proc.Pid()
	before := servingSerial()
	out = certsCmd("--webhook-configuration=fastover")
	assert.Contains(t, out, "already this CA")
	assert.Equal(t, caPEM, caBundle(), "renewal keeps the caBundle")
	renewed := time.Now()
	after := servingSerial()
	require.NotEqual(t, before, after)
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		s, err := w.servedSerial()
		return err == nil && s.String() == after, nil
	}), "the webhook never served the renewed certificate")
	t.Logf("the webhook served the renewed certificate %v after fastover-certs returned", time.Since(renewed).Round(time.Millisecond))
	assert.Equal(t, pid, w.proc.Pid())
	pod, err = env.Client.CoreV1().Pods("certs").Create(ctx, bare("renewed"), metav1.CreateOptions{})
	require.NoError(t, err)
	assert.Equal(t, "unreachable=0s", pod.Annotations[toleration.AnnotationInjected])
}
