package main

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
)

// The aggregated API the replica serves with --tls-cert-file: discovery
// and two read-only, cluster-scoped resources: replicas, whose only item is
// the replica that answered (get, list, and watch: aggwatch.go), and
// policies, a payload of a set size (aggpolicies.go). Registered with an APIService that points at
// the selector-less Service, it is reached through kube-apiserver, which
// routes each request to the Service's one endpoint: the leader.
const (
	apiGroup    = "example.fastover.io"
	apiVersion  = "v1alpha1"
	apiResource = "replicas"
	apiKind     = "Replica"
)

var (
	groupVersion  = schema.GroupVersion{Group: apiGroup, Version: apiVersion}
	replicasGR    = schema.GroupResource{Group: apiGroup, Resource: apiResource}
	apisPrefix    = "/apis"
	groupPath     = apisPrefix + "/" + apiGroup
	versionPath   = groupPath + "/" + apiVersion
	resourcesPath = versionPath + "/" + apiResource
)

// Replica is the resource: one replica of the example, as it sees itself.
type Replica struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Status            ReplicaStatus `json:"status"`
}

// ReplicaStatus says whether the replica leads, in which term, and whom it
// sees holding the Lease.
type ReplicaStatus struct {
	// Leading is true while the replica leads.
	Leading bool `json:"leading"`
	// Term is the Lease's term (its transitions) as the replica last saw it.
	Term int32 `json:"term"`
	// Leader is the Lease's holder as the replica last saw it.
	Leader string `json:"leader,omitempty"`
}

// ReplicaList is the answer to a LIST: exactly one item, the replica that
// answered.
type ReplicaList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Replica `json:"items"`
}

// replicaSource is what the API reads of the elector.
type replicaSource interface {
	Identity() string
	IsLeader() bool
	Term() int32
	Leader() string
}

// aggAPI serves /apis and below. Every request must come from the
// aggregation layer (frontProxyAuth); nothing is secret and nothing can be
// changed, so there is no authorization check beyond that.
type aggAPI struct {
	src     replicaSource
	auth    *frontProxyAuth
	started time.Time
	// refuseStandby makes a replica that does not lead answer the
	// resource with 503 (--api-standby=refuse) instead of itself.
	refuseStandby bool

	mu     sync.Mutex
	logged map[string]int // requests logged in full, by user

	rv      atomic.Uint64 // the last resourceVersion given out
	firstRV uint64        // the first: versions below it are another process's
	// watchEvery is how often a watch reports the replica (watchInterval).
	watchEvery time.Duration
	// policies is the payload (aggpolicies.go); empty by default.
	policies *policySet
}

// The replica logs the first few requests of each user (of the first
// few users) with their headers, to show what kube-apiserver sends.
const (
	loggedRequests = 4
	loggedUsers    = 16
)

// logRequest reports whether to log a request of the user.
func (a *aggAPI) logRequest(user string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	n, seen := a.logged[user]
	if (!seen && len(a.logged) >= loggedUsers) || n >= loggedRequests {
		return false
	}
	a.logged[user] = n + 1
	return true
}

func newAggAPI(src replicaSource, auth *frontProxyAuth) *aggAPI {
	a := &aggAPI{src: src, auth: auth, started: time.Now(), logged: map[string]int{}, watchEvery: watchInterval, policies: &policySet{}}
	// Each answer gets a resourceVersion of its own, growing, and higher
	// than a previous process's (a restart): microseconds since the epoch
	// at the start.
	a.firstRV = uint64(a.started.UnixMicro())
	a.rv.Store(a.firstRV)
	return a
}

