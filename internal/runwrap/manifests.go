package runwrap

import (
	"encoding/json"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/kustomize/kyaml/yaml"

	"github.com/fastover/fastover/leader"
)

// ManifestOptions are Manifests' options.
type ManifestOptions struct {
	Options
	// Replicas is set on a wrapped Deployment that has fewer than 2 (a
	// single replica has no standby); 0 means 3.
	Replicas int32
}

// Wrapped is one Deployment Manifests wrapped, and what it did for it.
type Wrapped struct {
	Namespace, Name, Lease, Service string
	// ServiceFound says whether the Service was in the stream (its
	// selector is then removed); if not, the user must create it without
	// a selector.
	ServiceFound bool
	// RollingUpdate says whether its Recreate strategy was made a rolling
	// update (maxUnavailable 1, maxSurge 0).
	RollingUpdate bool
}

// Manifests rewrites the Deployments of a stream whose pod template asks
// for fastover-run (Wanted), in place: the pod template (PodSpec) and the
// replicas; it removes the selector of the Service each names, and adds a
// Role (leader.PolicyRules) and a RoleBinding for the pod's
// ServiceAccount, named fastover-run-<lease>. Other objects are left as
// they are. On error nothing is changed.
func Manifests(nodes []*yaml.RNode, opts ManifestOptions) (out []*yaml.RNode, done []Wrapped, err error) {
	for i, n := range nodes {
		if !wellFormed(n.YNode()) {
			return nil, nil, fmt.Errorf("manifest %d is not a well-formed object", i+1)
		}
	}
	if opts.Replicas == 0 {
		opts.Replicas = 3
	}
	type change struct {
		node     *yaml.RNode
		dep      *appsv1.Deployment
		recreate bool // its strategy was Recreate, now a rolling update
	}
	var changes []change
	var rbac []*yaml.RNode
	for _, n := range nodes {
		if err := refuseOther(n); err != nil {
			return nil, nil, err
		}
		if n.GetApiVersion() != "apps/v1" || n.GetKind() != "Deployment" {
			continue
		}
		dep := &appsv1.Deployment{}
		if err := decode(n, dep); err != nil {
			return nil, nil, fmt.Errorf("wrapping Deployment %s: %w", n.GetName(), err)
		}
		t := &dep.Spec.Template
		s, err := wrapPod(&t.ObjectMeta, &t.Spec, opts.Options)
		if err != nil {
			return nil, nil, fmt.Errorf("wrapping Deployment %s: %w", dep.Name, err)
		}
		if s == nil {
			continue
		}
		if dep.Spec.Replicas == nil || *dep.Spec.Replicas < 2 {
			dep.Spec.Replicas = &opts.Replicas
		}
		// Recreate stops every replica before it starts the new ones: a
		// rollout without a standby. A rolling update replaces one replica
		// at a time and hands the Lease over; no surge, so that a
		// hostNetwork pod never needs a node more than it has.
		recreate := dep.Spec.Strategy.Type == appsv1.RecreateDeploymentStrategyType
		if recreate {
			zero, one := intstr.FromInt32(0), intstr.FromInt32(1)
			dep.Spec.Strategy = appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDeployment{MaxUnavailable: &one, MaxSurge: &zero}}
		}
		w := Wrapped{Namespace: dep.Namespace, Name: dep.Name, Lease: s.lease, Service: s.service, RollingUpdate: recreate}
		objs, err := roleFor(dep.Namespace, *s, t.Spec.ServiceAccountName)
		if err != nil {
			return nil, nil, err
		}
		rbac = append(rbac, objs...)
		changes = append(changes, change{n, dep, recreate})
		done = append(done, w)
	}
	var selectors []*yaml.RNode
	for i, w := range done {
		if w.Service == "" {
			continue
		}
		for _, n := range nodes {
			if n.GetApiVersion() != "v1" || n.GetKind() != "Service" || n.GetName() != w.Service {
				continue
			}
			if n.GetNamespace() == w.Namespace {
				done[i].ServiceFound = true
				selectors = append(selectors, n)
			}
		}
	}

	// Nothing can fail from here on but encoding typed objects, which is
	// done before any node changes. Only spec.template, spec.replicas and
	// a Recreate spec.strategy are replaced, so that the rest of each
	// Deployment (comments, order, fields unknown to this build's types)
	// stays as written.
	type edit struct {
		spec                    *yaml.RNode
		template, rep, strategy *yaml.RNode
	}
	edits := make([]edit, 0, len(changes))
	for _, c := range changes {
		t, err := encode(&c.dep.Spec.Template)
		if err != nil {
			return nil, nil, err
		}
		clean(t)
		spec, err := c.node.Pipe(yaml.LookupCreate(yaml.MappingNode, "spec"))
		if err != nil {
			return nil, nil, fmt.Errorf("wrapping Deployment %s: %w", c.dep.Name, err)
		}
		e := edit{spec: spec, template: t, rep: replicas(*c.dep.Spec.Replicas)}
		if c.recreate {
			if e.strategy, err = encode(&c.dep.Spec.Strategy); err != nil {
				return nil, nil, err
			}
		}
		edits = append(edits, e)
	}
	for _, e := range edits {
		_ = e.spec.PipeE(yaml.SetField("template", e.template))
		_ = e.spec.PipeE(yaml.SetField("replicas", e.rep))
		if e.strategy != nil {
			_ = e.spec.PipeE(yaml.SetField("strategy", e.strategy))
		}
	}
	for _, n := range selectors {
		if spec := n.Field("spec"); spec != nil {
			_ = spec.Value.PipeE(yaml.Clear("selector"))
		}
	}
	return append(nodes, rbac...), done, nil
}

