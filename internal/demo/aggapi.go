package demo

import (
	"context"
	"fmt"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/fastover/fastover/internal/fleet"
)

// The kube-apiserver lane: the example's replicas serve an aggregated API
// (example.fastover.io/v1alpha1, whose resource replicas lists the replica
// that answered), registered with an APIService that points at the
// example's selector-less Service, as antrea-controller's API is;
// kube-apiserver, with --enable-aggregator-routing, sends each request to
// the endpoint the leader publishes.

// authReaderRole is the Role every aggregated API server is bound to: it
// reads the aggregation layer's CA from
// kube-system/extension-apiserver-authentication.
const authReaderRole = "extension-apiserver-authentication-reader"

// enableAPI makes the replicas of f serve the aggregated API (HTTPS, with
// a serving certificate of their own) and binds their ServiceAccount to
// the Role an aggregated API server needs.
func (d *demo) enableAPI(ctx context.Context, f *fleet.Fleet, serviceAccount string) error {
	if err := f.EnableAPI(); err != nil {
		return err
	}
	rb := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: f.Namespace + "-" + serviceAccount + "-auth-reader", Namespace: metav1.NamespaceSystem},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: authReaderRole},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: f.Namespace, Name: serviceAccount}},
	}
	if _, err := d.client.RbacV1().RoleBindings(metav1.NamespaceSystem).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("bind %s/%s to the Role %s: %w", f.Namespace, serviceAccount, authReaderRole, err)
	}
	return nil
}

// apiServerClient registers the example's aggregated API and returns the
// client that lists it through kube-apiserver, once that answers from the
// leader.
func (d *demo) apiServerClient(ctx context.Context, leaderID string) (*realClient, error) {
	if err := d.ha.RegisterAPIService(ctx); err != nil {
		return nil, err
	}
	cfg := rest.CopyConfig(d.env.Config)
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	hc.Timeout = 500 * time.Millisecond
	url := cfg.Host + fleet.ReplicasPath
	c := &realClient{
		name:   apiServerLane,
		target: "LIST " + fleet.ReplicasPath,
		via: fmt.Sprintf("LIST %s through kube-apiserver (APIService %s on the Service %s/%s; --enable-aggregator-routing: kube-apiserver calls the endpoint of its EndpointSlice)",
			fleet.ReplicasPath, fleet.APIServiceName, haNS, haService),
		call: func(ctx context.Context) (string, error) {
			b, err := get(ctx, hc, url)
			if err != nil {
				return "", err
			}
			a, err := fleet.ParseReplicas(b)
			return a.ID, err
		},
	}
	if err := answersFrom(ctx, c, leaderID, 10*time.Second); err != nil {
		return nil, err
	}
	return c, nil
}