func (a *aggAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set(replicaHeader, a.src.Identity())
	user, err := a.auth.authenticate(r)
	if a.logRequest(user) {
		klog.InfoS("aggregated API request", "method", r.Method, "path", r.URL.Path, "query", r.URL.RawQuery,
			"accept", r.Header.Get("Accept"), "user", user, "groups", r.Header.Values("X-Remote-Group"),
			"userAgent", r.UserAgent(), "authError", err)
	}
	if err != nil {
		writeStatus(w, apierrors.NewUnauthorized(err.Error()))
		return
	}
	path := strings.TrimSuffix(r.URL.Path, "/")
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		writeStatus(w, apierrors.NewMethodNotSupported(replicasGR, strings.ToLower(r.Method)))
		return
	}
	switch path {
	case apisPrefix:
		writeJSON(w, http.StatusOK, &metav1.APIGroupList{
			TypeMeta: metav1.TypeMeta{Kind: "APIGroupList", APIVersion: "v1"},
			Groups:   []metav1.APIGroup{apiGroupInfo()},
		})
		return
	case groupPath:
		g := apiGroupInfo()
		g.TypeMeta = metav1.TypeMeta{Kind: "APIGroup", APIVersion: "v1"}
		writeJSON(w, http.StatusOK, &g)
		return
	case versionPath:
		writeJSON(w, http.StatusOK, &metav1.APIResourceList{
			TypeMeta:     metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"},
			GroupVersion: groupVersion.String(),
			APIResources: []metav1.APIResource{{
				Name:         apiResource,
				SingularName: "replica",
				Namespaced:   false,
				Kind:         apiKind,
				Verbs:        metav1.Verbs{"get", "list", "watch"},
				Categories:   []string{"fastover"},
			}, {
				Name:         policiesResource,
				SingularName: "policy",
				Namespaced:   false,
				Kind:         policyKind,
				Verbs:        metav1.Verbs{"get", "list", "watch"},
				Categories:   []string{"fastover"},
			}},
		})
		return
	case resourcesPath:
		if isWatch(r) {
			a.serveWatch(w, r)
			return
		}
		a.writeReplicas(w, r, "")
		return
	case policiesPath:
		a.servePolicies(w, r, "")
		return
	}
	if name, ok := strings.CutPrefix(path, policiesPath+"/"); ok && name != "" && !strings.Contains(name, "/") {
		a.servePolicies(w, r, name)
		return
	}
	if name, ok := strings.CutPrefix(path, resourcesPath+"/"); ok && name != "" && !strings.Contains(name, "/") {
		a.writeReplicas(w, r, name)
		return
	}
	writeStatus(w, &apierrors.StatusError{ErrStatus: metav1.Status{
		Status:  metav1.StatusFailure,
		Code:    http.StatusNotFound,
		Reason:  metav1.StatusReasonNotFound,
		Message: fmt.Sprintf("the server could not find the requested resource (%s %s)", r.Method, r.URL.Path),
	}})
}

func apiGroupInfo() metav1.APIGroup {
	v := metav1.GroupVersionForDiscovery{GroupVersion: groupVersion.String(), Version: apiVersion}
	return metav1.APIGroup{Name: apiGroup, Versions: []metav1.GroupVersionForDiscovery{v}, PreferredVersion: v}
}

// replica is the replica that answers, as it sees itself now, with a new
// resourceVersion.
func (a *aggAPI) replica() Replica {
	return Replica{
		TypeMeta: metav1.TypeMeta{Kind: apiKind, APIVersion: groupVersion.String()},
		ObjectMeta: metav1.ObjectMeta{
			Name:              a.src.Identity(),
			CreationTimestamp: metav1.NewTime(a.started),
			ResourceVersion:   strconv.FormatUint(a.rv.Add(1), 10),
		},
		Status: ReplicaStatus{Leading: a.src.IsLeader(), Term: a.src.Term(), Leader: a.src.Leader()},
	}
}

// writeReplicas answers a LIST (name empty) or a GET of one replica, as a
// Table if the client asks for one (kubectl get), else as JSON.
func (a *aggAPI) writeReplicas(w http.ResponseWriter, r *http.Request, name string) {
	me := a.replica()
	if a.refuseStandby && !me.Status.Leading {
		a.refuse(w, me)
		return
	}
	if name != "" && name != me.Name {
		writeStatus(w, apierrors.NewNotFound(replicasGR, name))
		return
	}
	if wantsTable(r.Header.Get("Accept")) {
		writeJSON(w, http.StatusOK, replicaTable(me))
		return
	}
	if name != "" {
		writeJSON(w, http.StatusOK, &me)
		return
	}
	writeJSON(w, http.StatusOK, &ReplicaList{
		TypeMeta: metav1.TypeMeta{Kind: apiKind + "List", APIVersion: groupVersion.String()},
		ListMeta: metav1.ListMeta{ResourceVersion: me.ResourceVersion},
		Items:    []Replica{me},
	})
}

