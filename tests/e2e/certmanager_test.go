package e2e

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"

	"github.com/fastover/fastover/internal/certmanager"
	"github.com/fastover/fastover/internal/cluster"
	"github.com/fastover/fastover/internal/install"
)

// TestCertManagerIssuesChain runs the real cert-manager (its controllers
// and cainjector, bin/cert-manager-local) on the local control plane: a
// self-signed Issuer issues a CA, a CA Issuer issues a serving
// certificate from it, the cainjector puts the CA in a webhook
// configuration's caBundle, and a forced renewal gives a new serving
// certificate from the same CA, leaving the caBundle alone.
func TestCertManagerIssuesChain(t *testing.T) {
	t.Parallel()
	env := cluster.Start(t, cluster.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	certmanager.Start(t, env)

	const ns = "cm-chain"
	require.NoError(t, env.CreateNamespace(ctx, ns, nil))
	dyn, err := dynamic.NewForConfig(env.Config)
	require.NoError(t, err)
	create := func(obj *unstructured.Unstructured) {
		t.Helper()
		res := certmanager.Issuers
		if obj.GetKind() == "Certificate" {
			res = certmanager.Certificates
		}
		_, err := dyn.Resource(res).Namespace(ns).Create(ctx, obj, metav1.CreateOptions{})
		require.NoError(t, err, "create %s %s", obj.GetKind(), obj.GetName())
	}
	ecdsa := map[string]any{"algorithm": "ECDSA", "size": int64(256)}

	// self-signed Issuer -> CA Certificate -> CA Issuer -> serving Certificate,
	// all created at once, as kubectl apply would.
	start := time.Now()
	create(cmObject("Issuer", "selfsigned", map[string]any{"selfSigned": map[string]any{}}))
	create(cmObject("Certificate", "ca", map[string]any{
		"isCA":       true,
		"commonName": "cm-chain-ca",
		"secretName": "ca",
		"privateKey": ecdsa,
		"issuerRef":  map[string]any{"name": "selfsigned", "kind": "Issuer", "group": "cert-manager.io"},
	}))
	create(cmObject("Issuer", "ca", map[string]any{"ca": map[string]any{"secretName": "ca"}}))
	create(cmObject("Certificate", "serving", map[string]any{
		"secretName": "serving-tls",
		"dnsNames":   []any{"svc.ns.svc"},
		"usages":     []any{"server auth", "digital signature"},
		"privateKey": ecdsa,
		"issuerRef":  map[string]any{"name": "ca", "kind": "Issuer", "group": "cert-manager.io"},
	}))
	require.NoError(t, certmanager.WaitReady(ctx, env, ns, "ca"))
	require.NoError(t, certmanager.WaitReady(ctx, env, ns, "serving"))
	ready := time.Since(start)
	t.Logf("serving certificate Ready %v after the first object was created", ready.Round(time.Millisecond))

	// The serving Secret holds the key, the certificate and the CA, and
	// the certificate verifies against that CA for its DNS name.
	secret, err := env.Client.CoreV1().Secrets(ns).Get(ctx, "serving-tls", metav1.GetOptions{})
	require.NoError(t, err)
	for _, key := range []string{"tls.crt", "tls.key", "ca.crt"} {
		require.NotEmpty(t, secret.Data[key], key)
	}
	caPEM := secret.Data["ca.crt"]
	caSecret, err := env.Client.CoreV1().Secrets(ns).Get(ctx, "ca", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, string(caSecret.Data["tls.crt"]), string(caPEM), "ca.crt is the CA Certificate's")
	first := verifyServing(t, secret.Data["tls.crt"], caPEM)

	// The cainjector puts the CA of the serving certificate into the
	// webhook configuration that asks for it.
	mwc := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{
			Name:        "cm-chain",
			Annotations: map[string]string{"cert-manager.io/inject-ca-from": ns + "/serving"},
		},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name:                    "cm-chain.fastover.io",
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: ptr.To("https://127.0.0.1:1/x")},
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			AdmissionReviewVersions: []string{"v1"},
			FailurePolicy:           ptr.To(admissionregistrationv1.Ignore),
			// No namespace has this label: the webhook is never called.
			NamespaceSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
				Key: "fastover.io/cm-chain-never", Operator: metav1.LabelSelectorOpExists,
			}}},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}},
			}},
		}},
	}
	hooks := env.Client.AdmissionregistrationV1().MutatingWebhookConfigurations()
	created := time.Now()
	_, err = hooks.Create(ctx, mwc, metav1.CreateOptions{})
	require.NoError(t, err)
	bundle := func(ctx context.Context) []byte {
		got, err := hooks.Get(ctx, mwc.Name, metav1.GetOptions{})
		if err != nil {
			return nil
		}
		return got.Webhooks[0].ClientConfig.CABundle
	}
	injected, err := install.WaitCABundle(ctx, env.Client, mwc.Name, ns, "serving-tls", time.Minute)
	require.NoError(t, err)
	require.Equal(t, string(caPEM), string(injected))
	t.Logf("caBundle injected %v after the webhook configuration was created", time.Since(created).Round(time.Millisecond))

	// A forced renewal (as `cmctl renew`): a new serving certificate from
	// the same CA; the caBundle stays.
	rev, err := certmanager.Revision(ctx, env, ns, "serving")
	require.NoError(t, err)
	renewed := time.Now()
	require.NoError(t, certmanager.Renew(ctx, env, ns, "serving"))
	require.NoError(t, certmanager.WaitRevision(ctx, env, ns, "serving", rev+1))
	secret, err = env.Client.CoreV1().Secrets(ns).Get(ctx, "serving-tls", metav1.GetOptions{})
	require.NoError(t, err)
	second := verifyServing(t, secret.Data["tls.crt"], secret.Data["ca.crt"])
	t.Logf("renewed certificate issued %v after the renewal was asked", time.Since(renewed).Round(time.Millisecond))
	assert.NotEqual(t, first.SerialNumber.String(), second.SerialNumber.String(), "the renewal kept the serial")
	assert.Equal(t, string(caPEM), string(secret.Data["ca.crt"]), "the renewal changed ca.crt")
	// The cainjector reconciles on the Secret's change (in about the time
	// it took to inject): the caBundle stays the CA throughout.
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		require.Equal(t, string(caPEM), string(bundle(ctx)), "the renewal changed the caBundle")
	}
}

// cmObject is a cert-manager.io/v1 object of the given kind.
func cmObject(kind, name string, spec map[string]any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "cert-manager.io/v1",
		"kind":       kind,
		"metadata":   map[string]any{"name": name},
		"spec":       spec,
	}}
}

// verifyServing parses a serving certificate and checks that it verifies
// against caPEM for svc.ns.svc as a server certificate.
func verifyServing(t *testing.T, certPEM, caPEM []byte) *x509.Certificate {
	t.Helper()
	block, _ := pem.Decode(certPEM)
	require.NotNil(t, block, "no PEM certificate")
	cert, err := x509.ParseCertificate(block.Bytes)
	require.NoError(t, err)
	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(caPEM), "ca.crt holds no certificate")
	_, err = cert.Verify(x509.VerifyOptions{
		DNSName:   "svc.ns.svc",
		Roots:     pool,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
	require.NoError(t, err)
	return cert
}
