package e2e

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"math/big"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/fastover/fastover/certs"
	"github.com/fastover/fastover/internal/certmanager"
	"github.com/fastover/fastover/internal/cluster"
	"github.com/fastover/fastover/internal/install"
	"github.com/fastover/fastover/toleration"
	"github.com/fastover/fastover/webhook"
)

const (
	systemNS    = "fastover-system"
	servingCert = "fastover-webhook"
	servingTLS  = "fastover-webhook-tls"
	exampleNS   = "fastover-example"
)

// TestInstall installs fastover from manifests/ as a user would, with the
// real cert-manager issuing the webhook's certificate, into namespaces that
// enforce the restricted Pod Security Standard: every kustomization is
// accepted without a warning, the example's pods are injected through the
// caBundle cert-manager injected, and a forced renewal of the serving
// certificate costs no admission.
func TestInstall(t *testing.T) {
	t.Parallel()
	env := cluster.Start(t, cluster.Options{Nodes: []string{"node-a", "node-b"}})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	certmanager.Start(t, env)

	dir, err := install.Dir()
	require.NoError(t, err)
	applier, err := install.NewApplier(env.Config)
	require.NoError(t, err)

	// The webhook runs here, not in the cluster: the "local" overlay, with
	// the API server pointed at a free port.
	ports, err := cluster.FreePorts(3)
	require.NoError(t, err)
	addr := "127.0.0.1:" + strconv.Itoa(ports[0])
	local, err := install.Render(filepath.Join(dir, "overlays/local"))
	require.NoError(t, err)
	mwc := install.Find(local, "MutatingWebhookConfiguration", "fastover")
	require.NotNil(t, mwc)
	require.NoError(t, install.SetWebhookURL(mwc, "https://"+addr+webhook.Path))

	start := time.Now()
	res, err := applier.Apply(ctx, local, install.ApplyOptions{})
	require.NoError(t, err)
	assert.Empty(t, res.Warnings, "warnings applying overlays/local")

	// cert-manager issues the chain and injects the CA.
	require.NoError(t, certmanager.WaitReady(ctx, env, systemNS, servingCert))
	issued := time.Since(start)
	caPEM, err := install.WaitCABundle(ctx, env.Client, "fastover", systemNS, servingTLS, time.Minute)
	require.NoError(t, err)
	injected := time.Since(start)

	// The webhook serves the Secret's files, mirrored as the kubelet would.
	wh := &webhookServer{certDir: filepath.Join(t.TempDir(), "tls")}
	mirrorCtx, stopMirror := context.WithCancel(ctx)
	defer stopMirror()
	require.NoError(t, install.MirrorSecret(mirrorCtx, env.Client, systemNS, servingTLS, wh.certDir, 100*time.Millisecond))
	binary(t, "fastover-webhook") // built before the clock runs on
	serving := time.Now()
	wh.runAt(t, env, ports)
	webhookUp := time.Since(serving)

	// overlays/monitoring's kinds are the Prometheus Operator's: its CRDs
	// first, so that the API server validates them too.
	require.NoError(t, install.ApplyPrometheusOperatorCRDs(ctx, env.Config, "fastover-e2e"))

	// Everything else renders and passes validation and admission (dry
	// run): the webhook Deployment as the restricted profile wants it.
	kustomizations, err := install.Kustomizations(dir)
	require.NoError(t, err)
	for _, k := range kustomizations {
		if k == "overlays/local" || k == "example" {
			continue
		}
		res, err := applier.ApplyDir(ctx, filepath.Join(dir, k), install.ApplyOptions{DryRun: true})
		require.NoError(t, err, "dry run of %s", k)
		assert.Empty(t, res.Warnings, "warnings applying %s", k)
	}

	// The HA example for real: its pods pass the restricted profile and
	// are injected through the TLS that cert-manager set up.
	exampleApplied := time.Now()
	res, err = applier.ApplyDir(ctx, filepath.Join(dir, "example"), install.ApplyOptions{})
	require.NoError(t, err)
	assert.Empty(t, res.Warnings, "warnings applying example")
	var firstInjected time.Duration
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := env.Client.CoreV1().Pods(exampleNS).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil //nolint:nilerr // retried
		}
		ready := 0
		for i := range pods.Items {
			p := &pods.Items[i]
			if firstInjected == 0 && p.Annotations[toleration.AnnotationInjected] != "" {
				firstInjected = time.Since(exampleApplied)
			}
			if cluster.PodReady(p) {
				ready++
			}
		}
		return ready == 3, nil
	}), "the example's 3 pods never ran")
	pods, err := env.Client.CoreV1().Pods(exampleNS).List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	for i := range pods.Items {
		p := &pods.Items[i]
		assert.Equal(t, "unreachable=0s", p.Annotations[toleration.AnnotationInjected], p.Name)
		assertEffectiveSeconds(t, p, corev1.TaintNodeUnreachable, ptr.To[int64](0))
	}
	t.Logf("install: serving certificate Ready %v after the apply, caBundle injected at %v; webhook serving the Secret's files %v after its start; first example pod injected %v after the example's apply, 3 Ready after %v",
		issued.Round(time.Millisecond), injected.Round(time.Millisecond), webhookUp.Round(time.Millisecond),
		firstInjected.Round(time.Millisecond), time.Since(exampleApplied).Round(time.Millisecond))

	t.Run("Rotation", func(t *testing.T) { installRotation(ctx, t, env, wh, caPEM) })
}