// refuse answers 503 for a replica that does not lead (--api-standby=refuse).
func (a *aggAPI) refuse(w http.ResponseWriter, me Replica) {
	w.Header().Set("Retry-After", "1")
	writeStatus(w, &apierrors.StatusError{ErrStatus: metav1.Status{
		Status:  metav1.StatusFailure,
		Code:    http.StatusServiceUnavailable,
		Reason:  metav1.StatusReasonServiceUnavailable,
		Message: fmt.Sprintf("replica %s does not lead (the Lease's holder is %q); retry", me.Name, me.Status.Leader),
	}})
}

// wantsTable reports whether the Accept header asks for a meta.k8s.io/v1
// Table in JSON, as kubectl get does.
func wantsTable(accept string) bool {
	for _, part := range strings.Split(accept, ",") {
		mt, params, err := mime.ParseMediaType(strings.TrimSpace(part))
		if err != nil || mt != "application/json" {
			continue
		}
		if params["as"] == "Table" && params["g"] == metav1.GroupName && params["v"] == "v1" {
			return true
		}
	}
	return false
}

func replicaTable(me Replica) *metav1.Table {
	t := &metav1.Table{
		TypeMeta: metav1.TypeMeta{Kind: "Table", APIVersion: metav1.SchemeGroupVersion.String()},
		ColumnDefinitions: []metav1.TableColumnDefinition{
			{Name: "Name", Type: "string", Format: "name", Description: "the replica's identity"},
			{Name: "Leading", Type: "boolean", Description: "whether the replica leads"},
			{Name: "Term", Type: "integer", Description: "the Lease's term"},
			{Name: "Leader", Type: "string", Description: "the Lease's holder, as the replica sees it"},
		},
	}
	meta, _ := json.Marshal(&metav1.PartialObjectMetadata{
		TypeMeta:   metav1.TypeMeta{Kind: "PartialObjectMetadata", APIVersion: metav1.SchemeGroupVersion.String()},
		ObjectMeta: me.ObjectMeta,
	})
	t.Rows = []metav1.TableRow{{
		Cells:  []any{me.Name, me.Status.Leading, me.Status.Term, me.Status.Leader},
		Object: runtime.RawExtension{Raw: meta},
	}}
	return t
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(append(b, '\n'))
}

func writeStatus(w http.ResponseWriter, err *apierrors.StatusError) {
	s := err.ErrStatus
	s.TypeMeta = metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}
	if s.Status == "" {
		s.Status = metav1.StatusFailure
	}
	writeJSON(w, int(s.Code), &s)
}

// frontProxyAuth authenticates requests as an aggregated API server does:
// the client certificate chains to the request-header CA and, if allowed
// names are set, its common name is one of them; the user is the first
// non-empty username header.
type frontProxyAuth struct {
	roots       *x509.CertPool
	allowed     []string
	userHeaders []string
	// verified counts the chains verified.
	verified atomic.Int64
}

// authenticate returns the user the aggregation layer names, or why the
// request is not from the aggregation layer. The client certificate is
// verified once per connection if the server's ConnContext is
// withConnVerdict, else on every request.
func (a *frontProxyAuth) authenticate(r *http.Request) (string, error) {
	if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
		return "", errors.New("no client certificate: this API is served through kube-apiserver's aggregation layer only")
	}
	var err error
	if v, ok := r.Context().Value(connVerdictKey{}).(*connVerdict); ok {
		v.once.Do(func() { v.err = a.verify(r.TLS.PeerCertificates) })
		err = v.err
	} else {
		err = a.verify(r.TLS.PeerCertificates)
	}
	if err != nil {
		return "", err
	}
	for _, h := range a.userHeaders {
		if u := strings.TrimSpace(r.Header.Get(h)); u != "" {
			return u, nil
		}
	}
	return "", fmt.Errorf("no user in the headers %q", a.userHeaders)
}

