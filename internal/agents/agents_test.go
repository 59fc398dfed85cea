package agents

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"

	"github.com/fastover/fastover/internal/fleet"
)

// fakeAPI serves replicas and policies as fastover-example does, from one
// replica at a time; switchTo makes another replica the one that answers
// and ends every watch, as a failover does.
type fakeAPI struct {
	policies int
	// shared: the policies' versions are the same on every replica, and
	// their watch resumes after a switch.
	shared  bool
	mu      sync.Mutex
	id      string
	gen, rv int
	ended   chan struct{}
}

func newFakeAPI(id string, policies int) *fakeAPI {
	return &fakeAPI{id: id, policies: policies, ended: make(chan struct{})}
}

func (f *fakeAPI) switchTo(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.id = id
	f.gen++
	close(f.ended)
	f.ended = make(chan struct{})
}

// now returns the replica that answers, a new resourceVersion of it, and
// the channel closed when it stops answering. A replica's versions are
// its own: "generation-n".
func (f *fakeAPI) now() (id, rv string, ended chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rv++
	return f.id, fmt.Sprintf("%d-%d", f.gen, f.rv), f.ended
}

func object(kind, name, rv, servedBy string) map[string]any {
	meta := map[string]any{"name": name, "resourceVersion": rv}
	if servedBy != "" {
		meta["annotations"] = map[string]any{ServedByAnnotation: servedBy}
	}
	return map[string]any{"apiVersion": fleet.APIGroup + "/" + fleet.APIVersion, "kind": kind, "metadata": meta}
}

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	id, rv, ended := f.now()
	var items []map[string]any
	kind := "Replica"
	switch {
	case strings.HasSuffix(r.URL.Path, "/replicas"):
		items = append(items, object(kind, id, rv, ""))
	case strings.HasSuffix(r.URL.Path, "/policies"):
		kind = "Policy"
		for i := range f.policies {
			items = append(items, object(kind, fmt.Sprintf("p-%d", i), rv, id))
		}
	default:
		http.NotFound(w, r)
		return
	}
	if kind == "Policy" && f.shared {
		rv = "shared"
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set(ReplicaHeader, id)
	q := r.URL.Query()
	if q.Get("watch") != "true" {
		_ = json.NewEncoder(w).Encode(map[string]any{
			"apiVersion": fleet.APIGroup + "/" + fleet.APIVersion, "kind": kind + "List",
			"metadata": map[string]any{"resourceVersion": rv}, "items": items,
		})
		return
	}
	// A watch of policies from a version of another replica is refused
	// with 410 Gone, as fastover-example refuses it: the client lists
	// again.
	if from := q.Get("resourceVersion"); kind == "Policy" && from != "" && from != "0" && strings.Split(from, "-")[0] != strings.Split(rv, "-")[0] {
		w.WriteHeader(http.StatusGone)
		_ = json.NewEncoder(w).Encode(map[string]any{"apiVersion": "v1", "kind": "Status", "status": "Failure",
			"reason": "Expired", "code": http.StatusGone, "message": "too old resource version: " + from})
		return
	}
	w.(http.Flusher).Flush() // the watch is established
	enc := json.NewEncoder(w)
	send := func(typ string, obj map[string]any) {
		_ = enc.Encode(map[string]any{"type": typ, "object": obj})
		w.(http.Flusher).Flush()
	}
	if q.Get("sendInitialEvents") == "true" {
		for _, it := range items {
			send("ADDED", it)
		}
		mark := object(kind, "", rv, "")
		mark["metadata"].(map[string]any)["annotations"] = map[string]any{"k8s.io/initial-events-end": "true"}
		send("BOOKMARK", mark)
	}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-ended:
			return
		case <-tick.C:
			if kind == "Replica" {
				_, rv, _ := f.now()
				send("MODIFIED", object(kind, id, rv, ""))
			}
		}
	}
}

func uns(m map[string]any) *unstructured.Unstructured { return &unstructured.Unstructured{Object: m} }

func startFake(t *testing.T, api *fakeAPI) *rest.Config {
	t.Helper()
	srv := httptest.NewUnstartedServer(api)
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return &rest.Config{Host: srv.URL, TLSClientConfig: rest.TLSClientConfig{Insecure: true}}
}