// roleFor returns the Role and RoleBinding of a wrapped Deployment, in
// its namespace as the manifests give it. With none (a Helm release's),
// the objects and the subject are in the namespace they are applied to:
// a RoleBinding's ServiceAccount without a namespace is in the binding's.
func roleFor(ns string, s settings, serviceAccount string) ([]*yaml.RNode, error) {
	if serviceAccount == "" {
		serviceAccount = "default"
	}
	var ep *leader.EndpointConfig
	if s.service != "" {
		ep = &leader.EndpointConfig{Service: s.service}
	}
	meta := metav1.ObjectMeta{Name: "fastover-run-" + s.lease, Namespace: ns, Labels: map[string]string{"app.kubernetes.io/managed-by": "fastover-run"}}
	role := &rbacv1.Role{
		TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "Role"},
		ObjectMeta: meta,
		Rules:      leader.PolicyRules(ep),
	}
	binding := &rbacv1.RoleBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "RoleBinding"},
		ObjectMeta: meta,
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: meta.Name},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: serviceAccount, Namespace: ns}},
	}
	var out []*yaml.RNode
	for _, o := range []any{role, binding} {
		n, err := encode(o)
		if err != nil {
			return nil, err
		}
		clean(n)
		out = append(out, n)
	}
	return out, nil
}

func decode(n *yaml.RNode, into any) error {
	j, err := n.MarshalJSON()
	if err != nil {
		return err
	}
	return json.Unmarshal(j, into)
}

func encode(o any) (*yaml.RNode, error) {
	j, err := json.Marshal(o)
	if err != nil {
		return nil, err
	}
	n := yaml.NewRNode(nil)
	if err := n.UnmarshalJSON(j); err != nil {
		return nil, err
	}
	return n, nil
}

// clean drops what encoding a typed object adds and nobody wrote: an
// empty status, a null creation timestamp.
func clean(n *yaml.RNode) {
	_ = n.PipeE(yaml.Clear("status"))
	if m, err := n.Pipe(yaml.Lookup("metadata")); err == nil && m != nil {
		_ = m.PipeE(yaml.Clear("creationTimestamp"))
	}
}

func replicas(n int32) *yaml.RNode {
	r := yaml.NewScalarRNode(fmt.Sprint(n))
	r.YNode().Tag = yaml.NodeTagInt
	return r
}

// wellFormed says whether a node is a mapping whose every mapping, at any
// depth, holds key-value pairs, and whose metadata, labels and annotations
// are mappings where given: kyaml's accessors (and its writer) index past
// the end of one that is not (a document like "- ", or "metadata: [x]").
func wellFormed(n *yaml.Node) bool {
	if n == nil {
		return false
	}
	if n.Kind == yaml.DocumentNode {
		return len(n.Content) == 1 && wellFormed(n.Content[0])
	}
	if n.Kind != yaml.MappingNode || !wellFormedBelow(n) {
		return false
	}
	meta := mapValue(n, "metadata")
	if !mappingOrNull(meta) {
		return false
	}
	return meta == nil || (mappingOrNull(mapValue(meta, "labels")) && mappingOrNull(mapValue(meta, "annotations")))
}

// mapValue returns the value of key in a mapping node, or nil.
func mapValue(m *yaml.Node, key string) *yaml.Node {
	if m.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

// mappingOrNull says whether n is absent, a mapping, or null.
func mappingOrNull(n *yaml.Node) bool {
	return n == nil || n.Kind == yaml.MappingNode || (n.Kind == yaml.ScalarNode && n.Tag == yaml.NodeTagNull)
}

func wellFormedBelow(n *yaml.Node) bool {
	if n.Kind == yaml.MappingNode && len(n.Content)%2 != 0 {
		return false
	}
	for _, c := range n.Content {
		if c == nil || !wellFormedBelow(c) {
			return false
		}
	}
	return true
}

// podTemplateAnnotations are where each kind other than a Deployment keeps
// its pods' annotations.
var podTemplateAnnotations = map[string][]string{
	"StatefulSet": {"spec", "template", "metadata", "annotations"},
	"DaemonSet":   {"spec", "template", "metadata", "annotations"},
	"ReplicaSet":  {"spec", "template", "metadata", "annotations"},
	"Job":         {"spec", "template", "metadata", "annotations"},
	"CronJob":     {"spec", "jobTemplate", "spec", "template", "metadata", "annotations"},
	"Pod":         {"metadata", "annotations"},
}

// refuseOther returns an error for a workload other than a Deployment whose
// pods ask for fastover-run, rather than pass it on unwrapped as if all
// were well.
func refuseOther(n *yaml.RNode) error {
	path, ok := podTemplateAnnotations[n.GetKind()]
	if !ok {
		return nil
	}
	a, err := n.Pipe(yaml.Lookup(path...))
	if err != nil || a == nil || a.Field(AnnotationLease) == nil {
		return nil
	}
	why := "wrap Deployments only"
	if n.GetKind() == "DaemonSet" {
		why = "a DaemonSet runs on every node, and fastover-run lets one replica run COMMAND"
	}
	return fmt.Errorf("%s %s asks for fastover-run (%s), but it cannot be wrapped: %s", n.GetKind(), n.GetName(), AnnotationLease, why)
}
