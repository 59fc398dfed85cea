package leader_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/fastover/fastover/leader"
)

// A controller runs its work only while it leads. Here a fake clientset
// stands in for the API server; a real controller passes a clientset from
// its kubeconfig, runs until SIGTERM, and exits when Run returns
// ErrLeadershipLost.
func Example() {
	client := fake.NewClientset()
	elector, err := leader.New(leader.Config{
		Client:    client,
		Namespace: "kube-system",
		LeaseName: "my-controller",
		Identity:  "replica-a",
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, stop := context.WithCancel(context.Background())
	err = elector.Run(ctx, func(ctx context.Context) error {
		fmt.Println("leading as", elector.Identity())
		stop() // as SIGTERM would; the work then sees its context end
		<-ctx.Done()
		fmt.Println("work stopped")
		return nil
	})
	fmt.Println("Run returned", err)
	// Output:
	// leading as replica-a
	// work stopped
	// Run returned <nil>
}

// The leader publishes itself as the only endpoint of a Service without
// selector. In a Pod, EndpointFromEnv takes the address, the Pod's name and
// the node's name from the downward API ($POD_IP, $POD_NAME, $NODE_NAME);
// here they are given.
func ExampleEndpointConfig() {
	cfg := leader.Config{
		Client:    fake.NewClientset(),
		Namespace: "antrea",
		LeaseName: "antrea-controller",
		Identity:  "antrea-controller-7d9f-x2k",
		Endpoint: &leader.EndpointConfig{
			Service: "antrea",
			Address: "10.0.3.17",
			// A Service that still selects pods: let the leader remove
			// its selector (the migration from a single replica).
			RemoveSelector: true,
		},
	}
	fmt.Println(cfg.Validate())
	// Output: <nil>
}

// A leader whose work cannot serve at once (a process it starts, a cache
// it fills) publishes itself only once the work is ready: Ready is waited
// for first.
func ExampleEndpointConfig_ready() {
	client := fake.NewClientset(&corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "svc"},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}},
	})
	serving := make(chan struct{})
	elector, err := leader.New(leader.Config{
		Client: client, Namespace: "ns", LeaseName: "svc", Identity: "replica-a",
		Endpoint: &leader.EndpointConfig{
			Service: "svc", Address: "10.0.3.17",
			Ready: func(ctx context.Context) error {
				select {
				case <-serving:
					return nil
				case <-ctx.Done():
					return ctx.Err()
				}
			},
		},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	published := func(ctx context.Context) []string {
		list, _ := client.DiscoveryV1().EndpointSlices("ns").List(ctx, metav1.ListOptions{})
		var addrs []string
		for _, s := range list.Items {
			for _, ep := range s.Endpoints {
				addrs = append(addrs, ep.Addresses...)
			}
		}
		return addrs
	}
	ctx, stop := context.WithCancel(context.Background())
	_ = elector.Run(ctx, func(ctx context.Context) error {
		time.Sleep(100 * time.Millisecond) // warming up
		fmt.Println("while warming up:", published(ctx))
		close(serving)
		for len(published(ctx)) == 0 {
			time.Sleep(10 * time.Millisecond)
		}
		fmt.Println("once ready:", published(ctx))
		stop()
		return nil
	})
	// Output:
	// while warming up: []
	// once ready: [10.0.3.17]
}

// Validate reports every problem at once, each with its field.
func ExampleConfig_Validate() {
	err := leader.Config{
		Namespace: "antrea",
		Endpoint:  &leader.EndpointConfig{Service: "antrea", Address: "127.0.0.1"},
	}.Validate()
	fmt.Println(err)
	// Output:
	// Config.Client: required
	// Config.LeaseName: required
	// Config.Endpoint.Address: "127.0.0.1" is a loopback address: other nodes cannot reach it, and the EndpointSlice API refuses it
}

// A warm standby: the informers start and sync in Prepare, while another
// replica leads, and the replica competes for the Lease only once they
// have synced. When it takes over, its work starts with full caches. Here
// a fake clientset with three ConfigMaps stands in for the API server.
func ExampleConfig_prepare() {
	client := fake.NewClientset(
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "antrea", Name: "a"}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "antrea", Name: "b"}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "antrea", Name: "c"}},
	)
	// Set up the informers (and their event handlers) before Run.
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace("antrea"))
	configMaps := factory.Core().V1().ConfigMaps()
	configMaps.Informer()

	elector, err := leader.New(leader.Config{
		Client:    client,
		Namespace: "antrea",
		LeaseName: "antrea-controller",
		Identity:  "replica-a",
		// Standby-time work: start the informers with Prepare's context,
		// which lasts as long as Run, and wait for their caches.
		Prepare: func(ctx context.Context) error {
			factory.Start(ctx.Done())
			for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
				if !ok {
					return fmt.Errorf("cache of %v did not sync", typ)
				}
			}
			return nil
		},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer factory.Shutdown()
	ctx, stop := context.WithCancel(context.Background())
	err = elector.Run(ctx, func(ctx context.Context) error {
		all, _ := configMaps.Lister().List(labels.Everything())
		fmt.Println("leading with", len(all), "ConfigMaps in the cache")
		stop()
		<-ctx.Done()
		return nil
	})
	fmt.Println("Run returned", err)
	// Output:
	// leading with 3 ConfigMaps in the cache
	// Run returned <nil>
}

