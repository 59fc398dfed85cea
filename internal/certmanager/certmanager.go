package certmanager

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/util/retry"

	"github.com/fastover/fastover/internal/cluster"
	"github.com/fastover/fastover/internal/install"
)

const (
	// Binary is the name of the cert-manager binary in the bin directory.
	Binary = "cert-manager-local"
	// CRDDir is the directory, in the bin directory, of cert-manager's
	// CRDs.
	CRDDir = "cert-manager-crds"
	// DefaultClusterResourceNamespace is the namespace of the Secrets that
	// ClusterIssuers refer to, unless Options says otherwise.
	DefaultClusterResourceNamespace = "cert-manager"
	// FieldManager is the field manager of the CRDs and of the status
	// changes this package makes.
	FieldManager = "fastover-tests"
	// ProcessName is the name of the cert-manager process in the
	// control plane's logs (cluster.Env.DumpLogs).
	ProcessName = "cert-manager"
)

// The resources of cert-manager's API.
var (
	Certificates = schema.GroupVersionResource{Group: "cert-manager.io", Version: "v1", Resource: "certificates"}
	Issuers      = schema.GroupVersionResource{Group: "cert-manager.io", Version: "v1", Resource: "issuers"}
)

// Options tune Run. The zero value is what Start uses.
type Options struct {
	// BinDir holds Binary and CRDDir; cluster.BinDir() if empty.
	BinDir string
	// ClusterResourceNamespace is created and passed to cert-manager;
	// DefaultClusterResourceNamespace if empty.
	ClusterResourceNamespace string
	// Args are more flags for the binary (e.g. "--v=4").
	Args []string
	// Timeout bounds the whole start, CRDs included; 2 minutes if zero.
	Timeout time.Duration
}

// Start runs cert-manager for the test (Run with the zero Options) and
// fails the test at once if it cannot. The process is killed when the
// control plane stops; its log is in the control plane's logs.
func Start(t testing.TB, env *cluster.Env) *cluster.Process {
	t.Helper()
	start := time.Now()
	p, err := Run(context.Background(), env, Options{})
	if err != nil {
		t.Fatalf("start cert-manager: %v", err)
	}
	t.Logf("cert-manager ready in %v", time.Since(start).Round(time.Millisecond))
	return p
}

// Run installs cert-manager's CRDs, creates the cluster resource namespace,
// starts cert-manager on env (env.StartProcess, so that env stops it) and
// waits until it is ready: every informer of its controllers and of its
// cainjector has synced, and the API server no longer delays the creation
// of cert-manager's objects (it does for 2 s after their CRDs are
// Established). On error, the process, if started, is stopped.
func Run(ctx context.Context, env *cluster.Env, opts Options) (*cluster.Process, error) {
	if opts.Timeout == 0 {
		opts.Timeout = 2 * time.Minute
	}
	if opts.ClusterResourceNamespace == "" {
		opts.ClusterResourceNamespace = DefaultClusterResourceNamespace
	}
	ctx, cancel := context.WithTimeout(ctx, opts.Timeout)
	defer cancel()
	bin := opts.BinDir
	if bin == "" {
		var err error
		if bin, err = cluster.BinDir(); err != nil {
			return nil, err
		}
	}
	binary, crdDir := filepath.Join(bin, Binary), filepath.Join(bin, CRDDir)
	for _, path := range []string{binary, crdDir} {
		if _, err := os.Stat(path); err != nil {
			return nil, fmt.Errorf("%s is missing: run `tests/tools/build.sh certmanager` (or `make tools`) at the repository root", path)
		}
	}
	established, err := install.ApplyCRDs(ctx, env.Config, crdDir, FieldManager)
	if err != nil {
		return nil, err
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: opts.ClusterResourceNamespace}}
	if _, err := env.Client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("create namespace %s: %w", opts.ClusterResourceNamespace, err)
	}

	ports, err := cluster.FreePorts(1)
	if err != nil {
		return nil, err
	}
	health := "127.0.0.1:" + strconv.Itoa(ports[0])
	args := append([]string{
		"--kubeconfig=" + env.Kubeconfig,
		"--cluster-resource-namespace=" + opts.ClusterResourceNamespace,
		"--health-probe-bind-address=" + health,
	}, opts.Args...)
	p, err := env.StartProcess(ProcessName, binary, args...)
	if err != nil {
		return nil, err
	}
	err = p.WaitHTTP(ctx, "http://"+health+"/readyz")
	if err == nil {
		err = install.WaitCreateGrace(ctx, established)
	}
	if err != nil {
		p.Stop(syscall.SIGKILL, 0)
		return nil, err
	}
	return p, nil
}

