package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
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

// liveReplica is a replicaSource whose term changes while a watch reads it.
type liveReplica struct {
	id   string
	term atomic.Int32
}

func (l *liveReplica) Identity() string { return l.id }
func (l *liveReplica) IsLeader() bool   { return true }
func (l *liveReplica) Term() int32      { return l.term.Load() }
func (l *liveReplica) Leader() string   { return l.id }

type decodedEvent struct {
	Type   watch.EventType
	Object Replica
}

// watchFor serves a watch of replicas for d and returns its events.
func watchFor(t *testing.T, api *aggAPI, query string, d time.Duration) []decodedEvent {
	t.Helper()
	pc := newProxyCerts(t, "front-proxy-client")
	auth, err := newFrontProxyAuth(pc.caPEM, []string{"front-proxy-client"}, nil, "test")
	require.NoError(t, err)
	api.auth = auth
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	r := httptest.NewRequest("GET", "/apis/example.fastover.io/v1alpha1/replicas?"+query, nil).WithContext(ctx)
	r.TLS = &tls.ConnectionState{PeerCertificates: []*x509.Certificate{pc.cert}}
	r.Header.Set("X-Remote-User", "system:admin")
	w := httptest.NewRecorder()
	api.ServeHTTP(w, r)
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	assert.Equal(t, "application/json", w.Header().Get("Content-Type"))
	var events []decodedEvent
	sc := bufio.NewScanner(w.Body)
	for sc.Scan() {
		var e decodedEvent
		require.NoError(t, json.Unmarshal(sc.Bytes(), &e), sc.Text())
		events = append(events, e)
	}
	return events
}

func TestAggAPIWatch(t *testing.T) {
	src := &liveReplica{id: "r-1"}
	src.term.Store(3)
	api := newAggAPI(src, nil)
	api.watchEvery = 10 * time.Millisecond
	events := watchFor(t, api, "watch=true", 200*time.Millisecond)
	require.GreaterOrEqual(t, len(events), 5, "ADDED, then MODIFIED every 10ms")
	assert.Equal(t, watch.Added, events[0].Type)
	last := uint64(0)
	for i, e := range events {
		if i > 0 {
			assert.Equal(t, watch.Modified, e.Type)
		}
		assert.Equal(t, "r-1", e.Object.Name)
		assert.Equal(t, "Replica", e.Object.Kind)
		assert.Equal(t, ReplicaStatus{Leading: true, Term: 3, Leader: "r-1"}, e.Object.Status)
		rv, err := strconv.ParseUint(e.Object.ResourceVersion, 10, 64)
		require.NoError(t, err)
		assert.Greater(t, rv, last, "resourceVersions grow")
		last = rv
	}

	// A streaming list (sendInitialEvents) gets the bookmark that ends the
	// initial events.
	events = watchFor(t, api, "watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true", 50*time.Millisecond)
	require.GreaterOrEqual(t, len(events), 2)
	assert.Equal(t, watch.Added, events[0].Type)
	assert.Equal(t, watch.Bookmark, events[1].Type)
	assert.Equal(t, "true", events[1].Object.Annotations[initialEventsEnd])

	// timeoutSeconds ends the stream.
	api.watchEvery = time.Hour
	start := time.Now()
	events = watchFor(t, api, "watch=true&timeoutSeconds=1", time.Minute)
	assert.Len(t, events, 1)
	assert.Less(t, time.Since(start), 30*time.Second)
}

func TestAggAPIWatchRefusedByStandby(t *testing.T) {
	api, pc := newTestAPI(t, &fakeReplica{id: "r-2"})
	api.refuseStandby = true
	w := do(api, "GET", "/apis/example.fastover.io/v1alpha1/replicas?watch=true", pc.cert, nil)
	require.Equal(t, http.StatusServiceUnavailable, w.Code)
	assert.Equal(t, metav1.StatusReasonServiceUnavailable, decodeStatus(t, w).Reason)
}

// TestAggAPIInformer: a client-go informer (dynamic, client-go's transport
// over TLS) lists and watches replicas and sees the term change.
func TestAggAPIInformer(t *testing.T) {
	src := &liveReplica{id: "r-1"}
	src.term.Store(1)
	_, cfg, _ := startAPIServer(t, http.NewServeMux(), src, true)
	client, err := dynamic.NewForConfig(cfg)
	require.NoError(t, err)
	gvr := schema.GroupVersionResource{Group: apiGroup, Version: apiVersion, Resource: apiResource}
	inf := dynamicinformer.NewFilteredDynamicInformer(client, gvr, "", 0, cache.Indexers{}, nil).Informer()
	var mu sync.Mutex
	terms := map[int64]bool{}
	record := func(obj any) {
		u, ok := obj.(*unstructured.Unstructured)
		if !ok {
			return
		}
		term, _, _ := unstructured.NestedInt64(u.Object, "status", "term")
		mu.Lock()
		terms[term] = true
		mu.Unlock()
	}
	_, err = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    record,
		UpdateFunc: func(_, obj any) { record(obj) },
	})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	go inf.Run(ctx.Done())
	require.True(t, cache.WaitForCacheSync(ctx.Done(), inf.HasSynced))
	src.term.Store(2)
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return terms[1] && terms[2]
	}, 10*time.Second, 50*time.Millisecond, "the informer sees term 1, then term 2 from the watch")
}
