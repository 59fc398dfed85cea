package main

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

	"github.com/fastover/fastover/leader"
)

// The example's Role (manifests/example/rbac.yaml; the example publishes
// itself in a Service, without --remove-selector) is leader.PolicyRules',
// rule for rule.
func TestExampleRoleIsPolicyRules(t *testing.T) {
	f, err := os.Open("../../manifests/example/rbac.yaml")
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
	example := &leader.EndpointConfig{Service: "fastover-example", Ports: []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](8080)}}}
	assert.Equal(t, leader.PolicyRules(example), roles[0].Rules)
}
