package fleet

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"

	"github.com/fastover/fastover/internal/cluster"
)

// The aggregated API fastover-example serves with --tls-cert-file, and the
// APIService that registers it.
const (
	APIGroup       = "example.fastover.io"
	APIVersion     = "v1alpha1"
	APIServiceName = APIVersion + "." + APIGroup
	// ReplicasPath lists the replica that answered; through
	// kube-apiserver, the leader.
	ReplicasPath = "/apis/" + APIGroup + "/" + APIVersion + "/replicas"
)

var apiServiceGVR = schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}

// apiTLS is what EnableAPI made.
type apiTLS struct {
	caPEM      []byte
	roots      *x509.CertPool
	serverName string
	certFile   string
	keyFile    string
}

// EnableAPI makes every replica started after it serve HTTPS and the
// aggregated API (fastover-example's --tls-cert-file and
// --tls-private-key-file): it issues a serving certificate for
// <service>.<namespace>.svc (and .cluster.local) from a CA of its own, and
// makes the fleet's client (Get, Call, WaitServing) speak HTTPS trusting
// that CA, with that server name. The replicas read the aggregation
// layer's CA from kube-system/extension-apiserver-authentication, so their
// kubeconfig must allow that. Call it before Add; RegisterAPIService then
// registers the API with kube-apiserver.
func (f *Fleet) EnableAPI() error {
	if f.api != nil {
		return nil
	}
	if len(f.Replicas) > 0 {
		return errors.New("fleet: EnableAPI after Add: the replicas already started serve plain HTTP")
	}
	serverName := f.Service + "." + f.Namespace + ".svc"
	certPEM, keyPEM, caPEM, err := cluster.NewServingCert(serverName, serverName+".cluster.local")
	if err != nil {
		return fmt.Errorf("fleet: serving certificate: %w", err)
	}
	dir := filepath.Join(f.Env.Dir, "fleet-"+f.Namespace+"-"+f.Service+"-tls")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	a := &apiTLS{
		caPEM:      caPEM,
		roots:      x509.NewCertPool(),
		serverName: serverName,
		certFile:   filepath.Join(dir, "tls.crt"),
		keyFile:    filepath.Join(dir, "tls.key"),
	}
	a.roots.AppendCertsFromPEM(caPEM)
	if err := os.WriteFile(a.certFile, certPEM, 0o600); err != nil {
		return err
	}
	if err := os.WriteFile(a.keyFile, keyPEM, 0o600); err != nil {
		return err
	}
	f.api = a
	f.http = f.HTTPClient(300*time.Millisecond, 200*time.Millisecond)
	return nil
}

// APIEnabled reports whether EnableAPI was called.
func (f *Fleet) APIEnabled() bool { return f.api != nil }

// APICA returns the CA of the replicas' serving certificate (PEM): the
// APIService's caBundle. Nil before EnableAPI.
func (f *Fleet) APICA() []byte {
	if f.api == nil {
		return nil
	}
	return f.api.caPEM
}

// APIServerName is the name the replicas' serving certificate is for,
// <service>.<namespace>.svc: a client that calls the Service's ClusterIP
// or a replica's address over HTTPS verifies it against this name.
func (f *Fleet) APIServerName() string { return f.Service + "." + f.Namespace + ".svc" }

// HTTPClient returns a client that calls the replicas (or the Service's
// ClusterIP) as the fleet does: in the control plane's network namespace
// if it has one, without keep-alives, giving up on a connection after
// dial and on the whole call after timeout; after EnableAPI it speaks
// HTTPS, trusting APICA for APIServerName (URLs still name an address).
func (f *Fleet) HTTPClient(timeout, dial time.Duration) *http.Client {
	tr := &http.Transport{DisableKeepAlives: true, DialContext: dialer(f.Env, dial)}
	if f.api != nil {
		tr.TLSClientConfig = &tls.Config{RootCAs: f.api.roots, ServerName: f.api.serverName, MinVersion: tls.VersionTLS12}
	}
	return &http.Client{Timeout: timeout, Transport: tr}
}

// scheme is the scheme the replicas serve.
func (f *Fleet) scheme() string {
	if f.api != nil {
		return "https"
	}
	return "http"
}

// apiArgs are the replicas' flags for the API.
func (f *Fleet) apiArgs() []string {
	if f.api == nil {
		return nil
	}
	return []string{"--tls-cert-file=" + f.api.certFile, "--tls-private-key-file=" + f.api.keyFile}
}

