package charts_test

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	"github.com/fastover/fastover/tests/charts"
)

var update = flag.Bool("update", false, "TestMonitoringComponents: rewrite the kustomize components' copies of the charts' monitoring objects")

// TestMonitoringComponents: the kustomize components' monitoring objects
// (manifests/components/monitoring, example-monitoring) are the charts'
// render, without the labels helm adds. After a change to the charts,
// rewrite them with
//
//	cd tests/charts && GOWORK=off go test -run TestMonitoringComponents -update .
func TestMonitoringComponents(t *testing.T) {
	monitoring := []string{"monitoring.podMonitor.enabled=true", "monitoring.prometheusRule.enabled=true", "monitoring.dashboard.enabled=true"}
	for _, c := range []struct {
		file, chart, ns, kind, name string
		sets                        []string
	}{
		{"monitoring/podmonitor.yaml", charts.Webhook, "fastover-system", "PodMonitor", "fastover", monitoring},
		{"monitoring/prometheusrule.yaml", charts.Webhook, "fastover-system", "PrometheusRule", "fastover", monitoring},
		{"monitoring/dashboard.yaml", charts.Webhook, "fastover-system", "ConfigMap", "fastover-dashboard", monitoring},
		{"example-monitoring/podmonitor.yaml", charts.Example, "fastover-example", "PodMonitor", "fastover-example", []string{"podMonitor.enabled=true"}},
	} {
		t.Run(c.file, func(t *testing.T) {
			o := charts.Find(render(t, c.chart, c.ns, c.sets...), c.kind, c.name)
			require.NotNil(t, o, "%s renders no %s %s", c.chart, c.kind, c.name)
			labels := o.GetLabels()
			for _, l := range charts.HelmLabels {
				delete(labels, l)
			}
			o.SetLabels(labels)
			body, err := yaml.Marshal(o.Object)
			require.NoError(t, err)
			want := append([]byte("# The "+c.kind+" charts/"+c.chart+" renders with "+strings.Join(c.sets, " ")+",\n"+
				"# without helm's labels (TestMonitoringComponents; -update rewrites it).\n"), body...)
			path := filepath.Join(repoRoot(t), "manifests", "components", c.file)
			if *update {
				require.NoError(t, os.WriteFile(path, want, 0o644))
				return
			}
			got, err := os.ReadFile(path)
			require.NoError(t, err)
			assert.Equal(t, string(want), string(got), "%s is not the chart's render: go test -run TestMonitoringComponents -update", path)
		})
	}
}
