package agents

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/sync/errgroup"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/fastover/fastover/internal/fleet"
	"github.com/fastover/fastover/leader/follow"
)

// PoliciesGVR is the payload resource of fastover-example's aggregated API
// (--api-policies); ServedByAnnotation names the replica that served an
// object of it.
var PoliciesGVR = schema.GroupVersionResource{Group: fleet.APIGroup, Version: fleet.APIVersion, Resource: "policies"}

// ServedByAnnotation is the policies' annotation that names the replica
// that served them.
const ServedByAnnotation = fleet.APIGroup + "/served-by"

// ReplicaHeader is the header with which fastover-example's API names the
// replica that answered: who serves a watch that carries no event.
const ReplicaHeader = "Fastover-Example-Replica"

// Config says what agents to run.
type Config struct {
	// N is how many agents.
	N int
	// Agent returns agent i's rest.Config for the controller's API at its
	// Service's ClusterIP, as fleet.Fleet.AgentConfig does. Start gives
	// each agent a transport of its own (it sets a Dial if there is none,
	// which keeps client-go from sharing transports).
	Agent func(i int) *rest.Config
	// Policies is how many policies the API serves (fastover-example's
	// --api-policies): an agent is served by a replica once it holds that
	// many from it. 0: the agents do not watch policies.
	Policies int
	// Follows reports whether agent i dials through a leader/follow
	// Follower of its own (nil: none does). Such agents need Kube,
	// Namespace and Service.
	Follows func(i int) bool
	// Kube is the followers' kube-apiserver config; each Follower gets a
	// transport of its own, as an agent on its own node has.
	Kube *rest.Config
	// Namespace and Service are the controller's Service.
	Namespace, Service string
	// Logger gets the agents' client-go logs (the reflectors' failures);
	// default: discarded, since a thousand agents repeat each other.
	Logger logr.Logger
}

// Load is a running set of agents.
type Load struct {
	cfg    Config
	agents []*agent
}

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

// runs records, for a sequence of observations each from one replica,
// when the latest run of observations from each replica began.
type runs struct {
	cur   string
	since map[string]time.Time
}

// see records an observation from replica id at t.
func (r *runs) see(id string, t time.Time) {
	if id == r.cur {
		return
	}
	r.cur = id
	if r.since == nil {
		r.since = map[string]time.Time{}
	}
	r.since[id] = t
}

// from is when the latest run from id began, if it began at or after t.
func (r *runs) from(id string, t time.Time) (time.Time, bool) {
	at, ok := r.since[id]
	return at, ok && !at.Before(t)
}