// RegisterAPIService creates the APIService v1alpha1.example.fastover.io
// for the fleet's Service (port 80, the Service's port; caBundle APICA)
// and waits, for at most a minute, until kube-apiserver finds it
// Available: its discovery check reached the Service's endpoint, the
// leader. It needs EnableAPI and the Service (CreateService).
func (f *Fleet) RegisterAPIService(ctx context.Context) error {
	if f.api == nil {
		return errors.New("fleet: RegisterAPIService needs EnableAPI (the replicas serve plain HTTP)")
	}
	dc, err := dynamic.NewForConfig(f.Env.Config)
	if err != nil {
		return err
	}
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiregistration.k8s.io/v1",
		"kind":       "APIService",
		"metadata":   map[string]any{"name": APIServiceName},
		"spec": map[string]any{
			"group":   APIGroup,
			"version": APIVersion,
			"service": map[string]any{
				"namespace": f.Namespace,
				"name":      f.Service,
				"port":      int64(80),
			},
			"caBundle":             base64.StdEncoding.EncodeToString(f.api.caPEM),
			"groupPriorityMinimum": int64(1000),
			"versionPriority":      int64(15),
		},
	}}
	if _, err := dc.Resource(apiServiceGVR).Create(ctx, obj, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create APIService %s: %w", APIServiceName, err)
	}
	return f.WaitAPIServiceAvailable(ctx, time.Minute)
}

// DeleteAPIService deletes the APIService, if it exists.
func (f *Fleet) DeleteAPIService(ctx context.Context) error {
	dc, err := dynamic.NewForConfig(f.Env.Config)
	if err != nil {
		return err
	}
	err = dc.Resource(apiServiceGVR).Delete(ctx, APIServiceName, metav1.DeleteOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// APIServiceCondition is the APIService's Available condition.
type APIServiceCondition struct {
	Status             string    `json:"status"`
	Reason             string    `json:"reason"`
	Message            string    `json:"message"`
	LastTransitionTime time.Time `json:"lastTransitionTime"`
}

// APIServiceAvailable returns the APIService's Available condition (zero
// if it has none yet).
func (f *Fleet) APIServiceAvailable(ctx context.Context) (APIServiceCondition, error) {
	dc, err := dynamic.NewForConfig(f.Env.Config)
	if err != nil {
		return APIServiceCondition{}, err
	}
	u, err := dc.Resource(apiServiceGVR).Get(ctx, APIServiceName, metav1.GetOptions{})
	if err != nil {
		return APIServiceCondition{}, err
	}
	conds, _, err := unstructured.NestedSlice(u.Object, "status", "conditions")
	if err != nil {
		return APIServiceCondition{}, err
	}
	for _, c := range conds {
		m, ok := c.(map[string]any)
		if !ok || m["type"] != "Available" {
			continue
		}
		b, err := json.Marshal(m)
		if err != nil {
			return APIServiceCondition{}, err
		}
		var out APIServiceCondition
		return out, json.Unmarshal(b, &out)
	}
	return APIServiceCondition{}, nil
}

// WaitAPIServiceAvailable waits until the APIService is Available.
func (f *Fleet) WaitAPIServiceAvailable(ctx context.Context, timeout time.Duration) error {
	var last APIServiceCondition
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		c, err := f.APIServiceAvailable(ctx)
		if err != nil {
			return false, nil
		}
		last = c
		return c.Status == "True", nil
	})
	if err != nil {
		return fmt.Errorf("APIService %s not Available after %v (status %q, %s: %s): %w", APIServiceName, timeout, last.Status, last.Reason, last.Message, err)
	}
	return nil
}

// APIAnswer is a LIST of replicas through kube-apiserver: who answered,
// and whether it said it leads.
type APIAnswer struct {
	ID      string
	Leading bool
	Term    int32
}

// ParseReplicas reads a LIST of the API's replicas: a ReplicaList of
// exactly one named item, the replica that answered. Anything else is an
// error.
func ParseReplicas(body []byte) (APIAnswer, error) {
	var l struct {
		Kind  string `json:"kind"`
		Items []struct {
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
			Status struct {
				Leading bool  `json:"leading"`
				Term    int32 `json:"term"`
			} `json:"status"`
		} `json:"items"`
	}
	if err := json.Unmarshal(body, &l); err != nil {
		return APIAnswer{}, fmt.Errorf("the answer is not a ReplicaList: %w", err)
	}
	if l.Kind != "ReplicaList" || len(l.Items) != 1 || l.Items[0].Metadata.Name == "" {
		return APIAnswer{}, fmt.Errorf("want a ReplicaList of one named item, got kind %q with %d items", l.Kind, len(l.Items))
	}
	it := l.Items[0]
	return APIAnswer{ID: it.Metadata.Name, Leading: it.Status.Leading, Term: it.Status.Term}, nil
}

// CallAPI lists the API's replicas through kube-apiserver (the Env's
// admin client, ReplicasPath) and returns the one item: the replica that
// answered. An answer that is not a list of exactly one is an error, as is
// any error status (503 while the APIService is not Available).
func (f *Fleet) CallAPI(ctx context.Context) (APIAnswer, error) {
	body, err := f.Env.Client.CoreV1().RESTClient().Get().AbsPath(ReplicasPath).DoRaw(ctx)
	if err != nil {
		return APIAnswer{}, err
	}
	a, err := ParseReplicas(body)
	if err != nil {
		return APIAnswer{}, fmt.Errorf("%s: %w", ReplicasPath, err)
	}
	return a, nil
}
