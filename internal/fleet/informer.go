package fleet

import (
	"context"
	"errors"
	"net/http"
	"os"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// The agent's side of the aggregated API: an informer of replicas, as an
// antrea-agent runs one of antrea-controller's API, straight to the
// Service's ClusterIP.

// ReplicasGVR is the aggregated API's one resource: each object names the
// replica that serves it.
var ReplicasGVR = schema.GroupVersionResource{Group: APIGroup, Version: APIVersion, Resource: "replicas"}

// AgentConfig returns a rest.Config that calls the replicas' aggregated API
// at host ("https://10.96.0.12:80", the Service's ClusterIP) directly, as
// kube-apiserver's aggregation layer does, since the API takes no other
// client: the front-proxy client certificate and an X-Remote-User header
// naming user. It trusts APICA for APIServerName and dials in the control
// plane's network namespace. Everything else is client-go's default
// transport (HTTP/2, its health check): what an agent's informer runs on.
// The certificate is read here, once per agent (client-go reads
// certificate files again on a TLS handshake a second or more after it
// last did, about 0.2 ms of parsing, which a thousand agents reconnecting
// at once would pay on this machine's cores; an agent in a cluster pays it
// on its own). Nil before EnableAPI, or if the certificate cannot be read.
func (f *Fleet) AgentConfig(host, user string) *rest.Config {
	if f.api == nil {
		return nil
	}
	certFile, keyFile := f.Env.FrontProxyClientFiles()
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return nil
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return nil
	}
	return &rest.Config{
		Host: host,
		TLSClientConfig: rest.TLSClientConfig{
			CAData: f.api.caPEM, ServerName: f.api.serverName, CertData: certPEM, KeyData: keyPEM,
		},
		Dial: f.Env.DialContext,
		WrapTransport: func(rt http.RoundTripper) http.RoundTripper {
			return RoundTripperFunc(func(r *http.Request) (*http.Response, error) {
				r = r.Clone(r.Context())
				r.Header.Set("X-Remote-User", user)
				return rt.RoundTrip(r)
			})
		},
	}
}

// RoundTripperFunc is a function as an http.RoundTripper, to wrap a
// transport (rest.Config.WrapTransport).
type RoundTripperFunc func(*http.Request) (*http.Response, error)

// RoundTrip calls f.
func (f RoundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// StartInformer starts a client-go informer (dynamic: a shared index
// informer over a ListWatch) of replicas made from cfg, which runs until
// ctx ends and logs with ctx's logger. observe gets the name of every
// object it adds or updates: the replica that serves its watch, an event a
// second; failed, if not nil, every error its list or watch returned when
// opened (a watch that ends is only logged: client-go's reflector opens
// another). Both are called from the informer's goroutines.
func StartInformer(ctx context.Context, cfg *rest.Config, observe func(id string), failed func(error)) error {
	if cfg == nil {
		return errors.New("fleet: StartInformer without a rest.Config")
	}
	dc, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	inf := dynamicinformer.NewFilteredDynamicInformer(dc, ReplicasGVR, "", 0, cache.Indexers{}, nil).Informer()
	record := func(obj any) {
		if u, ok := obj.(*unstructured.Unstructured); ok && u.GetName() != "" {
			observe(u.GetName())
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    record,
		UpdateFunc: func(_, obj any) { record(obj) },
	}); err != nil {
		return err
	}
	if failed != nil {
		if err := inf.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *cache.Reflector, err error) { failed(err) }); err != nil {
			return err
		}
	}
	go inf.RunWithContext(ctx)
	return nil
}
