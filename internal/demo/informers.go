package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/go-logr/logr/funcr"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/fastover/fastover/internal/fleet"
	"github.com/fastover/fastover/leader/follow"
)

// The informer lanes: a client-go informer of the example's aggregated API
// through the Service's ClusterIP, as an antrea-agent watches
// antrea-controller's API, once as client-go makes it and once with its
// rest.Config from leader/follow. They run from the setup to the end of the
// demo, as an agent's informer does; each handover takes the events they
// got around it.

// The informer lanes' names.
const (
	informerLane = "informer"
	followLane   = "informer+follow"
)

// agentUser is the user the informers' requests name, as the aggregation
// layer's would.
const agentUser = "demo-agent"

// streamSettle is how long a stream must have had only the leader's events
// before a handover is played: a watch that ends less than a second after
// it began without an event costs client-go's reflector a back-off that
// is not the handover's.
const streamSettle = 2 * time.Second

// informerClients starts both informers on the Service's ClusterIP vip and
// returns their clients, once each has an event from the leader.
func (d *demo) informerClients(ctx context.Context, vip, leaderID string) ([]*realClient, error) {
	host := "https://" + vip + ":80"
	direct := d.ha.AgentConfig(host, agentUser)
	// It logs nothing: the lanes say what it did.
	quiet := funcr.New(func(string, string) {}, funcr.Options{})
	fl, err := follow.New(follow.Config{Client: d.client, Namespace: haNS, Service: haService, Logger: quiet})
	if err != nil {
		return nil, err
	}
	if err := fl.Start(ctx); err != nil {
		return nil, err
	}
	plain := &realClient{
		name:   informerLane,
		target: host,
		via: fmt.Sprintf("a client-go informer of %s at %s, the ClusterIP, through kube-proxy; client-go's transport: HTTP/2, its health check (30 s without a frame, then a 15 s ping)",
			fleet.ReplicasPath, host),
	}
	followed := &realClient{
		name:   followLane,
		target: host,
		via: "the same informer, its rest.Config from leader/follow (Follower.RESTConfig): it dials the leader the Service's EndpointSlice names " +
			"and closes its connections to a leader whose term was replaced",
	}
	// The informers log nothing either.
	quietCtx := klog.NewContext(ctx, quiet)
	for c, cfg := range map[*realClient]*rest.Config{plain: direct, followed: fl.RESTConfig(direct)} {
		c.stream = &observations{}
		obs := c.stream
		observe := func(id string) {
			now := time.Now()
			obs.add(call{sent: now, done: now, id: id})
		}
		failed := func(err error) {
			if ctx.Err() == nil {
				now := time.Now()
				obs.add(call{sent: now, done: now, err: err})
			}
		}
		if err := fleet.StartInformer(quietCtx, observeFailures(cfg, failed), observe, nil); err != nil {
			return nil, fmt.Errorf("the %s lane: %w", c.name, err)
		}
	}
	for _, c := range []*realClient{plain, followed} {
		if err := answersFrom(ctx, c, leaderID, 30*time.Second); err != nil {
			return nil, err
		}
	}
	return []*realClient{plain, followed}, nil
}

// observeFailures returns a copy of cfg whose requests report to failed
// how they failed: a request without an answer, an error status, a
// response body whose reading broke (a watch's stream, when its connection
// was closed or lost). client-go's reflector only logs a watch that ends;
// its transport sees why.
func observeFailures(cfg *rest.Config, failed func(error)) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return fleet.RoundTripperFunc(func(r *http.Request) (*http.Response, error) {
			resp, err := rt.RoundTrip(r)
			switch {
			case err != nil:
				failed(err)
			case resp.StatusCode >= http.StatusBadRequest:
				failed(statusError(resp.StatusCode))
			default:
				resp.Body = &observedBody{ReadCloser: resp.Body, failed: failed}
			}
			return resp, err
		})
	})
	return cfg
}

// observedBody reports the first error a read of a body returns, other
// than its end or its reader going away.
type observedBody struct {
	io.ReadCloser
	failed   func(error)
	reported bool
}

func (b *observedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && !b.reported && !errors.Is(err, io.EOF) && !errors.Is(err, context.Canceled) {
		b.reported = true
		b.failed(err)
	}
	return n, err
}

// settled reports whether the stream o has had events from id only for
// streamSettle, the last one recent.
func (o *observations) settled(id string) bool {
	all := o.since(time.Time{})
	if len(all) == 0 || time.Since(all[len(all)-1].done) > streamStale {
		return false
	}
	for i := len(all) - 1; i >= 0; i-- {
		if all[i].err != nil || all[i].id != id {
			return time.Since(all[i].done) > streamSettle
		}
	}
	return time.Since(all[0].done) > streamSettle
}