// A replica's HTTP server stops serving when its term ends, right after
// Run has released the Lease: its streams (a watch) end at once, so that
// their clients reconnect to the Service and reach the new leader, instead
// of reading from this replica until a shutdown gives up.
func ExampleServerStopper() {
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = fmt.Fprintln(w, "event from the leader")
		w.(http.Flusher).Flush()
		<-r.Context().Done() // a watch: it runs until its request ends
	})}
	stopper, err := leader.NewServerStopper(srv)
	if err != nil {
		fmt.Println(err)
		return
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Println(err)
		return
	}
	go func() { _ = srv.Serve(l) }()

	elector, err := leader.New(leader.Config{Client: fake.NewClientset(), Namespace: "antrea", LeaseName: "antrea-controller", Identity: "replica-a"})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, stop := context.WithCancel(context.Background())
	var stream *bufio.Reader
	var body io.ReadCloser
	err = elector.Run(ctx, func(ctx context.Context) error {
		resp, err := http.Get("http://" + l.Addr().String() + "/watch") //nolint:bodyclose // closed after Run, once read to its end
		if err != nil {
			return err
		}
		// The stream is read to its end, and closed, after Run.
		body = resp.Body
		stream = bufio.NewReader(body)
		line, _ := stream.ReadString('\n')
		fmt.Print("a client reads: ", line)
		stop() // SIGTERM: the term ends
		<-ctx.Done()
		return nil
	})
	// The Lease is released: a standby takes it, and the clients follow
	// once this replica's streams end.
	fmt.Println("Run returned", err, "; stop serving:", stopper.Stop(5*time.Second))
	if stream != nil {
		_, err = io.ReadAll(stream)
		fmt.Println("the client's stream ended:", err == nil)
		_ = body.Close()
	}
	// Output:
	// a client reads: event from the leader
	// Run returned <nil> ; stop serving: <nil>
	// the client's stream ended: true
}

// Only: a replica that does not lead refuses, and closes the
// connection, so that a client dials the Service again and reaches the
// leader.
func ExampleOnly() {
	elector, err := leader.New(leader.Config{Client: fake.NewClientset(), Namespace: "antrea", LeaseName: "antrea-controller", Identity: "replica-b"})
	if err != nil {
		fmt.Println(err)
		return
	}
	h := leader.Only(elector, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = fmt.Fprintln(w, "an answer only the leader gives")
	}))
	srv := httptest.NewServer(h)
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = resp.Body.Close() }()
	body, _ := io.ReadAll(resp.Body)
	fmt.Println(resp.StatusCode, resp.Close)
	fmt.Print(string(body))
	// Output:
	// 503 true
	// replica-b does not lead (the leader: none yet)
}
