package cluster

import (
	"context"
	"fmt"
	"path/filepath"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// KubeconfigFor makes a ServiceAccount in the namespace, grants it a Role
// with exactly the rules, and writes a kubeconfig that authenticates as it
// (a token from the TokenRequest API). It returns the kubeconfig's path: a
// process run with it can do what the rules allow, nothing more.
func (e *Env) KubeconfigFor(ctx context.Context, namespace, name string, rules []rbacv1.PolicyRule) (string, error) {
	c := e.Client
	if _, err := c.CoreV1().ServiceAccounts(namespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		return "", fmt.Errorf("create service account: %w", err)
	}
	if _, err := c.RbacV1().Roles(namespace).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}, metav1.CreateOptions{}); err != nil {
		return "", fmt.Errorf("create role: %w", err)
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: namespace, Name: name}},
	}
	if _, err := c.RbacV1().RoleBindings(namespace).Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		return "", fmt.Errorf("create role binding: %w", err)
	}
	return e.KubeconfigAs(ctx, namespace, name)
}

// KubeconfigAs writes a kubeconfig that authenticates as an existing
// ServiceAccount (a token from the TokenRequest API), with its namespace as
// the default, and returns its path.
func (e *Env) KubeconfigAs(ctx context.Context, namespace, serviceAccount string) (string, error) {
	tok, err := e.Client.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, serviceAccount, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("request token: %w", err)
	}
	path := filepath.Join(e.Dir, "kubeconfig-"+namespace+"-"+serviceAccount)
	return path, e.writeKubeconfigFile(path, serviceAccount, tok.Status.Token, namespace)
}
