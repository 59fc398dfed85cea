// Package charts loads, lints and renders fastover's Helm charts (charts/)
// with helm's Go SDK, for the tests of this module: no helm binary is
// needed. It is a module of its own so that helm's dependencies stay out of
// fastover's go.mod.
package charts

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"sort"
	"strings"

	"helm.sh/helm/v4/pkg/chart/common"
	"helm.sh/helm/v4/pkg/chart/common/util"
	chartv2 "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/engine"
	"helm.sh/helm/v4/pkg/strvals"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/fastover/fastover/internal/cluster"
)

// The charts.
const (
	Webhook = "fastover"
	Example = "fastover-example"
)

// Dir returns the directory of a chart of the fastover repository.
func Dir(chart string) (string, error) {
	root, err := cluster.ModuleRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, "charts", chart), nil
}

// Load loads a chart of the repository.
func Load(chart string) (*chartv2.Chart, error) {
	dir, err := Dir(chart)
	if err != nil {
		return nil, err
	}
	ch, err := loader.Load(dir)
	if err != nil {
		return nil, fmt.Errorf("load chart %s: %w", dir, err)
	}
	return ch, nil
}

// Values parses --set style assignments ("a.b=1", as `helm install --set`)
// into values.
func Values(sets ...string) (map[string]any, error) {
	vals := map[string]any{}
	for _, s := range sets {
		if err := strvals.ParseInto(s, vals); err != nil {
			return nil, fmt.Errorf("--set %s: %w", s, err)
		}
	}
	return vals, nil
}

// Release names the release a chart is rendered for.
type Release struct {
	Name      string
	Namespace string
	Upgrade   bool
}

// Render renders the chart with the values (validated against its schema,
// as helm install does) and returns its objects in the order helm installs
// them, each with its namespace set if the chart left it out.
func Render(ch *chartv2.Chart, rel Release, vals map[string]any) ([]*unstructured.Unstructured, error) {
	caps := common.DefaultCapabilities.Copy()
	opts := common.ReleaseOptions{Name: rel.Name, Namespace: rel.Namespace, Revision: 1, IsInstall: !rel.Upgrade, IsUpgrade: rel.Upgrade}
	top, err := util.ToRenderValuesWithSchemaValidation(ch, vals, opts, caps, false)
	if err != nil {
		return nil, fmt.Errorf("chart %s: %w", ch.Name(), err)
	}
	files, err := engine.Render(ch, top)
	if err != nil {
		return nil, fmt.Errorf("chart %s: %w", ch.Name(), err)
	}
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	sort.Strings(names)
	var objs []*unstructured.Unstructured
	for _, name := range names {
		if !strings.HasSuffix(name, ".yaml") || strings.HasSuffix(name, "NOTES.txt") {
			continue
		}
		docs := utilyaml.NewYAMLReader(bufio.NewReader(strings.NewReader(files[name])))
		for {
			doc, err := docs.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return nil, fmt.Errorf("chart %s: %s: %w", ch.Name(), name, err)
			}
			// Through JSON, so that numbers are int64 and float64 as in
			// apimachinery (and in internal/install's kustomize renders).
			data, err := yaml.YAMLToJSON(doc)
			if err != nil {
				return nil, fmt.Errorf("chart %s: %s: %w", ch.Name(), name, err)
			}
			if trimmed := bytes.TrimSpace(data); len(trimmed) == 0 || string(trimmed) == "null" {
				continue
			}
			o := &unstructured.Unstructured{}
			if err := o.UnmarshalJSON(data); err != nil {
				return nil, fmt.Errorf("chart %s: %s: %w", ch.Name(), name, err)
			}
			objs = append(objs, o)
		}
	}
	sort.SliceStable(objs, func(i, j int) bool { return installRank(objs[i]) < installRank(objs[j]) })
	return objs, nil
}

// installOrder is the order in which helm installs kinds (the ones fastover's
// charts use); other kinds come last.
var installOrder = []string{
	"Namespace", "PriorityClass", "ServiceAccount", "Secret", "ClusterRole", "ClusterRoleBinding",
	"Role", "RoleBinding", "Service", "Deployment", "PodDisruptionBudget",
	"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding",
	"Issuer", "Certificate", "MutatingWebhookConfiguration",
}

func installRank(o *unstructured.Unstructured) int {
	for i, k := range installOrder {
		if o.GetKind() == k {
			return i
		}
	}
	return len(installOrder)
}

// HelmLabels are the labels the charts add to what the kustomizations
// label (app.kubernetes.io/part-of and the objects' own).
var HelmLabels = []string{
	"app.kubernetes.io/managed-by", "app.kubernetes.io/instance", "app.kubernetes.io/version", "helm.sh/chart",
}

// Find returns the object of the given kind and name, or nil.
func Find(objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	return nil
}

// Without returns objs without those of the given kinds.
func Without(objs []*unstructured.Unstructured, kinds ...string) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
next:
	for _, o := range objs {
		for _, k := range kinds {
			if o.GetKind() == k {
				continue next
			}
		}
		out = append(out, o)
	}
	return out
}
