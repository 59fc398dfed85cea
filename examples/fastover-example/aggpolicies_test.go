package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"
)

func TestCheckPolicyFlags(t *testing.T) {
	require.NoError(t, checkPolicyFlags(0, 2048))
	require.NoError(t, checkPolicyFlags(200, 2048))
	for _, tc := range []struct {
		n, size int
		want    string
	}{
		{-1, 10, "--api-policies -1"},
		{100001, 10, "--api-policies 100001"},
		{10, -1, "--api-policy-size -1"},
		{10, 1<<20 + 1, "--api-policy-size"},
		{100000, 1 << 20, "over 256 MiB"},
	} {
		assert.ErrorContains(t, checkPolicyFlags(tc.n, tc.size), tc.want)
	}
	_, err := parseFlags([]string{"--namespace", "x", "--api-policies", "-3"}, io.Discard)
	assert.ErrorContains(t, err, "--api-policies -3")
	_, err = parseFlags([]string{"--namespace", "x", "--api-versions", "mine"}, io.Discard)
	assert.ErrorContains(t, err, `--api-versions "mine": want replica or shared`)
}

func TestAggAPIPolicies(t *testing.T) {
	src := &fakeReplica{id: "r-1", leading: true}
	api, pc := newTestAPI(t, src)
	api.policies = newPolicySet(3, 100, "r-1", api.started, false)

	w := do(api, "GET", "/apis/example.fastover.io/v1alpha1/policies", pc.cert, nil)
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	var list PolicyList
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &list))
	assert.Equal(t, "PolicyList", list.Kind)
	assert.NotEmpty(t, list.ResourceVersion)
	require.Len(t, list.Items, 3)
	for _, p := range list.Items {
		assert.Equal(t, "Policy", p.Kind)
		assert.Len(t, p.Spec.Rules, 100)
		assert.Equal(t, "r-1", p.Annotations[servedByAnnotation])
	}
	assert.Equal(t, "policy-00002", list.Items[2].Name)

	w = do(api, "GET", "/apis/example.fastover.io/v1alpha1/policies/policy-00001", pc.cert, nil)
	require.Equal(t, http.StatusOK, w.Code)
	var one Policy
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &one))
	assert.Equal(t, "policy-00001", one.Name)

	w = do(api, "GET", "/apis/example.fastover.io/v1alpha1/policies/policy-00009", pc.cert, nil)
	require.Equal(t, http.StatusNotFound, w.Code)
	decodeStatus(t, w)

	// A replica told to refuse when it does not lead refuses the payload too.
	api.refuseStandby, src.leading = true, false
	w = do(api, "GET", "/apis/example.fastover.io/v1alpha1/policies", pc.cert, nil)
	require.Equal(t, http.StatusServiceUnavailable, w.Code)

	// Without --api-policies the resource is there, and empty.
	api2, _ := newTestAPI(t, src)
	api2.auth = api.auth
	w = do(api2, "GET", "/apis/example.fastover.io/v1alpha1/policies", pc.cert, nil)
	require.Equal(t, http.StatusOK, w.Code)
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &list))
	assert.Empty(t, list.Items)
}

func TestAggAPIPoliciesWatch(t *testing.T) {
	api, pc := newTestAPI(t, &fakeReplica{id: "r-1", leading: true})
	api.policies = newPolicySet(2, 10, "r-1", api.started, false)
	watchOf := func(query string, d time.Duration) []watch.EventType {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		r := httptest.NewRequest("GET", "/apis/example.fastover.io/v1alpha1/policies?"+query, nil).WithContext(ctx)
		r.TLS = &tls.ConnectionState{PeerCertificates: []*x509.Certificate{pc.cert}}
		r.Header.Set("X-Remote-User", "system:admin")
		w := httptest.NewRecorder()
		api.ServeHTTP(w, r)
		require.Equal(t, http.StatusOK, w.Code, w.Body.String())
		var types []watch.EventType
		sc := bufio.NewScanner(w.Body)
		for sc.Scan() {
			var e struct{ Type watch.EventType }
			require.NoError(t, json.Unmarshal(sc.Bytes(), &e), sc.Text())
			types = append(types, e.Type)
		}
		return types
	}
	// Nothing changes: a plain watch is silent until it ends.
	assert.Empty(t, watchOf("watch=true&allowWatchBookmarks=true", 100*time.Millisecond))
	// A streaming list gets the objects, then the bookmark that ends them.
	assert.Equal(t, []watch.EventType{watch.Added, watch.Added, watch.Bookmark},
		watchOf("watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true", 100*time.Millisecond))
	start := time.Now()
	assert.Empty(t, watchOf("watch=true&timeoutSeconds=1", time.Minute))
	assert.Less(t, time.Since(start), 30*time.Second, "timeoutSeconds ends the watch")

	// A watch from a version this replica gave out goes on; one from
	// another replica's (older or newer) is 410 Gone, so the client lists
	// again from this one.
	w := do(api, "GET", "/apis/example.fastover.io/v1alpha1/policies", pc.cert, nil)
	var list PolicyList
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &list))
	assert.Empty(t, watchOf("watch=true&resourceVersion="+list.ResourceVersion, 50*time.Millisecond))
	for _, rv := range []string{"5", "99999999999999999", "x"} {
		w = do(api, "GET", "/apis/example.fastover.io/v1alpha1/policies?watch=true&resourceVersion="+rv, pc.cert, nil)
		require.Equal(t, http.StatusGone, w.Code, rv)
		assert.Equal(t, metav1.StatusReasonExpired, decodeStatus(t, w).Reason)
	}
	assert.Equal(t, "r-1", w.Header().Get(replicaHeader), "every answer names the replica")

	// With shared versions, a watch from the shared version resumes on
	// any replica; lists and objects carry it.
	api.policies = newPolicySet(2, 10, "r-1", api.started, true)
	assert.Empty(t, watchOf("watch=true&resourceVersion="+sharedVersion, 50*time.Millisecond))
	w = do(api, "GET", "/apis/example.fastover.io/v1alpha1/policies", pc.cert, nil)
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &list))
	assert.Equal(t, sharedVersion, list.ResourceVersion)
	assert.Equal(t, sharedVersion, list.Items[0].ResourceVersion)
	w = do(api, "GET", "/apis/example.fastover.io/v1alpha1/policies?watch=true&resourceVersion=5", pc.cert, nil)
	require.Equal(t, http.StatusGone, w.Code, "a version from nowhere is still gone")
}

