package e2e

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/fastover/fastover/internal/cluster"
	"github.com/fastover/fastover/leader"
	"github.com/fastover/fastover/leader/follow"
)

// TestFollowerNeedsItsRole runs a Follower as a user of the real
// kube-apiserver (RBAC): without a Role, Start fails with ErrForbidden;
// with the Role of follow.PolicyRules it starts, follows the leader the
// slices publish (through the API's watch), and dials it for the Service's
// ClusterIP and port.
func TestFollowerNeedsItsRole(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	env := cluster.Start(t, cluster.Options{})
	const ns = "agents"
	require.NoError(t, env.CreateNamespace(ctx, ns, nil))
	svc, err := env.Client.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "ctl"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{
			{Name: "https", Port: 443, TargetPort: intstr.FromInt32(8443)},
		}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)

	as := rest.CopyConfig(env.Config)
	as.Impersonate = rest.ImpersonationConfig{UserName: "agent"}
	agent, err := kubernetes.NewForConfig(as)
	require.NoError(t, err)
	newFollower := func() *follow.Follower {
		f, err := follow.New(follow.Config{Client: agent, Namespace: ns, Service: "ctl"})
		require.NoError(t, err)
		return f
	}
	err = newFollower().Start(ctx)
	require.ErrorIs(t, err, follow.ErrForbidden)
	assert.ErrorContains(t, err, "follow.PolicyRules")

	_, err = env.Client.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "follow"}, Rules: follow.PolicyRules(),
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = env.Client.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "follow"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "follow"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: "agent"}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	f := newFollower()
	require.Eventually(t, func() bool { return f.Start(ctx) == nil }, 30*time.Second, 200*time.Millisecond, "Start with the Role")
	_, ok := f.Leader()
	assert.False(t, ok, "no leader published yet")

	// A leader publishes itself, as leader does.
	_, err = env.Client.DiscoveryV1().EndpointSlices(ns).Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name:        "ctl-fastover",
			Labels:      map[string]string{discoveryv1.LabelServiceName: "ctl", discoveryv1.LabelManagedBy: "leader.fastover.io"},
			Annotations: map[string]string{leader.AnnotationIdentity: "ctl-a", leader.AnnotationTerm: "3", leader.AnnotationHandOver: "unplanned"},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"192.0.2.7"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("https"), Port: ptr.To[int32](8443), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	require.Eventually(t, func() bool { l, ok := f.Leader(); return ok && l.Identity == "ctl-a" && l.Term == 3 }, 10*time.Second, 10*time.Millisecond)

	var mu sync.Mutex
	var dialed []string
	dial := f.Dialer(func(_ context.Context, _, address string) (net.Conn, error) {
		mu.Lock()
		defer mu.Unlock()
		dialed = append(dialed, address)
		c, _ := net.Pipe()
		return c, nil
	})
	for _, addr := range []string{net.JoinHostPort(svc.Spec.ClusterIP, "443"), "ctl.agents.svc:443"} {
		c, err := dial(ctx, "tcp", addr)
		require.NoError(t, err, addr)
		require.NoError(t, c.Close())
	}
	assert.Equal(t, []string{"192.0.2.7:8443", "192.0.2.7:8443"}, dialed)
}
