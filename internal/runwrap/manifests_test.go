package runwrap

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/kustomize/kyaml/kio"
	"sigs.k8s.io/kustomize/kyaml/yaml"

	"github.com/fastover/fastover/leader"
)

func read(t testing.TB, data string) []*yaml.RNode {
	t.Helper()
	nodes, err := (&kio.ByteReader{Reader: strings.NewReader(data), OmitReaderAnnotations: true}).Read()
	require.NoError(t, err)
	return nodes
}

func find(t *testing.T, nodes []*yaml.RNode, kind, name string, into any) {
	t.Helper()
	for _, n := range nodes {
		if n.GetKind() == kind && n.GetName() == name {
			require.NoError(t, decode(n, into))
			return
		}
	}
	t.Fatalf("no %s %s", kind, name)
}

func TestManifestsWrapsADeploymentAndItsService(t *testing.T) {
	data, err := os.ReadFile("testdata/netexec.yaml")
	require.NoError(t, err)
	nodes := read(t, string(data))
	other := "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: other}\nspec:\n  template:\n    spec:\n      containers: [{name: c, image: i}]\n"
	nodes = append(nodes, read(t, other)...)

	out, done, err := Manifests(nodes, ManifestOptions{Options: Options{Image: testImage}})
	require.NoError(t, err)
	require.Equal(t, []Wrapped{{Name: "netexec", Lease: "netexec", Service: "netexec", ServiceFound: true}}, done)
	require.Len(t, out, 5, "the Service, two Deployments, a Role, a RoleBinding")

	var dep appsv1.Deployment
	find(t, out, "Deployment", "netexec", &dep)
	assert.Equal(t, int32(3), *dep.Spec.Replicas)
	assert.Equal(t, Binary, dep.Spec.Template.Spec.Containers[0].Command[0])
	assert.Equal(t, "netexec", dep.Spec.Selector.MatchLabels["app"], "the rest of the Deployment stays")
	var untouched appsv1.Deployment
	find(t, out, "Deployment", "other", &untouched)
	assert.Nil(t, untouched.Spec.Replicas)
	assert.Empty(t, untouched.Spec.Template.Spec.InitContainers)

	var svc corev1.Service
	find(t, out, "Service", "netexec", &svc)
	assert.Empty(t, svc.Spec.Selector)
	assert.Len(t, svc.Spec.Ports, 1)

	var role rbacv1.Role
	find(t, out, "Role", "fastover-run-netexec", &role)
	assert.Equal(t, leader.PolicyRules(&leader.EndpointConfig{Service: "netexec"}), role.Rules)
	var binding rbacv1.RoleBinding
	find(t, out, "RoleBinding", "fastover-run-netexec", &binding)
	assert.Equal(t, []rbacv1.Subject{{Kind: "ServiceAccount", Name: "default"}}, binding.Subjects,
		"no namespace: a RoleBinding's ServiceAccount is then in the binding's")
	assert.Equal(t, "fastover-run-netexec", binding.RoleRef.Name)

	// The comment and the flow style of the untouched parts are kept.
	var buf bytes.Buffer
	require.NoError(t, kio.ByteWriter{Writer: &buf}.Write(out))
	assert.Contains(t, buf.String(), "# the server")
	assert.Contains(t, buf.String(), "matchLabels: {app: netexec}")
	assert.NotContains(t, buf.String(), "creationTimestamp")

	// Idempotent.
	again, done, err := Manifests(read(t, buf.String()), ManifestOptions{Options: Options{Image: testImage}})
	require.NoError(t, err)
	assert.Empty(t, done)
	var buf2 bytes.Buffer
	require.NoError(t, kio.ByteWriter{Writer: &buf2}.Write(again))
	assert.Equal(t, buf.String(), buf2.String())
}

