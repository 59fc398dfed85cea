package charts_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fastover/fastover/internal/cluster"
)

// TestHelmPostRendererWraps runs the pinned helm CLI, as a user does, on a
// chart of someone else's shape (a Service with a selector, a one-replica
// Deployment whose pod template is annotated fastover.io/run-lease), with
// charts/plugins/fastover-wrap installed as its post-renderer plugin and
// kubectl-fastover on the PATH.
func TestHelmPostRendererWraps(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	bin, err := cluster.BinDir()
	require.NoError(t, err)
	root, err := cluster.ModuleRoot()
	require.NoError(t, err)

	home := t.TempDir()
	plugins := filepath.Join(home, "plugins")
	require.NoError(t, os.MkdirAll(plugins, 0o755))
	require.NoError(t, os.Symlink(filepath.Join(root, "charts", "plugins", "fastover-wrap"), filepath.Join(plugins, "fastover-wrap")))
	path := filepath.Join(home, "path")
	require.NoError(t, os.MkdirAll(path, 0o755))
	require.NoError(t, os.Symlink(binary(t, "kubectl-fastover"), filepath.Join(path, "kubectl-fastover")))

	chart := filepath.Join(home, "chart")
	require.NoError(t, os.MkdirAll(filepath.Join(chart, "templates"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(chart, "Chart.yaml"), []byte("apiVersion: v2\nname: server\nversion: 0.1.0\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(chart, "templates", "server.yaml"), []byte(`apiVersion: v1
kind: Service
metadata: {name: {{ .Release.Name }}}
spec:
  selector: {app: {{ .Release.Name }}}
  ports: [{port: 80, targetPort: 8080}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: {{ .Release.Name }}}
spec:
  selector: {matchLabels: {app: {{ .Release.Name }}}}
  template:
    metadata:
      labels: {app: {{ .Release.Name }}}
      annotations:
        fastover.io/run-lease: {{ .Release.Name }}
        fastover.io/run-service: {{ .Release.Name }}
    spec:
      containers:
      - name: server
        image: example.com/server:v1
        command: [/server]
        readinessProbe: {tcpSocket: {port: 8080}}
`), 0o644))

	helm := func(args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, filepath.Join(bin, "helm"), args...)
		cmd.Env = append(os.Environ(),
			"HELM_PLUGINS="+plugins, "HELM_CONFIG_HOME="+filepath.Join(home, "config"),
			"HELM_CACHE_HOME="+filepath.Join(home, "cache"), "HELM_DATA_HOME="+filepath.Join(home, "data"),
			"PATH="+path+string(os.PathListSeparator)+os.Getenv("PATH"))
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := helm("template", "shop-api", chart, "--namespace", "shop", "--post-renderer", "fastover-wrap")
	require.NoError(t, err, out)
	assert.Contains(t, out, "- /fastover/fastover-run")
	assert.Contains(t, out, "- --ready-tcp=127.0.0.1:8080")
	assert.Contains(t, out, "name: fastover-run-shop-api")
	assert.Contains(t, out, "kind: RoleBinding")
	assert.NotContains(t, out, "selector: {app: shop-api}")

	// A chart the wrapper cannot wrap: helm fails, but helm 4.3 drops a
	// post-renderer's standard error (its subprocess runtime keeps it in a
	// buffer it never prints, even with --debug); the same pipeline by hand
	// gives the reason.
	require.NoError(t, os.WriteFile(filepath.Join(chart, "templates", "server.yaml"), []byte(strings.Replace(
		mustRead(t, filepath.Join(chart, "templates", "server.yaml")), "command: [/server]", "args: [--x]", 1)), 0o644))
	out, err = helm("template", "shop-api", chart, "--post-renderer", "fastover-wrap")
	require.Error(t, err)
	assert.Contains(t, out, `plugin "fastover-wrap" exited with error`)
	rendered, err := helm("template", "shop-api", chart)
	require.NoError(t, err, rendered)
	wrap := exec.CommandContext(ctx, binary(t, "kubectl-fastover"), "wrap")
	wrap.Stdin = strings.NewReader(rendered)
	msg, err := wrap.CombinedOutput()
	require.Error(t, err)
	assert.Contains(t, string(msg), `Deployment shop-api: container "server" has no command`)
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return string(b)
}
