package leader_test

import (
	"context"
	"fmt"

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