func TestManifestsNamespacesAndServiceAccounts(t *testing.T) {
	data := `apiVersion: v1
kind: Service
metadata: {name: api, namespace: other}
spec: {selector: {app: api}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: api, namespace: ctl}
spec:
  replicas: 5
  template:
    metadata:
      annotations: {fastover.io/run-lease: api, fastover.io/run-service: api}
    spec:
      serviceAccountName: api-sa
      containers: [{name: c, image: i, command: [/api]}]
`
	out, done, err := Manifests(read(t, data), ManifestOptions{Options: Options{Image: testImage}, Replicas: 4})
	require.NoError(t, err)
	require.Equal(t, []Wrapped{{Namespace: "ctl", Name: "api", Lease: "api", Service: "api"}}, done,
		"the Service of another namespace is not the one")
	var svc corev1.Service
	find(t, out, "Service", "api", &svc)
	assert.NotEmpty(t, svc.Spec.Selector)
	var dep appsv1.Deployment
	find(t, out, "Deployment", "api", &dep)
	assert.Equal(t, int32(5), *dep.Spec.Replicas, "2 or more replicas stay")
	var binding rbacv1.RoleBinding
	find(t, out, "RoleBinding", "fastover-run-api", &binding)
	assert.Equal(t, "ctl", binding.Namespace)
	assert.Equal(t, []rbacv1.Subject{{Kind: "ServiceAccount", Name: "api-sa", Namespace: "ctl"}}, binding.Subjects)
	var role rbacv1.Role
	find(t, out, "Role", "fastover-run-api", &role)
	assert.Equal(t, "ctl", role.Namespace)
}

func TestManifestsElectionOnly(t *testing.T) {
	data := `apiVersion: apps/v1
kind: Deployment
metadata: {name: op, namespace: ops}
spec:
  replicas: 1
  template:
    metadata:
      annotations: {fastover.io/run-lease: op}
    spec:
      containers: [{name: c, image: i, command: [/op]}]
`
	out, done, err := Manifests(read(t, data), ManifestOptions{Options: Options{Image: testImage}})
	require.NoError(t, err)
	require.Len(t, done, 1)
	var dep appsv1.Deployment
	find(t, out, "Deployment", "op", &dep)
	assert.Equal(t, int32(3), *dep.Spec.Replicas, "one replica has no standby")
	var role rbacv1.Role
	find(t, out, "Role", "fastover-run-op", &role)
	assert.Equal(t, leader.PolicyRules(nil), role.Rules)
}

func TestManifestsErrorsChangeNothing(t *testing.T) {
	data := `apiVersion: apps/v1
kind: Deployment
metadata: {name: good}
spec:
  template:
    metadata:
      annotations: {fastover.io/run-lease: good}
    spec:
      containers: [{name: c, image: i, command: [/good]}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: bad}
spec:
  template:
    metadata:
      annotations: {fastover.io/run-lease: bad}
    spec:
      containers: [{name: c, image: i}]
`
	nodes := read(t, data)
	var before bytes.Buffer
	require.NoError(t, kio.ByteWriter{Writer: &before}.Write(nodes))
	_, _, err := Manifests(nodes, ManifestOptions{Options: Options{Image: testImage}})
	require.ErrorContains(t, err, "Deployment bad: container \"c\" has no command")
	var after bytes.Buffer
	require.NoError(t, kio.ByteWriter{Writer: &after}.Write(nodes))
	assert.Equal(t, before.String(), after.String(), "the good Deployment is not wrapped either")

	_, _, err = Manifests(read(t, "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec: {replicas: three}\n"), ManifestOptions{Options: Options{Image: testImage}})
	require.ErrorContains(t, err, "Deployment x")
}

