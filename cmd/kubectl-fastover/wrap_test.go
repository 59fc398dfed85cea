package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/fastover/fastover/internal/runwrap"
)

// asPlugin makes this test binary kubectl-fastover itself, for kustomize's
// exec function in TestComponentWrapsADeployment.
const asPlugin = "FASTOVER_TEST_AS_KUBECTL_FASTOVER"

func TestMain(m *testing.M) {
	if os.Getenv(asPlugin) == "1" {
		os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

const deployment = `apiVersion: v1
kind: Service
metadata: {name: api, namespace: ctl}
spec: {selector: {app: api}, ports: [{port: 443, targetPort: 8443}]}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: api, namespace: ctl}
spec:
  selector: {matchLabels: {app: api}}
  template:
    metadata:
      labels: {app: api}
      annotations: {fastover.io/run-lease: api, fastover.io/run-service: api}
    spec:
      containers:
      - name: api
        image: example.com/api:v1
        command: [/api]
        readinessProbe: {httpGet: {scheme: HTTPS, path: /readyz, port: 8443}}
`

func wrapCmd(t *testing.T, stdin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errb bytes.Buffer
	cmd := newRootCommand(&out, &errb)
	cmd.SetArgs(append([]string{"wrap"}, args...))
	cmd.SetIn(strings.NewReader(stdin))
	if err := cmd.ExecuteContext(context.Background()); err != nil {
		return out.String(), err.Error(), exitError
	}
	return out.String(), errb.String(), exitOK
}

func TestWrapAStream(t *testing.T) {
	out, log, code := wrapCmd(t, deployment, "--image=registry.example/fastover-run:v9", "--replicas=2")
	require.Equal(t, exitOK, code, log)
	assert.Contains(t, log, "wrapped Deployment ctl/api: Lease api, Service api without its selector")
	assert.Contains(t, out, "- --ready-http=https://127.0.0.1:8443/readyz")
	assert.Contains(t, out, "image: registry.example/fastover-run:v9")
	assert.Contains(t, out, "replicas: 2")
	assert.Contains(t, out, "kind: RoleBinding")
	assert.NotContains(t, out, "selector: {app: api}")
	assert.False(t, strings.HasPrefix(out, "apiVersion: config.kubernetes.io/v1"), "a stream stays a stream")

	// Wrapping the output again changes nothing.
	again, log, code := wrapCmd(t, out)
	require.Equal(t, exitOK, code, log)
	assert.Equal(t, out, again)
	assert.Empty(t, log)
}

func TestWrapAResourceList(t *testing.T) {
	in := "apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems:\n"
	for _, doc := range strings.Split(deployment, "---\n") {
		in += "- " + strings.ReplaceAll(strings.TrimSuffix(doc, "\n"), "\n", "\n  ") + "\n"
	}
	out, log, code := wrapCmd(t, in)
	require.Equal(t, exitOK, code, log)
	assert.True(t, strings.HasPrefix(out, "apiVersion: config.kubernetes.io/v1\nkind: ResourceList\n"), out)
	assert.Contains(t, out, "- /fastover/fastover-run")
	assert.Contains(t, out, "name: fastover-run-api")
}

func TestWrapBadInput(t *testing.T) {
	for _, tc := range []struct {
		in   string
		args []string
		want string
	}{
		{deployment, []string{"--replicas=1"}, "--replicas=1: want 2 or more"},
		{strings.Replace(deployment, "command: [/api]", "args: [--x]", 1), nil, `container "api" has no command`},
		{strings.Replace(deployment, "run-lease: api", "run-lease: API!", 1), nil, "fastover.io/run-lease"},
		{"kind: [", nil, "reading the manifests"},
		{"- ", nil, "reading the manifests"},
		{deployment, []string{"-f", "/does/not/exist"}, "no such file"},
	} {
		out, msg, code := wrapCmd(t, tc.in, tc.args...)
		assert.Equal(t, exitError, code, tc.want)
		assert.Contains(t, msg, tc.want)
		assert.Empty(t, out, "nothing written on error")
	}
}

// TestComponentWrapsADeployment builds a kustomization that uses
// manifests/components/fastover-run, as kustomize does with exec functions
// on: kustomize runs kubectl-fastover (this test binary) on the PATH.
func TestComponentWrapsADeployment(t *testing.T) {
	self, err := os.Executable()
	require.NoError(t, err)
	bin := t.TempDir()
	require.NoError(t, os.Symlink(self, filepath.Join(bin, "kubectl-fastover")))
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	t.Setenv(asPlugin, "1")

	component, err := filepath.Abs("../../manifests/components/fastover-run")
	require.NoError(t, err)
	dir := t.TempDir()
	rel, err := filepath.Rel(dir, component)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "app.yaml"), []byte(deployment), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "kustomization.yaml"),
		[]byte("resources: [app.yaml]\ncomponents: ["+rel+"]\n"), 0o644))

	opts := krusty.MakeDefaultOptions()
	opts.PluginConfig = types.MakePluginConfig(types.PluginRestrictionsNone, types.BploUseStaticallyLinked)
	opts.PluginConfig.FnpLoadingOptions.EnableExec = true
	res, err := krusty.MakeKustomizer(opts).Run(filesys.MakeFsOnDisk(), dir)
	require.NoError(t, err)
	out, err := res.AsYaml()
	require.NoError(t, err)
	assert.Contains(t, string(out), "- "+runwrap.Binary)
	assert.Contains(t, string(out), "kind: Role\n")
	assert.NotContains(t, string(out), "app: api\n  ports", "the Service's selector is gone")

	// Without exec functions kustomize refuses, and says so.
	_, err = krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	require.Error(t, err)
}
