// A leader as the cluster shows it: the holder of its Lease, a running pod,
// and the only endpoint of its Service.

package cluster

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
)

// Published is a leader that a Lease names and a Service publishes.
type Published struct {
	corev1.Pod
	// Identity is its identity in the Lease: its pod's name, "_", and a
	// suffix of its process (leader.DefaultIdentity).
	Identity string
}

// WaitPublished waits until the Lease lease in ns names a running pod
// (other than the pod named not, if not is set) whose pod IP is the only
// endpoint of the Service service's EndpointSlices, and returns it. Its
// error says what it saw last.
func WaitPublished(ctx context.Context, client kubernetes.Interface, ns, lease, service, not string, timeout time.Duration) (Published, error) {
	var leader Published
	last := "no leader published yet"
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		l, err := client.CoordinationV1().Leases(ns).Get(ctx, lease, metav1.GetOptions{})
		if err != nil || l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" {
			last = fmt.Sprintf("the Lease has no holder (%v)", err)
			return false, nil
		}
		holder := *l.Spec.HolderIdentity
		name, _, _ := strings.Cut(holder, "_")
		if name == not {
			last = "the Lease still names " + holder
			return false, nil
		}
		p, err := client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil || p.DeletionTimestamp != nil || p.Status.PodIP == "" {
			last = fmt.Sprintf("the holder %s is no running pod (%v)", holder, err)
			return false, nil
		}
		slices, err := client.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + service})
		if err != nil {
			last = fmt.Sprintf("listing the Service's EndpointSlices: %v", err)
			return false, nil
		}
		var addrs []string
		for _, s := range slices.Items {
			for _, ep := range s.Endpoints {
				addrs = append(addrs, ep.Addresses...)
			}
		}
		last = fmt.Sprintf("holder %s at %s, endpoints %v", holder, p.Status.PodIP, addrs)
		leader = Published{Pod: *p, Identity: holder}
		return len(addrs) == 1 && addrs[0] == p.Status.PodIP, nil
	})
	if err != nil {
		return leader, fmt.Errorf("no leader of %s/%s published as the Service's only endpoint after %v: %s", ns, service, timeout, last)
	}
	return leader, nil
}