// verify checks a client's certificate chain against the aggregation
// layer's CA and allowed names.
func (a *frontProxyAuth) verify(certs []*x509.Certificate) error {
	a.verified.Add(1)
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	if _, err := certs[0].Verify(x509.VerifyOptions{
		Roots:         a.roots,
		Intermediates: inter,
		KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}); err != nil {
		return fmt.Errorf("client certificate %q: %w", certs[0].Subject.CommonName, err)
	}
	if len(a.allowed) > 0 && !slices.Contains(a.allowed, certs[0].Subject.CommonName) {
		return fmt.Errorf("client certificate %q is not one of the allowed names %q", certs[0].Subject.CommonName, a.allowed)
	}
	return nil
}

// connVerdict is the verification of one connection's client
// certificate, made on its first request: a TLS connection's certificate
// does not change (Go's server does not renegotiate), and verifying a
// chain costs more than serving a watch (about 0.13 ms: a tenth of the
// leader's CPU when a thousand agents reconnect, issue 41).
type connVerdict struct {
	once sync.Once
	err  error
}

type connVerdictKey struct{}

// withConnVerdict is an http.Server's ConnContext: it gives each
// connection's requests a connVerdict of its own.
func withConnVerdict(ctx context.Context, _ net.Conn) context.Context {
	return context.WithValue(ctx, connVerdictKey{}, &connVerdict{})
}

// The ConfigMap in which kube-apiserver publishes how to authenticate it,
// and its keys.
const (
	authConfigMapNamespace = metav1.NamespaceSystem
	authConfigMapName      = "extension-apiserver-authentication"
	keyRequestHeaderCA     = "requestheader-client-ca-file"
	keyAllowedNames        = "requestheader-allowed-names"
	keyUsernameHeaders     = "requestheader-username-headers"
)

// loadFrontProxyAuth reads the request-header CA and allowed names from
// caFile and allowedNames if caFile is set, else from the ConfigMap
// kube-system/extension-apiserver-authentication.
func loadFrontProxyAuth(ctx context.Context, client kubernetes.Interface, caFile, allowedNames string) (*frontProxyAuth, error) {
	if caFile != "" {
		pemData, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("--requestheader-client-ca-file: %w", err)
		}
		var allowed []string
		for _, n := range strings.Split(allowedNames, ",") {
			if n = strings.TrimSpace(n); n != "" {
				allowed = append(allowed, n)
			}
		}
		return newFrontProxyAuth(pemData, allowed, nil, "--requestheader-client-ca-file "+caFile)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cm, err := client.CoreV1().ConfigMaps(authConfigMapNamespace).Get(ctx, authConfigMapName, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("read the aggregation layer's CA from ConfigMap %s/%s (bind the Role extension-apiserver-authentication-reader in %s, or give --requestheader-client-ca-file): %w",
			authConfigMapNamespace, authConfigMapName, authConfigMapNamespace, err)
	}
	src := "ConfigMap " + authConfigMapNamespace + "/" + authConfigMapName
	caPEM := cm.Data[keyRequestHeaderCA]
	if caPEM == "" {
		return nil, fmt.Errorf("%s has no %s: kube-apiserver runs without --requestheader-client-ca-file, so it cannot serve aggregated APIs", src, keyRequestHeaderCA)
	}
	allowed, err := jsonList(cm.Data[keyAllowedNames])
	if err != nil {
		return nil, fmt.Errorf("%s: %s: %w", src, keyAllowedNames, err)
	}
	users, err := jsonList(cm.Data[keyUsernameHeaders])
	if err != nil {
		return nil, fmt.Errorf("%s: %s: %w", src, keyUsernameHeaders, err)
	}
	return newFrontProxyAuth([]byte(caPEM), allowed, users, src)
}

func newFrontProxyAuth(caPEM []byte, allowed, userHeaders []string, src string) (*frontProxyAuth, error) {
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("%s: no PEM certificate in the request-header CA", src)
	}
	if len(userHeaders) == 0 {
		userHeaders = []string{"X-Remote-User"}
	}
	return &frontProxyAuth{roots: roots, allowed: allowed, userHeaders: userHeaders}, nil
}

// jsonList decodes a JSON list of strings, as the ConfigMap's list values
// are; empty means none.
func jsonList(s string) ([]string, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var out []string
	if err := json.Unmarshal([]byte(s), &out); err != nil {
		return nil, fmt.Errorf("want a JSON list of strings: %w", err)
	}
	return out, nil
}
