package leader

import (
	"errors"
	"io"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/utils/ptr"
)

// The example's Role (manifests/example/rbac.yaml; the example publishes
// itself in a Service, without --remove-selector) is PolicyRules', rule
// for rule.
func TestExampleRoleIsPolicyRules(t *testing.T) {
	f, err := os.Open("../manifests/example/rbac.yaml")
	require.NoError(t, err)
	defer func() { _ = f.Close() }()
	dec := yaml.NewYAMLOrJSONDecoder(f, 4096)
	var roles []rbacv1.Role
	for {
		var r rbacv1.Role
		if err := dec.Decode(&r); errors.Is(err, io.EOF) {
			break
		} else {
			require.NoError(t, err)
		}
		if r.Kind == "Role" {
			roles = append(roles, r)
		}
	}
	require.Len(t, roles, 1, "one Role in manifests/example/rbac.yaml")
	// The example gives its port (--port), so it reads no Pod.
	example := &EndpointConfig{Service: "fastover-example", Ports: []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](8080)}}}
	assert.Equal(t, PolicyRules(example), roles[0].Rules)
}

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
		"events": {"create", "patch", "update"},
	}, verbs(PolicyRules(nil)), "election only")
	withSelector := verbs(PolicyRules(&EndpointConfig{RemoveSelector: true}))
	assert.Equal(t, []string{"get", "list", "watch", "patch"}, withSelector["services"])
	assert.Equal(t, []string{"get", "list", "watch", "create", "update", "delete"}, withSelector["endpoints"], "the leader's Endpoints object")
	assert.Equal(t, []string{"delete"}, verbs(PolicyRules(&EndpointConfig{SkipEndpoints: true}))["endpoints"], "SkipEndpoints: the stale one only")
	assert.Equal(t, []string{"get", "list", "watch", "create", "update", "delete"}, withSelector["endpointslices"])
	assert.Equal(t, []string{"get", "list", "watch"}, verbs(PolicyRules(&EndpointConfig{}))["services"])
	assert.Equal(t, []string{"get"}, verbs(PolicyRules(&EndpointConfig{}))["pods"], "the Service's ports: a named targetPort is resolved from the Pod")
	assert.NotContains(t, verbs(PolicyRules(&EndpointConfig{Ports: []discoveryv1.EndpointPort{{Port: ptr.To[int32](80)}}})), "pods", "explicit ports")
}