// installRotation forces cert-manager to renew the serving certificate
// while a client creates pods: no admission fails or misses injection,
// the webhook serves the new certificate without a restart, and the
// caBundle stays the same.
func installRotation(ctx context.Context, t *testing.T, env *cluster.Env, wh *webhookServer, caPEM []byte) {
	const ns = "install-rotation"
	require.NoError(t, env.CreateNamespace(ctx, ns, injectLabel()))
	// The CA's certificate, to verify the served chain.
	wh.ca = &certs.CA{CertPEM: caPEM}
	oldSerial, err := wh.servedSerial()
	require.NoError(t, err)
	pid := wh.proc.Pid()

	stream := startPodStream(ctx, env, ns)
	stream.waitMore(ctx, t, 20)

	before := stream.count()
	renewed := time.Now()
	require.NoError(t, certmanager.Renew(ctx, env, systemNS, servingCert))
	var newSerial *big.Int
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		s, err := env.Client.CoreV1().Secrets(systemNS).Get(ctx, servingTLS, metav1.GetOptions{})
		if err != nil {
			return false, nil //nolint:nilerr // retried
		}
		newSerial = certSerial(t, s.Data["tls.crt"])
		return newSerial.Cmp(oldSerial) != 0, nil
	}), "cert-manager never renewed the serving certificate")
	reissued := time.Since(renewed)
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		serial, err := wh.servedSerial()
		return err == nil && serial.Cmp(newSerial) == 0, nil
	}), "the webhook never served the renewed certificate")
	switched := time.Since(renewed)
	stream.waitMore(ctx, t, 20)
	stream.finish(t)

	assert.Equal(t, pid, wh.proc.Pid(), "the webhook was not restarted")
	assert.Equal(t, string(caPEM), string(caBundle(ctx, t, env)), "the caBundle changed")
	t.Logf("rotation: renewal asked, new certificate in the Secret after %v, served after %v; %d pods admitted before, %d after, 0 failed, 0 missed",
		reissued.Round(time.Millisecond), switched.Round(time.Millisecond), before, stream.count()-before)
}

func caBundle(ctx context.Context, t *testing.T, env *cluster.Env) []byte {
	t.Helper()
	mwc, err := env.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "fastover", metav1.GetOptions{})
	require.NoError(t, err)
	return mwc.Webhooks[0].ClientConfig.CABundle
}

func certSerial(t *testing.T, certPEM []byte) *big.Int {
	t.Helper()
	block, _ := pem.Decode(certPEM)
	require.NotNil(t, block, "no PEM certificate")
	c, err := x509.ParseCertificate(block.Bytes)
	require.NoError(t, err)
	return c.SerialNumber
}
