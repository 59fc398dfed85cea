package follow_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/fastover/fastover/leader"
	"github.com/fastover/fastover/leader/follow"
)

// A dial of the Service goes to the leader that its EndpointSlice names,
// at the port the Service's port targets. (A fake clientset stands in for
// the cluster, and a dial function that prints for the network.)
func Example() {
	client := fake.NewClientset(
		&corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ha", Name: "ctl"},
			Spec: corev1.ServiceSpec{
				ClusterIP: "10.96.0.10", ClusterIPs: []string{"10.96.0.10"},
				Ports: []corev1.ServicePort{{Name: "https", Port: 443, TargetPort: intstr.FromInt32(8443)}},
			},
		},
		&discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{
				Namespace: "ha", Name: "ctl-fastover",
				Labels:      map[string]string{discoveryv1.LabelServiceName: "ctl"},
				Annotations: map[string]string{leader.AnnotationIdentity: "ctl-7d9f-x2k4p", leader.AnnotationTerm: "12"},
			},
			AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"10.244.1.7"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
			Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("https"), Port: ptr.To[int32](8443)}},
		},
	)
	f, err := follow.New(follow.Config{Client: client, Namespace: "ha", Service: "ctl", Logger: logr.Discard()})
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := f.Start(ctx); err != nil {
		panic(err)
	}
	l, _ := f.Leader()
	fmt.Println("leader", l.Identity, "term", l.Term)

	dial := f.Dialer(func(_ context.Context, _, address string) (net.Conn, error) {
		fmt.Println("dial", address)
		c, _ := net.Pipe() // no network in an example
		return c, nil
	})
	for _, addr := range []string{"10.96.0.10:443", "ctl.ha.svc:443", "example.com:443"} {
		if c, err := dial(ctx, "tcp", addr); err == nil {
			_ = c.Close()
		}
	}
	// Output:
	// leader ctl-7d9f-x2k4p term 12
	// dial 10.244.1.7:8443
	// dial 10.244.1.7:8443
	// dial example.com:443
}

// inCluster starts a Follower of the Service ha/ctl, in a pod.
func inCluster(ctx context.Context) (*follow.Follower, error) {
	cfg, err := rest.InClusterConfig()
	if err != nil {
		return nil, err
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	f, err := follow.New(follow.Config{Client: client, Namespace: "ha", Service: "ctl"})
	if err != nil {
		return nil, err
	}
	// An error here is a missing Service or permission (follow.ErrForbidden:
	// grant follow.PolicyRules), not a missing leader.
	return f, f.Start(ctx)
}

// An agent's client-go clients reach the controller's API through the
// Service, and through the Follower its leader: after a handover their
// watches end at once and start again on the new leader.
func ExampleFollower_RESTConfig() {
	f, err := inCluster(context.Background())
	if err != nil {
		fmt.Println(err)
		return
	}
	api := f.RESTConfig(&rest.Config{
		Host:            "https://ctl.ha.svc:443",
		TLSClientConfig: rest.TLSClientConfig{CAFile: "/etc/ctl/ca.crt"},
	})
	_ = api // kubernetes.NewForConfig(api), dynamic.NewForConfig(api), ...
}

// Go's HTTP client, keep-alive and HTTP/2 as by default, dials the leader
// through the Follower.
func ExampleFollower_DialContext() {
	f, err := inCluster(context.Background())
	if err != nil {
		fmt.Println(err)
		return
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.DialContext = f.DialContext
	hc := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	if resp, err := hc.Get("https://ctl.ha.svc/healthz"); err == nil {
		_ = resp.Body.Close()
	}
}