func TestStartRejectsBadConfig(t *testing.T) {
	ctx := context.Background()
	some := func(int) *rest.Config { return &rest.Config{Host: "https://127.0.0.1:1"} }
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{N: 0, Agent: some}, "N must be at least 1"},
		{Config{N: 1}, "Config.Agent is required"},
		{Config{N: 1, Agent: some, Policies: -1}, "Policies must not be negative"},
		{Config{N: 1, Agent: some, Follows: func(int) bool { return true }}, "need Config.Kube"},
		{Config{N: 1, Agent: func(int) *rest.Config { return nil }}, "agent 0: no rest.Config"},
	} {
		_, err := Start(ctx, tc.cfg)
		assert.ErrorContains(t, err, tc.want)
	}
}

// TestAgentsFollowASwitch: agents with client-go informers over TLS and
// HTTP/2, each with a connection of its own, are served by the first
// replica, then, once the API switches to another and ends their
// watches, by the other: its event and all its policies.
func TestAgentsFollowASwitch(t *testing.T) {
	api := newFakeAPI("r-1", 5)
	cfg := startFake(t, api)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	l, err := Start(ctx, Config{N: 10, Agent: func(int) *rest.Config { return rest.CopyConfig(cfg) }, Policies: 5})
	require.NoError(t, err)
	assert.Equal(t, 10, l.N())
	require.NoError(t, l.Wait(ctx, "r-1", start, 30*time.Second))
	assert.Equal(t, 10, SpreadOf(start, l.ServedBy("r-1", start)).Served)

	// Let the watches run a second, so that client-go does not back off.
	time.Sleep(1100 * time.Millisecond)
	fault := time.Now()
	assert.Equal(t, 0, SpreadOf(fault, l.ServedBy("r-2", fault)).Served)
	api.switchTo("r-2")
	require.NoError(t, l.Wait(ctx, "r-2", fault, 30*time.Second))
	s := SpreadOf(fault, l.ServedBy("r-2", fault))
	assert.Equal(t, 10, s.Served)
	assert.Greater(t, s.Max, time.Duration(0))
	// Each agent asked again, then reached r-2, then was served by it.
	sent, reached, served := l.SentAfter(fault), l.ReachedBy("r-2", fault), l.ServedBy("r-2", fault)
	for i := range l.N() {
		require.False(t, reached[i].IsZero(), "agent %d", i)
		assert.False(t, reached[i].Before(sent[i]), "agent %d reached r-2 before it asked", i)
		assert.False(t, served[i].Before(reached[i]), "agent %d served before it reached r-2", i)
	}
	for i := range l.N() {
		assert.False(t, l.Follows(i))
	}
	// The policies' watches, ended, started again from r-1's version:
	// r-2 answered 410 Gone, and the agents listed again.
	assert.Positive(t, l.FailureKinds(fault)["410 Gone"], "%v", l.FailureKinds(fault))
	// r-1 served nobody since the fault; nobody heard from it after r-2.
	assert.Equal(t, 0, SpreadOf(fault, l.ServedBy("r-1", fault)).Served)
	assert.Equal(t, 0, Stale(l.LastFrom("r-1"), l.ServedBy("r-2", fault)))

	err = l.Wait(ctx, "r-3", fault, 100*time.Millisecond)
	assert.ErrorContains(t, err, "10 of 10 not served by r-3")
}

