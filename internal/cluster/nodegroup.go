package cluster

import (
	"context"
	"fmt"
	"path/filepath"
	"sort"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/wait"
)

// NodeGroupLabel names the group of a node that AddNodeGroup added: the
// label its kwok process selects the nodes it manages by.
const NodeGroupLabel = "fastover.io/kwok-group"

// maxNodeGroups bounds the groups of an Env: group g's pods get their
// addresses from 10.(100+g).0.0/16, below the single nodes' 10.244.i.0/24.
const maxNodeGroups = 100

// nodeGroup is one kwok process and the nodes it plays the kubelet of.
type nodeGroup struct {
	proc  *Process
	nodes []string
}

// AddNodeGroup creates the named Nodes, labelled NodeGroupLabel=group and
// with nodeLabels (a zone's, say), and starts one kwok process that plays
// the kubelet of all of them; it waits until every one is Ready. A
// hundred nodes cost one process, where AddNode starts one per node (at
// most 250): the shape for many nodes. StopNodeGroup loses them at once.
func (e *Env) AddNodeGroup(ctx context.Context, group string, nodeLabels map[string]string, names ...string) error {
	if len(names) == 0 {
		return fmt.Errorf("node group %s: no nodes", group)
	}
	if errs := validation.IsValidLabelValue(group); len(errs) > 0 {
		return fmt.Errorf("node group %q: not a label value: %v", group, errs)
	}
	e.mu.Lock()
	if e.groups == nil {
		e.groups = map[string]*nodeGroup{}
	}
	_, dup := e.groups[group]
	index := len(e.groups) + 1
	if !dup {
		e.groups[group] = &nodeGroup{} // reserved; filled below
	}
	e.mu.Unlock()
	if dup {
		return fmt.Errorf("node group %s already added", group)
	}
	if index > maxNodeGroups {
		return fmt.Errorf("at most %d node groups, not %d", maxNodeGroups, index)
	}
	stages, err := filepath.Glob(filepath.Join(e.bin, stagesDir, "*.yaml"))
	if err != nil || len(stages) == 0 {
		return fmt.Errorf("no kwok stage files in %s: run `make tools`", filepath.Join(e.bin, stagesDir))
	}
	sort.Strings(stages)

	for _, name := range names {
		l := map[string]string{
			corev1.LabelHostname: name,
			corev1.LabelOSStable: "linux",
			"type":               "kwok",
			NodeGroupLabel:       group,
		}
		for k, v := range nodeLabels {
			l[k] = v
		}
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{
			Name:   name,
			Labels: l,
			Annotations: map[string]string{
				"kwok.x-k8s.io/node":           "fake",
				"node.alpha.kubernetes.io/ttl": "0",
			},
		}}
		if _, err := e.Client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("node group %s: create node %s: %w", group, name, err)
		}
	}

	args := []string{
		"--kubeconfig=" + e.Kubeconfig,
		"--manage-all-nodes=false",
		"--manage-nodes-with-label-selector=" + NodeGroupLabel + "=" + group,
		fmt.Sprintf("--node-lease-duration-seconds=%d", nodeLeaseSeconds),
		fmt.Sprintf("--cidr=10.%d.0.0/16", 100+index),
		fmt.Sprintf("--node-ip=10.242.%d.1", index),
	}
	for _, s := range stages {
		args = append(args, "--config="+s)
	}
	p := e.newProcess("kwok-group-"+group, filepath.Join(e.bin, binKwok), args...)
	e.mu.Lock()
	e.groups[group] = &nodeGroup{proc: p, nodes: append([]string(nil), names...)}
	e.mu.Unlock()
	if err := p.Start(); err != nil {
		return err
	}
	return e.waitGroupReady(ctx, group, len(names))
}

// StopNodeGroup makes every node of the group vanish at once: its kwok
// process is killed with SIGKILL, so no node of it renews its Lease or
// status again. The Node objects stay.
func (e *Env) StopNodeGroup(group string) error {
	g, err := e.group(group)
	if err != nil {
		return err
	}
	g.proc.Stop(syscall.SIGKILL, 0)
	return nil
}

// StartNodeGroup brings a stopped group back and waits until its nodes are
// Ready again.
func (e *Env) StartNodeGroup(ctx context.Context, group string) error {
	g, err := e.group(group)
	if err != nil {
		return err
	}
	if err := g.proc.Start(); err != nil {
		return err
	}
	return e.waitGroupReady(ctx, group, len(g.nodes))
}

// NodeGroup returns the names of the group's nodes, in the order given.
func (e *Env) NodeGroup(group string) ([]string, error) {
	g, err := e.group(group)
	if err != nil {
		return nil, err
	}
	return append([]string(nil), g.nodes...), nil
}

func (e *Env) group(name string) (*nodeGroup, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	g, ok := e.groups[name]
	if !ok || g.proc == nil {
		return nil, fmt.Errorf("no node group %q", name)
	}
	return g, nil
}

// waitGroupReady waits until n nodes of the group are Ready, within the
// Env's timeout (a minute more for a large group).
func (e *Env) waitGroupReady(ctx context.Context, group string, n int) error {
	sel := labels.SelectorFromSet(labels.Set{NodeGroupLabel: group}).String()
	timeout := e.opts.Timeout + time.Duration(n)*600*time.Millisecond
	var ready int
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		l, err := e.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: sel})
		if err != nil {
			return false, nil
		}
		ready = 0
		for i := range l.Items {
			if NodeReady(&l.Items[i]) == corev1.ConditionTrue {
				ready++
			}
		}
		return ready == n, nil
	})
	if err != nil {
		return fmt.Errorf("node group %s: %d of %d nodes Ready after %v: %w", group, ready, n, timeout, err)
	}
	return nil
}
