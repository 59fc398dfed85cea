package follow

import rbacv1 "k8s.io/api/rbac/v1"

// PolicyRules returns the rules of the Role that a Follower needs in the
// Service's namespace: get, list and watch on the Service (its ClusterIPs
// and ports) and on EndpointSlices (the leader's).
func PolicyRules() []rbacv1.PolicyRule {
	read := []string{"get", "list", "watch"}
	return []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"services"}, Verbs: read},
		{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: read},
	}
}
