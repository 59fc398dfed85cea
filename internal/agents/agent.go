// One agent: what it saw, from its transport and its informers' handlers.

package agents

import (
	"net/http"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/cache"

	"github.com/fastover/fastover/internal/fleet"
)

// agent is what one agent has seen.
type agent struct {
	follows  bool
	policies int // how many the API serves (Config.Policies)
	mu       sync.Mutex
	// events: the runs of events of replicas, by the replica that sent
	// them; last[r] is the last event from replica r.
	events runs
	last   map[string]time.Time
	// held counts the policies held by the replica that served them;
	// complete[r] is when the agent last came to hold all of them from r.
	held     map[string]int
	byName   map[string]string
	complete map[string]time.Time
	// watches: the runs of answers to the agent's watches of policies,
	// by the replica that answered: a watch that resumed there, with no
	// list, is served too.
	watches runs
	// answers: the runs of the agent's requests answered (2xx), of either
	// resource, by the replica that answered: when it reached a replica.
	answers  runs
	sent     []time.Time
	failures []failure
}

// failure is a failed list or watch: when, and its kindOf.
type failure struct {
	at   time.Time
	kind string
}

func newAgent(policies int, follows bool) *agent {
	return &agent{
		follows: follows, policies: policies, last: map[string]time.Time{},
		held: map[string]int{}, byName: map[string]string{}, complete: map[string]time.Time{},
	}
}

// observe wraps the agent's transport: it records which replica answers
// its requests (ReplicaHeader), its watches of policies apart, and the
// requests that reached none: a reflector retries a watch refused at
// the connection without reporting it (client-go's isWatchErrorRetriable),
// after its back-off all the same.
func (a *agent) observe(rt http.RoundTripper) http.RoundTripper {
	return fleet.RoundTripperFunc(func(r *http.Request) (*http.Response, error) {
		sent := time.Now()
		resp, err := rt.RoundTrip(r)
		now := time.Now()
		a.mu.Lock()
		defer a.mu.Unlock()
		a.sent = append(a.sent, sent)
		switch {
		case err != nil:
			if r.Context().Err() == nil {
				a.addFailure(now, err)
			}
		case resp.StatusCode/100 == 2:
			id := resp.Header.Get(ReplicaHeader)
			if id == "" {
				break
			}
			a.answers.see(id, now)
			if strings.HasSuffix(r.URL.Path, "/"+PoliciesGVR.Resource) && r.URL.Query().Get("watch") == "true" {
				a.watches.see(id, now)
			}
		}
		return resp, err
	})
}

func (a *agent) failed(at time.Time, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.addFailure(at, err)
}

// addFailure records a failed request; a.mu is held.
func (a *agent) addFailure(at time.Time, err error) {
	a.failures = append(a.failures, failure{at: at, kind: kindOf(err)})
}

// replicaHandler records each event of replicas: the replica that sent it.
func (a *agent) replicaHandler() cache.ResourceEventHandler {
	record := func(obj any) {
		u, ok := obj.(*unstructured.Unstructured)
		if !ok || u.GetName() == "" {
			return
		}
		now := time.Now()
		a.mu.Lock()
		defer a.mu.Unlock()
		a.events.see(u.GetName(), now)
		a.last[u.GetName()] = now
	}
	return cache.ResourceEventHandlerFuncs{AddFunc: record, UpdateFunc: func(_, obj any) { record(obj) }}
}

// policyHandler counts the policies the agent holds by the replica that
// served them, and records when it comes to hold all of them from one
// replica.
func (a *agent) policyHandler() cache.ResourceEventHandler {
	set := func(obj any) {
		u, ok := obj.(*unstructured.Unstructured)
		if !ok {
			return
		}
		by := u.GetAnnotations()[ServedByAnnotation]
		a.mu.Lock()
		defer a.mu.Unlock()
		old, held := a.byName[u.GetName()]
		if held && old == by {
			return // a relist from the same replica
		}
		if held {
			a.held[old]--
		}
		a.byName[u.GetName()] = by
		a.held[by]++
		if a.held[by] == a.policies {
			a.complete[by] = time.Now()
		}
	}
	del := func(obj any) {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		u, ok := obj.(*unstructured.Unstructured)
		if !ok {
			return
		}
		a.mu.Lock()
		defer a.mu.Unlock()
		if old, held := a.byName[u.GetName()]; held {
			a.held[old]--
			delete(a.byName, u.GetName())
		}
	}
	return cache.ResourceEventHandlerFuncs{AddFunc: set, UpdateFunc: func(_, obj any) { set(obj) }, DeleteFunc: del}
}

// served is when the agent was first served by replica id at or after
// from (zero: it is not): the later of the start of its current run of
// events of replicas from id and the moment its policies were current
// from id: when it came to hold all of them as listed from id, or, if its
// watch resumed on id without a list, when id began to answer that watch
// (and it held them all).
func (a *agent) served(id string, from time.Time) time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	at, ok := a.events.from(id, from)
	if !ok {
		return time.Time{}
	}
	if a.policies == 0 {
		return at
	}
	var current time.Time
	if all, ok := a.complete[id]; ok && !all.Before(from) && a.held[id] == len(a.byName) {
		current = all
	}
	if w, ok := a.watches.from(id, from); ok && len(a.byName) == a.policies && (current.IsZero() || w.Before(current)) {
		current = w
	}
	if current.IsZero() {
		return time.Time{}
	}
	if current.After(at) {
		return current
	}
	return at
}
