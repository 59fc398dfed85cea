package install

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/fastover/fastover/internal/cluster"
)

var crds = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// createGrace is how long after a CRD is Established the API server
// delays the creation of its objects, so that other API servers see the
// CRD too (apiextensions-apiserver's customresource handler;
// lastTransitionTime has a resolution of a second).
const createGrace = 2 * time.Second

// WaitCreateGrace waits until objects of CRDs Established at established
// are created without that delay.
func WaitCreateGrace(ctx context.Context, established time.Time) error {
	d := time.Until(established.Add(createGrace + 100*time.Millisecond))
	if d <= 0 {
		return nil
	}
	select {
	case <-time.After(d):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// PrometheusOperatorCRDDir is where `tests/tools/build.sh promcrds` puts the
// Prometheus Operator's PodMonitor and PrometheusRule CRDs, in the tools'
// directory (cluster.BinDir).
const PrometheusOperatorCRDDir = "prometheus-operator-crds"

// ApplyPrometheusOperatorCRDs applies those CRDs (as fieldManager) and
// returns once objects of their kinds can be created: the kinds the
// charts' and the kustomizations' monitoring render, which the API server
// then validates.
func ApplyPrometheusOperatorCRDs(ctx context.Context, cfg *rest.Config, fieldManager string) error {
	bin, err := cluster.BinDir()
	if err != nil {
		return err
	}
	dir := filepath.Join(bin, PrometheusOperatorCRDDir)
	if _, err := os.Stat(dir); err != nil {
		return fmt.Errorf("%w: run `tests/tools/build.sh promcrds` (or `make tools`) at the repository root", err)
	}
	established, err := ApplyCRDs(ctx, cfg, dir, fieldManager)
	if err != nil {
		return err
	}
	return WaitCreateGrace(ctx, established)
}

// ApplyCRDs applies (server-side, as fieldManager, forcing conflicts)
// every CRD of the YAML files in dir and waits until each is Established;
// it returns when the last one became Established (see WaitCreateGrace for
// what follows).
func ApplyCRDs(ctx context.Context, cfg *rest.Config, dir, fieldManager string) (time.Time, error) {
	var latest time.Time
	client, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return latest, err
	}
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return latest, err
	}
	if len(files) == 0 {
		return latest, fmt.Errorf("no CRDs in %s", dir)
	}
	sort.Strings(files)
	var names []string
	for _, file := range files {
		objs, err := decodeFile(file)
		if err != nil {
			return latest, err
		}
		for _, obj := range objs {
			if obj.GetKind() != "CustomResourceDefinition" {
				return latest, fmt.Errorf("%s: %s %s is not a CustomResourceDefinition", file, obj.GetKind(), obj.GetName())
			}
			_, err := client.Resource(crds).Apply(ctx, obj.GetName(), obj, metav1.ApplyOptions{FieldManager: fieldManager, Force: true})
			if err != nil {
				return latest, fmt.Errorf("apply CRD %s: %w", obj.GetName(), err)
			}
			names = append(names, obj.GetName())
		}
	}
	for _, name := range names {
		var last string
		err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			crd, err := client.Resource(crds).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				last = err.Error()
				return false, nil
			}
			cond := established(crd)
			if cond == nil {
				last = "no Established condition"
				return false, nil
			}
			last = fmt.Sprintf("Established=%v (%v: %v)", cond["status"], cond["reason"], cond["message"])
			if cond["status"] != "True" {
				return false, nil
			}
			if s, ok := cond["lastTransitionTime"].(string); ok {
				if at, err := time.Parse(time.RFC3339, s); err == nil && at.After(latest) {
					latest = at
				}
			}
			return true, nil
		})
		if err != nil {
			return latest, fmt.Errorf("CRD %s not Established (%s): %w", name, last, err)
		}
	}
	return latest, nil
}

// established is a CRD's Established condition, or nil.
func established(crd *unstructured.Unstructured) map[string]any {
	conds, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
	for _, c := range conds {
		if m, ok := c.(map[string]any); ok && m["type"] == "Established" {
			return m
		}
	}
	return nil
}

// decodeFile returns the objects of a YAML file of one or more documents.
func decodeFile(path string) ([]*unstructured.Unstructured, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	objs, err := Decode(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return objs, nil
}
