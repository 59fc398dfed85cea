package agents

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/sync/errgroup"
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