// TestAgentsCountRefusedWatches: a watch refused at the connection (the
// API's address has no server for a while, as a stopped leader's before
// the Service names the next) is a failure of the agent's, though
// client-go's reflector retries it without a word to its error handler.
func TestAgentsCountRefusedWatches(t *testing.T) {
	api := newFakeAPI("r-1", 0)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	serve := func(lis net.Listener) *httptest.Server {
		srv := httptest.NewUnstartedServer(api)
		_ = srv.Listener.Close()
		srv.Listener = lis
		srv.EnableHTTP2 = true
		srv.StartTLS()
		// After the agents stop (the deferred cancel): Close waits for
		// their connections.
		t.Cleanup(srv.Close)
		return srv
	}
	srv := serve(lis)
	addr := lis.Addr().String()
	cfg := &rest.Config{Host: srv.URL, TLSClientConfig: rest.TLSClientConfig{Insecure: true}}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	l, err := Start(ctx, Config{N: 3, Agent: func(int) *rest.Config { return rest.CopyConfig(cfg) }})
	require.NoError(t, err)
	require.NoError(t, l.Wait(ctx, "r-1", start, 30*time.Second))
	time.Sleep(1100 * time.Millisecond)

	fault := time.Now()
	// The address refuses connections; the watches end; the API will
	// answer as r-2.
	_ = srv.Listener.Close()
	srv.CloseClientConnections()
	api.switchTo("r-2")
	// Down until every agent has had a connection refused: each retries
	// its watches after client-go's back-off (0.8 s, doubling, up to twice
	// that), and a loaded machine may take longer to notice the end.
	refused := func() bool {
		for _, fs := range l.Failures(fault) {
			if len(fs) == 0 {
				return false
			}
		}
		return l.FailureKinds(fault)["connection refused"] >= l.N()
	}
	for deadline := time.Now().Add(20 * time.Second); !refused(); time.Sleep(20 * time.Millisecond) {
		require.True(t, time.Now().Before(deadline), "the agents' refused connections were not counted: %v", l.FailureKinds(fault))
	}
	lis, err = net.Listen("tcp", addr)
	require.NoError(t, err)
	serve(lis)
	require.NoError(t, l.Wait(ctx, "r-2", fault, 30*time.Second))
	o := OutageOf(l.Failures(fault), l.ServedBy("r-2", fault), time.Now())
	assert.Equal(t, 3, o.Agents)
}

// TestAgentsResumeOnASharedVersion: with versions shared by the replicas,
// the agents' watches of policies resume on the new replica without a
// 410 or a list, and the agents are served once it answers them.
func TestAgentsResumeOnASharedVersion(t *testing.T) {
	api := newFakeAPI("r-1", 5)
	api.shared = true
	cfg := startFake(t, api)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	l, err := Start(ctx, Config{N: 5, Agent: func(int) *rest.Config { return rest.CopyConfig(cfg) }, Policies: 5})
	require.NoError(t, err)
	require.NoError(t, l.Wait(ctx, "r-1", start, 30*time.Second))
	time.Sleep(1100 * time.Millisecond)
	fault := time.Now()
	api.switchTo("r-2")
	require.NoError(t, l.Wait(ctx, "r-2", fault, 30*time.Second))
	assert.Zero(t, l.FailureKinds(fault)["410 Gone"], "%v", l.FailureKinds(fault))
	for _, a := range l.agents {
		a.mu.Lock()
		assert.Equal(t, 5, a.held["r-1"], "the policies were not listed again")
		a.mu.Unlock()
	}
}

// An agent that holds some policies from the new replica and some from the
// old is not served by the new one yet.
func TestAgentPartialPolicies(t *testing.T) {
	a := newAgent(2, false)
	rep, pol := a.replicaHandler(), a.policyHandler()
	t0 := time.Now()
	rep.OnAdd(uns(object("Replica", "r-1", "1", "")), false)
	pol.OnAdd(uns(object("Policy", "p-0", "1", "r-1")), false)
	assert.True(t, a.served("r-1", t0).IsZero(), "one policy of two")
	pol.OnAdd(uns(object("Policy", "p-1", "1", "r-1")), false)
	assert.False(t, a.served("r-1", t0).IsZero())

	t1 := time.Now()
	rep.OnUpdate(nil, uns(object("Replica", "r-2", "2", "")))
	pol.OnUpdate(nil, uns(object("Policy", "p-0", "2", "r-2")))
	assert.True(t, a.served("r-2", t1).IsZero(), "half the policies from r-2")
	pol.OnUpdate(nil, uns(object("Policy", "p-1", "2", "r-2")))
	assert.False(t, a.served("r-2", t1).IsZero())
	assert.True(t, a.served("r-1", t1).IsZero())
	// A relist from the same replica changes nothing.
	done := a.complete["r-2"]
	pol.OnUpdate(nil, uns(object("Policy", "p-1", "3", "r-2")))
	assert.Equal(t, done, a.complete["r-2"])
}