// TestManifestsAntreaController wraps the worked example of docs/run.md:
// antrea-controller's shape. Antrea itself is not run here.
func TestManifestsAntreaController(t *testing.T) {
	data, err := os.ReadFile("testdata/antrea-controller.yaml")
	require.NoError(t, err)
	out, done, err := Manifests(read(t, string(data)), ManifestOptions{Options: Options{Image: testImage}})
	require.NoError(t, err)
	require.Equal(t, []Wrapped{{Namespace: "kube-system", Name: "antrea-controller", Lease: "antrea-controller", Service: "antrea", ServiceFound: true, RollingUpdate: true}}, done)

	var dep appsv1.Deployment
	find(t, out, "Deployment", "antrea-controller", &dep)
	assert.Equal(t, int32(3), *dep.Spec.Replicas)
	assert.True(t, dep.Spec.Template.Spec.HostNetwork)
	assert.Equal(t, appsv1.RollingUpdateDeploymentStrategyType, dep.Spec.Strategy.Type, "Recreate would stop every standby with the leader")
	assert.Equal(t, int32(0), dep.Spec.Strategy.RollingUpdate.MaxSurge.IntVal)
	assert.Equal(t, int32(1), dep.Spec.Strategy.RollingUpdate.MaxUnavailable.IntVal)
	c := dep.Spec.Template.Spec.Containers[0]
	assert.Equal(t, []string{Binary, "--lease=antrea-controller", "--service=antrea",
		"--ready-http=https://localhost:10349/readyz", "--grace-period=25s", "--", "antrea-controller"}, c.Command,
		"the HTTPS probe on the named port, from inside the pod")
	assert.Len(t, c.Args, 4, "antrea's flags stay")
	assert.Contains(t, c.Ports, corev1.ContainerPort{Name: ProbePortName, ContainerPort: ProbePort, Protocol: corev1.ProtocolTCP},
		"declared: with hostNetwork the scheduler then keeps two replicas off one node")
	names := map[string]int{}
	for _, e := range c.Env {
		names[e.Name]++
	}
	for _, n := range []string{"POD_NAME", "POD_NAMESPACE", "NODE_NAME", "ANTREA_CONFIG_MAP_NAME", "POD_IP", "POD_IPS", "POD_UID", "CONTAINER_NAME"} {
		assert.Equal(t, 1, names[n], n)
	}
	assert.Len(t, c.VolumeMounts, 2)

	var svc corev1.Service
	find(t, out, "Service", "antrea", &svc)
	assert.Empty(t, svc.Spec.Selector)
	assert.Equal(t, "api", svc.Spec.Ports[0].TargetPort.StrVal, "the leader resolves the named port from its own Pod")
	var binding rbacv1.RoleBinding
	find(t, out, "RoleBinding", "fastover-run-antrea-controller", &binding)
	assert.Equal(t, "kube-system", binding.Namespace)
	assert.Equal(t, []rbacv1.Subject{{Kind: "ServiceAccount", Name: "antrea-controller", Namespace: "kube-system"}}, binding.Subjects)
}

func TestManifestsRefusesOtherWorkloads(t *testing.T) {
	for kind, doc := range map[string]string{
		"DaemonSet":   "apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {name: agent}\nspec: {template: {metadata: {annotations: {fastover.io/run-lease: a}}}}\n",
		"StatefulSet": "apiVersion: apps/v1\nkind: StatefulSet\nmetadata: {name: db}\nspec: {template: {metadata: {annotations: {fastover.io/run-lease: a}}}}\n",
		"CronJob":     "apiVersion: batch/v1\nkind: CronJob\nmetadata: {name: c}\nspec: {jobTemplate: {spec: {template: {metadata: {annotations: {fastover.io/run-lease: a}}}}}}\n",
		"Pod":         "apiVersion: v1\nkind: Pod\nmetadata: {name: p, annotations: {fastover.io/run-lease: a}}\n",
	} {
		_, _, err := Manifests(read(t, doc), ManifestOptions{Options: Options{Image: testImage}})
		require.ErrorContains(t, err, kind+" ", kind)
		assert.ErrorContains(t, err, "cannot be wrapped", kind)
	}
	// Without the annotation, they pass.
	_, done, err := Manifests(read(t, "apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {name: agent}\nspec: {template: {metadata: {annotations: {x: y}}}}\n"), ManifestOptions{Options: Options{Image: testImage}})
	require.NoError(t, err)
	assert.Empty(t, done)
}

func TestManifestsKeepsARollingUpdateAsWritten(t *testing.T) {
	data := `apiVersion: apps/v1
kind: Deployment
metadata: {name: op, namespace: ops}
spec:
  strategy: {type: RollingUpdate, rollingUpdate: {maxSurge: 25%}} # the user's
  template:
    metadata:
      annotations: {fastover.io/run-lease: op}
    spec:
      containers: [{name: c, image: i, command: [/op]}]
`
	out, done, err := Manifests(read(t, data), ManifestOptions{Options: Options{Image: testImage}})
	require.NoError(t, err)
	require.Len(t, done, 1)
	assert.False(t, done[0].RollingUpdate)
	var buf bytes.Buffer
	require.NoError(t, kio.ByteWriter{Writer: &buf}.Write(out))
	assert.Contains(t, buf.String(), "strategy: {type: RollingUpdate, rollingUpdate: {maxSurge: 25%}} # the user's")
}