// WaitReady waits until the Certificate namespace/name has the condition
// Ready=True for its current generation. A Certificate being renewed
// stays Ready while its current certificate is valid: WaitRevision waits
// for a renewal.
func WaitReady(ctx context.Context, env *cluster.Env, namespace, name string) error {
	return WaitRevision(ctx, env, namespace, name, 0)
}

// WaitRevision waits until the Certificate namespace/name is Ready (as
// WaitReady) with status.revision at least revision: its first issuance is
// revision 1, each renewal adds 1.
func WaitRevision(ctx context.Context, env *cluster.Env, namespace, name string, revision int64) error {
	client, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		return err
	}
	var last string
	err = wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		crt, err := client.Resource(Certificates).Namespace(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		last = Conditions(crt)
		rev, _, _ := unstructured.NestedInt64(crt.Object, "status", "revision")
		if rev < revision {
			last += fmt.Sprintf("; revision %d, want %d", rev, revision)
			return false, nil
		}
		ready := condition(crt, "Ready")
		if ready == nil || ready["status"] != "True" {
			return false, nil
		}
		observed, ok, _ := unstructured.NestedInt64(ready, "observedGeneration")
		return !ok || observed >= crt.GetGeneration(), nil
	})
	if err != nil {
		return fmt.Errorf("certificate %s/%s not ready (%s): %w", namespace, name, last, err)
	}
	return nil
}

// Revision returns status.revision of the Certificate namespace/name (0
// before its first issuance).
func Revision(ctx context.Context, env *cluster.Env, namespace, name string) (int64, error) {
	client, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		return 0, err
	}
	crt, err := client.Resource(Certificates).Namespace(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return 0, err
	}
	rev, _, err := unstructured.NestedInt64(crt.Object, "status", "revision")
	return rev, err
}

// Renew asks cert-manager to issue the Certificate namespace/name again now,
// as `cmctl renew` does: it sets the condition Issuing=True (reason
// ManuallyTriggered) through the status subresource. It does nothing if
// the Certificate is already being issued.
func Renew(ctx context.Context, env *cluster.Env, namespace, name string) error {
	client, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		return err
	}
	certs := client.Resource(Certificates).Namespace(namespace)
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		crt, err := certs.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if c := condition(crt, "Issuing"); c != nil && c["status"] == "True" {
			return nil
		}
		conds, _, err := unstructured.NestedSlice(crt.Object, "status", "conditions")
		if err != nil {
			return err
		}
		kept := conds[:0]
		for _, c := range conds {
			if m, ok := c.(map[string]any); ok && m["type"] == "Issuing" {
				continue
			}
			kept = append(kept, c)
		}
		kept = append(kept, map[string]any{
			"type":               "Issuing",
			"status":             "True",
			"reason":             "ManuallyTriggered",
			"message":            "Certificate re-issuance manually triggered",
			"lastTransitionTime": time.Now().UTC().Format(time.RFC3339),
			"observedGeneration": crt.GetGeneration(),
		})
		if err := unstructured.SetNestedSlice(crt.Object, kept, "status", "conditions"); err != nil {
			return err
		}
		_, err = certs.UpdateStatus(ctx, crt, metav1.UpdateOptions{FieldManager: FieldManager})
		return err
	})
	if err != nil {
		return fmt.Errorf("renew certificate %s/%s: %w", namespace, name, err)
	}
	return nil
}

// Conditions summarises the status conditions of a cert-manager object,
// e.g. "Ready=False (Pending: Issuing certificate as Secret does not
// exist)", for messages.
func Conditions(obj *unstructured.Unstructured) string {
	conds, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
	if len(conds) == 0 {
		return "no conditions"
	}
	parts := make([]string, 0, len(conds))
	for _, c := range conds {
		if m, ok := c.(map[string]any); ok {
			parts = append(parts, describe(m))
		}
	}
	return strings.Join(parts, ", ")
}

func describe(c map[string]any) string {
	s := fmt.Sprintf("%v=%v", c["type"], c["status"])
	if c["reason"] != nil || c["message"] != nil {
		s += fmt.Sprintf(" (%v: %v)", c["reason"], c["message"])
	}
	return s
}

// condition returns the status condition of type typ of obj, or nil.
func condition(obj *unstructured.Unstructured, typ string) map[string]any {
	conds, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
	for _, c := range conds {
		if m, ok := c.(map[string]any); ok && m["type"] == typ {
			return m
		}
	}
	return nil
}
