package leader

import rbacv1 "k8s.io/api/rbac/v1"

// PolicyRules returns the rules of the Role that an Elector needs in its
// namespace, for the given endpoint configuration (nil: election only):
//
//   - leases: get, list, watch, create, update (the election);
//   - events: create, patch, update (Events on the Lease and the Service);
//   - with an endpoint: endpointslices get, list, watch, create, update,
//     delete; services get, list, watch, and patch with RemoveSelector;
//     endpoints get, list, watch, create, update, delete (the leader's
//     Endpoints object), or only delete with SkipEndpoints (the stale
//     Endpoints object of selector days);
//     pods get when Ports is empty (the Service's ports are published, and
//     a named targetPort is resolved from the leader's own Pod);
//   - pods: get, list, watch (crash takeover: a replica reads its own Pod,
//     standbys watch the leader's). A Role without them still works,
//     without crash takeover (a Warning Event CrashTakeoverOff says so); with
//     Config.DisableCrashTakeover they are not used.
//
// manifests/example/rbac.yaml holds the example's Role, and a test keeps it
// equal to PolicyRules for the example's configuration.
func PolicyRules(endpoint *EndpointConfig) []rbacv1.PolicyRule {
	rules := []rbacv1.PolicyRule{
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "list", "watch", "create", "update"}},
	}
	if endpoint != nil {
		services := []string{"get", "list", "watch"}
		if endpoint.RemoveSelector {
			services = append(services, "patch")
		}
		endpoints := []string{"get", "list", "watch", "create", "update", "delete"}
		if endpoint.SkipEndpoints {
			endpoints = []string{"delete"}
		}
		rules = append(rules,
			rbacv1.PolicyRule{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"get", "list", "watch", "create", "update", "delete"}},
			rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"services"}, Verbs: services},
			rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"endpoints"}, Verbs: endpoints},
		)
	}
	return append(rules,
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch"}},
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "patch", "update"}})
}
