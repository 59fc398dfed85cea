package leader

import (
	"testing"

	"github.com/stretchr/testify/assert"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/utils/ptr"
)

func TestPolicyRules(t *testing.T) {
	verbs := func(rules []rbacv1.PolicyRule) map[string][]string {
		m := map[string][]string{}
		for _, r := range rules {
			for _, res := range r.Resources {
				m[res] = r.Verbs
			}
		}
		return m
	}
	assert.Equal(t, map[string][]string{
		"leases": {"get", "list", "watch", "create", "update"},
		"pods":   {"get", "list", "watch"},
		"events": {"create", "patch", "update"},
	}, verbs(PolicyRules(nil)), "election only: the Lease, and the Pods for crash takeover")
	withSelector := verbs(PolicyRules(&EndpointConfig{RemoveSelector: true}))
	assert.Equal(t, []string{"get", "list", "watch", "patch"}, withSelector["services"])
	assert.Equal(t, []string{"get", "list", "watch", "create", "update", "delete"}, withSelector["endpoints"], "the leader's Endpoints object")
	assert.Equal(t, []string{"delete"}, verbs(PolicyRules(&EndpointConfig{SkipEndpoints: true}))["endpoints"], "SkipEndpoints: the stale one only")
	assert.Equal(t, []string{"get", "list", "watch", "create", "update", "delete"}, withSelector["endpointslices"])
	assert.Equal(t, []string{"get", "list", "watch"}, verbs(PolicyRules(&EndpointConfig{}))["services"])
	assert.Equal(t, []string{"get", "list", "watch"}, verbs(PolicyRules(&EndpointConfig{}))["pods"], "the Service's ports (a named targetPort is resolved from the Pod), and crash takeover")
	assert.Equal(t, []string{"get", "list", "watch"}, verbs(PolicyRules(&EndpointConfig{Ports: []discoveryv1.EndpointPort{{Port: ptr.To[int32](80)}}}))["pods"], "explicit ports: crash takeover")
}