// Start starts cfg.N agents, which run until ctx ends. It returns once
// all have started (not synced: see Wait); on an error, those that did
// start run until ctx ends too.
func Start(ctx context.Context, cfg Config) (*Load, error) {
	switch {
	case cfg.N < 1:
		return nil, fmt.Errorf("agents: N must be at least 1, not %d", cfg.N)
	case cfg.Agent == nil:
		return nil, errors.New("agents: Config.Agent is required")
	case cfg.Policies < 0:
		return nil, fmt.Errorf("agents: Policies must not be negative, not %d", cfg.Policies)
	case cfg.Follows != nil && (cfg.Kube == nil || cfg.Namespace == "" || cfg.Service == ""):
		return nil, errors.New("agents: agents that follow need Config.Kube, Namespace and Service")
	}
	if cfg.Logger.GetSink() == nil {
		cfg.Logger = logr.Discard()
	}
	ctx = klog.NewContext(ctx, cfg.Logger)
	l := &Load{cfg: cfg, agents: make([]*agent, cfg.N)}
	// A few at a time: a Follower's start reads the Service and its
	// EndpointSlices, a round trip to kube-apiserver.
	var g errgroup.Group
	g.SetLimit(startParallel)
	for i := range cfg.N {
		a := newAgent(cfg.Policies, cfg.Follows != nil && cfg.Follows(i))
		l.agents[i] = a
		g.Go(func() error {
			if err := l.start(ctx, i, a); err != nil {
				return fmt.Errorf("agents: agent %d: %w", i, err)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return l, nil
}

// startParallel is how many agents Start starts at once.
const startParallel = 16

func newAgent(policies int, follows bool) *agent {
	return &agent{
		follows: follows, policies: policies, last: map[string]time.Time{},
		held: map[string]int{}, byName: map[string]string{}, complete: map[string]time.Time{},
	}
}

// ownTransport returns a copy of c with a Dial, so that client-go makes it
// a transport (and connections) of its own.
func ownTransport(c *rest.Config) *rest.Config {
	c = rest.CopyConfig(c)
	if c.Dial == nil {
		c.Dial = (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	}
	return c
}

func (l *Load) start(ctx context.Context, i int, a *agent) error {
	cfg := l.cfg.Agent(i)
	if cfg == nil {
		return errors.New("no rest.Config")
	}
	cfg = ownTransport(cfg)
	if a.follows {
		kube, err := kubernetes.NewForConfig(ownTransport(l.cfg.Kube))
		if err != nil {
			return err
		}
		f, err := follow.New(follow.Config{Client: kube, Namespace: l.cfg.Namespace, Service: l.cfg.Service, Logger: l.cfg.Logger})
		if err != nil {
			return err
		}
		if err := f.Start(ctx); err != nil {
			return err
		}
		cfg = f.RESTConfig(cfg)
	}
	cfg.Wrap(a.observe)
	// One client, so one transport: the agent's two informers share its
	// connection, as an agent's informers do.
	dc, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	// The transport records the requests that did not reach a replica
	// (observe), the reflectors' retries without a word included; the
	// reflectors' handler, the rest.
	failed := func(_ context.Context, _ *cache.Reflector, err error) {
		var urlErr *url.Error
		if ctx.Err() == nil && !errors.As(err, &urlErr) {
			a.failed(time.Now(), err)
		}
	}
	gvrs := []schema.GroupVersionResource{fleet.ReplicasGVR}
	if l.cfg.Policies > 0 {
		gvrs = append(gvrs, PoliciesGVR)
	}
	for _, gvr := range gvrs {
		inf := dynamicinformer.NewFilteredDynamicInformer(dc, gvr, "", 0, cache.Indexers{}, nil).Informer()
		h := a.replicaHandler()
		if gvr == PoliciesGVR {
			h = a.policyHandler()
		}
		if _, err := inf.AddEventHandler(h); err != nil {
			return err
		}
		if err := inf.SetWatchErrorHandlerWithContext(failed); err != nil {
			return err
		}
		go inf.RunWithContext(ctx)
	}
	return nil
}

// observe wraps the agent's transport: it records which replica answers
// its requests (ReplicaHeader), its watches of policies apart, and the
// requests that reached none: a reflector retries a watch refused at
// the connection without reporting it (client-go's isWatchErrorRetriable),
// after its back-off all the same.
func (a *agent) observe(rt http.RoundTripper) http.RoundTripper {
	return fleet.RoundTripperFunc(func(r *http.Request) (*http.Response, error) {
		t0 := time.Now()
		resp, err := rt.RoundTrip(r)
		now := time.Now()
		a.mu.Lock()
		a.sent = append(a.sent, t0)
		a.mu.Unlock()
		switch {
		case err != nil:
			if r.Context().Err() == nil {
				a.failed(now, err)
			}
		case resp.StatusCode/100 == 2:
			id := resp.Header.Get(ReplicaHeader)
			if id == "" {
				break
			}
			a.mu.Lock()
			a.answers.see(id, now)
			if strings.HasSuffix(r.URL.Path, "/"+PoliciesGVR.Resource) && r.URL.Query().Get("watch") == "true" {
				a.watches.see(id, now)
			}
			a.mu.Unlock()
		}
		return resp, err
	})
}

func (a *agent) failed(at time.Time, err error) {
	a.mu.Lock()
	a.failures = append(a.failures, failure{at: at, kind: kindOf(err)})
	a.mu.Unlock()
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

// ReachedBy returns, for each agent, when at or after from a request of
// it was first answered by replica id, whatever it asked: when it got
// through to id, which ServedBy follows. Zero: it did not.
func (l *Load) ReachedBy(id string, from time.Time) []time.Time {
	out := make([]time.Time, len(l.agents))
	for i, a := range l.agents {
		a.mu.Lock()
		if at, ok := a.answers.from(id, from); ok {
			out[i] = at
		}
		a.mu.Unlock()
	}
	return out
}

// SentAfter returns, for each agent, its first request sent at or after from.
func (l *Load) SentAfter(from time.Time) []time.Time {
	out := make([]time.Time, len(l.agents))
	for i, a := range l.agents {
		a.mu.Lock()
		for _, t := range a.sent {
			if !t.Before(from) {
				out[i] = t
				break
			}
		}
		a.mu.Unlock()
	}
	return out
}

// N is how many agents run.
func (l *Load) N() int { return len(l.agents) }

// Follows reports whether agent i dials through leader/follow.
func (l *Load) Follows(i int) bool { return l.agents[i].follows }

// ServedBy returns, for each agent, when at or after from it was first
// served by replica id: events of replicas from it, and all the policies
// listed from it. Zero: it is not.
func (l *Load) ServedBy(id string, from time.Time) []time.Time {
	out := make([]time.Time, len(l.agents))
	for i, a := range l.agents {
		out[i] = a.served(id, from)
	}
	return out
}

// LastFrom returns, for each agent, when it last had an event of replicas
// from replica id (zero: never).
func (l *Load) LastFrom(id string) []time.Time {
	out := make([]time.Time, len(l.agents))
	for i, a := range l.agents {
		a.mu.Lock()
		out[i] = a.last[id]
		a.mu.Unlock()
	}
	return out
}

// Failures returns, for each agent, the times at or after since at which a
// list or watch of it failed.
func (l *Load) Failures(since time.Time) [][]time.Time {
	out := make([][]time.Time, len(l.agents))
	for i, a := range l.agents {
		a.mu.Lock()
		for _, f := range a.failures {
			if !f.at.Before(since) {
				out[i] = append(out[i], f.at)
			}
		}
		a.mu.Unlock()
	}
	return out
}

// FailureKinds counts the agents' failures at or after since by kind
// (kindOf: "connection refused", "410 Gone", ...).
func (l *Load) FailureKinds(since time.Time) map[string]int {
	out := map[string]int{}
	for _, a := range l.agents {
		a.mu.Lock()
		for _, f := range a.failures {
			if !f.at.Before(since) {
				out[f.kind]++
			}
		}
		a.mu.Unlock()
	}
	return out
}

// Wait waits until every agent is served by replica id at or after from,
// or timeout passes (an error that says how many are not), or ctx ends.
func (l *Load) Wait(ctx context.Context, id string, from time.Time, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	// The times are the agents' own (ServedBy); the tick only says when
	// to stop waiting, and a thousand agents' check costs CPU that a
	// storm needs.
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		missing := 0
		for _, t := range l.ServedBy(id, from) {
			if t.IsZero() {
				missing++
			}
		}
		if missing == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("agents: %d of %d not served by %s within %v", missing, len(l.agents), id, timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}