// TestAggAPIPoliciesInformer: a client-go informer (dynamic, client-go's
// transport over TLS) lists the payload and holds all of it, served by the
// replica.
func TestAggAPIPoliciesInformer(t *testing.T) {
	src := &liveReplica{id: "r-1"}
	_, cfg, _ := startAPIServer(t, http.NewServeMux(), src, true, func(o *options) { o.apiPolicies, o.apiPolicySize = 50, 2048 })
	client, err := dynamic.NewForConfig(cfg)
	require.NoError(t, err)
	gvr := schema.GroupVersionResource{Group: apiGroup, Version: apiVersion, Resource: policiesResource}
	inf := dynamicinformer.NewFilteredDynamicInformer(client, gvr, "", 0, cache.Indexers{}, nil).Informer()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	go inf.Run(ctx.Done())
	require.True(t, cache.WaitForCacheSync(ctx.Done(), inf.HasSynced))
	items := inf.GetStore().List()
	require.Len(t, items, 50)
	u := items[0].(*unstructured.Unstructured)
	assert.Equal(t, "r-1", u.GetAnnotations()[servedByAnnotation])
}

// BenchmarkPoliciesList is what each agent's relist costs the replica: a
// LIST of 200 policies of 2 KiB, encoded as JSON.
func BenchmarkPoliciesList(b *testing.B) {
	src := &fakeReplica{id: "r-1", leading: true}
	pc := newProxyCerts(&testing.T{}, "front-proxy-client")
	auth, err := newFrontProxyAuth(pc.caPEM, []string{"front-proxy-client"}, nil, "test")
	require.NoError(b, err)
	api := newAggAPI(src, auth)
	api.policies = newPolicySet(200, 2048, "r-1", api.started, false)
	b.ReportAllocs()
	for b.Loop() {
		w := do(api, "GET", "/apis/example.fastover.io/v1alpha1/policies", pc.cert, nil)
		if w.Code != http.StatusOK {
			b.Fatal(w.Code)
		}
		b.SetBytes(int64(w.Body.Len()))
	}
}

// TestAggAPIPoliciesWatchEstablished: a watch of policies with nothing to
// send is established at once for a client-go client (the headers go out
// before the first event), so a client knows which replica serves it.
// Before the flush, Watch blocked until the first bookmark, a minute on.
func TestAggAPIPoliciesWatchEstablished(t *testing.T) {
	_, cfg, _ := startAPIServer(t, http.NewServeMux(), &liveReplica{id: "r-1"}, true, func(o *options) { o.apiPolicies, o.apiPolicySize = 2, 10 })
	var served string
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			resp, err := rt.RoundTrip(r)
			if err == nil {
				served = resp.Header.Get(replicaHeader)
			}
			return resp, err
		})
	})
	client, err := dynamic.NewForConfig(cfg)
	require.NoError(t, err)
	gvr := schema.GroupVersionResource{Group: apiGroup, Version: apiVersion, Resource: policiesResource}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	list, err := client.Resource(gvr).List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	start := time.Now()
	w, err := client.Resource(gvr).Watch(ctx, metav1.ListOptions{ResourceVersion: list.GetResourceVersion()})
	require.NoError(t, err, "the watch is established before its first event")
	defer w.Stop()
	assert.Less(t, time.Since(start), 5*time.Second)
	assert.Equal(t, "r-1", served)
}
