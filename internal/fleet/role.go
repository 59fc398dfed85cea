package fleet

import rbacv1 "k8s.io/api/rbac/v1"

// LeaderRole is the Role the leader library documents (leader/doc.go),
// services patch included (for --remove-selector): replicas run with a
// kubeconfig bound to exactly this (cluster.Env.KubeconfigFor) prove it is
// enough.
var LeaderRole = []rbacv1.PolicyRule{
	{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "list", "watch", "create", "update"}},
	{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"get", "list", "watch", "create", "update", "delete"}},
	{APIGroups: []string{""}, Resources: []string{"services"}, Verbs: []string{"get", "list", "watch", "patch"}},
	{APIGroups: []string{""}, Resources: []string{"endpoints"}, Verbs: []string{"delete"}},
	{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "patch", "update"}},
}
