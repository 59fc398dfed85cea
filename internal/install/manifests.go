package install

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"github.com/fastover/fastover/internal/cluster"
)

// FieldManager is the field manager of the objects Apply writes.
const FieldManager = "fastover-install"

// Dir returns the manifests/ directory of the fastover module.
func Dir() (string, error) {
	root, err := cluster.ModuleRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, "manifests"), nil
}

// Kustomizations lists, relative to dir, every directory under dir that
// holds a kustomization.yaml ("." for dir itself), sorted; components
// (kind: Component) are left out, as they build only within another.
func Kustomizations(dir string) ([]string, error) {
	var out []string
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() || d.Name() != "kustomization.yaml" {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		var k struct {
			Kind string `json:"kind"`
		}
		if err := yaml.Unmarshal(data, &k); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		if k.Kind == "Component" {
			return nil
		}
		rel, err := filepath.Rel(dir, filepath.Dir(path))
		if err != nil {
			return err
		}
		out = append(out, rel)
		return nil
	})
	sort.Strings(out)
	return out, err
}

// Render builds the kustomization in dir, as `kubectl kustomize dir`.
func Render(dir string) ([]*unstructured.Unstructured, error) {
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	res, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return nil, fmt.Errorf("kustomize %s: %w", dir, err)
	}
	objs := make([]*unstructured.Unstructured, 0, res.Size())
	for _, r := range res.Resources() {
		// Through JSON, so that numbers are int64 and float64 as
		// everywhere else in apimachinery (kustomize's maps hold ints).
		data, err := r.MarshalJSON()
		if err != nil {
			return nil, fmt.Errorf("kustomize %s: %s: %w", dir, r.CurId(), err)
		}
		o := &unstructured.Unstructured{}
		if err := o.UnmarshalJSON(data); err != nil {
			return nil, fmt.Errorf("kustomize %s: %s: %w", dir, r.CurId(), err)
		}
		objs = append(objs, o)
	}
	return objs, nil
}

// Decode returns the objects of a YAML (or JSON) stream of one or more
// documents, empty documents left out.
func Decode(r io.Reader) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(r, 64<<10)
	var objs []*unstructured.Unstructured
	for {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return objs, nil
			}
			return nil, err
		}
		if len(m) == 0 {
			continue // an empty document
		}
		objs = append(objs, &unstructured.Unstructured{Object: m})
	}
}

// Find returns the object of the given kind and name in objs, or nil.
func Find(objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	return nil
}

// Applier applies objects server-side.
type Applier struct {
	dyn    dynamic.Interface
	mapper *restmapper.DeferredDiscoveryRESTMapper
	warn   *warnings
}

// NewApplier returns an Applier for the cluster of cfg. It records every
// warning the API server sends on its requests.
func NewApplier(cfg *rest.Config) (*Applier, error) {
	w := &warnings{}
	cfg = rest.CopyConfig(cfg)
	cfg.WarningHandler = w
	disc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &Applier{
		dyn:    dyn,
		mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disc)),
		warn:   w,
	}, nil
}

// ApplyOptions change how Apply writes.
type ApplyOptions struct {
	// DryRun asks the API server to validate and admit the objects
	// without storing them.
	DryRun bool
}

// Result is what the API server said to one Apply.
type Result struct {
	// Warnings are the API server's warnings, as "Kind/name: text".
	Warnings []string
}

// Apply applies objs in order, server-side, with force (as `kubectl apply
// --server-side --force-conflicts`). It stops at the first object the API
// server rejects and says which.
func (a *Applier) Apply(ctx context.Context, objs []*unstructured.Unstructured, opts ApplyOptions) (Result, error) {
	var res Result
	for _, o := range objs {
		client, err := a.resource(o)
		if err != nil {
			return res, err
		}
		ao := metav1.ApplyOptions{FieldManager: FieldManager, Force: true}
		if opts.DryRun {
			ao.DryRun = []string{metav1.DryRunAll}
		}
		a.warn.take()
		_, err = client.Apply(ctx, o.GetName(), o, ao)
		for _, w := range a.warn.take() {
			res.Warnings = append(res.Warnings, fmt.Sprintf("%s/%s: %s", o.GetKind(), o.GetName(), w))
		}
		if err != nil {
			return res, fmt.Errorf("apply %s %s: %w", o.GetKind(), objectName(o), err)
		}
	}
	return res, nil
}

// resource returns the dynamic client of o's resource, rediscovering the
// API once if its kind is new (a CRD installed since the last lookup).
func (a *Applier) resource(o *unstructured.Unstructured) (dynamic.ResourceInterface, error) {
	gvk := o.GroupVersionKind()
	m, err := a.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if meta.IsNoMatchError(err) {
		a.mapper.Reset()
		m, err = a.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	}
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", gvk, objectName(o), err)
	}
	if m.Scope.Name() == meta.RESTScopeNameNamespace {
		if o.GetNamespace() == "" {
			return nil, fmt.Errorf("%s %s: namespaced, but no namespace is set", gvk.Kind, o.GetName())
		}
		return a.dyn.Resource(m.Resource).Namespace(o.GetNamespace()), nil
	}
	return a.dyn.Resource(m.Resource), nil
}

func objectName(o *unstructured.Unstructured) string {
	if ns := o.GetNamespace(); ns != "" {
		return ns + "/" + o.GetName()
	}
	return o.GetName()
}

// warnings collects the API server's warning headers.
type warnings struct {
	mu   sync.Mutex
	list []string
}

func (w *warnings) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.list = append(w.list, text)
}

func (w *warnings) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	l := w.list
	w.list = nil
	return l
}

// ErrNoObjects is returned by ApplyDir for a kustomization that renders
// nothing.
var ErrNoObjects = errors.New("renders no objects")

// ApplyDir renders the kustomization in dir and applies it.
func (a *Applier) ApplyDir(ctx context.Context, dir string, opts ApplyOptions) (Result, error) {
	objs, err := Render(dir)
	if err != nil {
		return Result{}, err
	}
	if len(objs) == 0 {
		return Result{}, fmt.Errorf("%s: %w", dir, ErrNoObjects)
	}
	return a.Apply(ctx, objs, opts)
}

// String lists the warnings, one per line.
func (r Result) String() string { return strings.Join(r.Warnings, "\n") }
