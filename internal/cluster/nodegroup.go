package cluster

import (
	"context"
	"fmt"
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
	stages, err := e.kwokStages()
	if err != nil {
		return err
	}
	e.mu.Lock()
	if e.groups == nil {
		e.groups = map[string]*nodeGroup{}
	}
	if _, dup := e.groups[group]; dup {
		e.mu.Unlock()
		return fmt.Errorf("node group %s already added", group)
	}
	index := len(e.groups) + 1
	if index > maxNodeGroups {
		e.mu.Unlock()
		return fmt.Errorf("at most %d node groups, not %d", maxNodeGroups, index)
	}
	// Added before its nodes are: a group whose nodes could not all be
	// created stays added, its process never started.
	p := e.kwokProcess("kwok-group-"+group, "--manage-nodes-with-label-selector="+NodeGroupLabel+"="+group,
		fmt.Sprintf("10.%d.0.0/16", 100+index), fmt.Sprintf("10.242.%d.1", index), stages)
	e.groups[group] = &nodeGroup{proc: p, nodes: append([]string(nil), names...)}
	e.mu.Unlock()

	for _, name := range names {
		l := map[string]string{NodeGroupLabel: group}
		for k, v := range nodeLabels {
			l[k] = v
		}
		if _, err := e.Client.CoreV1().Nodes().Create(ctx, kwokNode(name, l), metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("node group %s: create node %s: %w", group, name, err)
		}
	}
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
	if !ok {
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
