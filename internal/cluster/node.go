package cluster

import (
	"context"
	"fmt"
	"path/filepath"
	"sort"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// nodeLeaseSeconds is the node Lease duration kwok writes; it renews the
// Lease at a quarter of it, so about every 2s, like a kubelet would every
// 10s at the default 40s.
const nodeLeaseSeconds = 8

// AddNode creates a Node and starts the kwok process that plays its
// kubelet, then waits until the node is Ready. Node number i (from 1)
// gets pod IPs from 10.244.i.0/24 so that pod IPs are unique.
func (e *Env) AddNode(name string) error {
	e.mu.Lock()
	if _, ok := e.nodes[name]; ok {
		e.mu.Unlock()
		return fmt.Errorf("node %s already added", name)
	}
	index := len(e.order) + 1
	e.mu.Unlock()
	if index > 250 {
		return fmt.Errorf("at most 250 nodes, not %d", index)
	}

	ctx, cancel := context.WithTimeout(context.Background(), e.opts.Timeout)
	defer cancel()
	node := kwokNode(name, nil)
	if _, err := e.Client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create node %s: %w", name, err)
	}

	stages, err := e.kwokStages()
	if err != nil {
		return err
	}
	p := e.kwokProcess("kwok-"+name, "--manage-single-node="+name,
		fmt.Sprintf("10.244.%d.0/24", index), fmt.Sprintf("10.243.0.%d", index), stages)
	e.mu.Lock()
	e.nodes[name] = p
	e.order = append(e.order, name)
	e.mu.Unlock()
	if err := p.Start(); err != nil {
		return err
	}
	return e.waitFor(p, func(ctx context.Context) (bool, error) {
		return e.nodeReadyStatus(ctx, name) == corev1.ConditionTrue, nil
	})
}

// kwokNode is the Node object of a node that kwok plays: the labels a
// kubelet would set, with extra ones, and kwok's annotation.
func kwokNode(name string, extra map[string]string) *corev1.Node {
	labels := map[string]string{
		corev1.LabelHostname: name,
		corev1.LabelOSStable: "linux",
		"type":               "kwok",
	}
	for k, v := range extra {
		labels[k] = v
	}
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Name:   name,
		Labels: labels,
		Annotations: map[string]string{
			// kwok manages the node; the TTL annotation is what a kubelet
			// would set.
			"kwok.x-k8s.io/node":           "fake",
			"node.alpha.kubernetes.io/ttl": "0",
		},
	}}
}

// kwokStages are the stage files every kwok process runs with, from
// `make tools`.
func (e *Env) kwokStages() ([]string, error) {
	stages, err := filepath.Glob(filepath.Join(e.bin, stagesDir, "*.yaml"))
	if err != nil || len(stages) == 0 {
		return nil, fmt.Errorf("no kwok stage files in %s: run `make tools`", filepath.Join(e.bin, stagesDir))
	}
	sort.Strings(stages)
	return stages, nil
}

// kwokProcess is a kwok process (not started) that plays the kubelet of
// the nodes its manage flag selects, giving their pods addresses from
// cidr and them nodeIP.
func (e *Env) kwokProcess(name, manage, cidr, nodeIP string, stages []string) *Process {
	args := []string{
		"--kubeconfig=" + e.Kubeconfig,
		"--manage-all-nodes=false",
		manage,
		fmt.Sprintf("--node-lease-duration-seconds=%d", nodeLeaseSeconds),
		"--cidr=" + cidr,
		"--node-ip=" + nodeIP,
	}
	for _, s := range stages {
		args = append(args, "--config="+s)
	}
	return e.newProcess(name, filepath.Join(e.bin, binKwok), args...)
}

// AddNodes adds the nodes, failing the test if one cannot be added.
func (e *Env) AddNodes(t testing.TB, names ...string) {
	t.Helper()
	for _, name := range names {
		if err := e.AddNode(name); err != nil {
			t.Fatal(err)
		}
	}
}

// StopNode makes the node vanish: its kwok process is killed with SIGKILL,
// so the node's Lease and status are no longer renewed, as when a machine
// loses power or network. The Node object stays.
func (e *Env) StopNode(name string) error {
	p, err := e.node(name)
	if err != nil {
		return err
	}
	p.Stop(syscall.SIGKILL, 0)
	return nil
}

// StartNode brings a stopped node back: its kwok process runs again and the
// node becomes Ready.
func (e *Env) StartNode(name string) error {
	p, err := e.node(name)
	if err != nil {
		return err
	}
	if err := p.Start(); err != nil {
		return err
	}
	return e.waitFor(p, func(ctx context.Context) (bool, error) {
		return e.nodeReadyStatus(ctx, name) == corev1.ConditionTrue, nil
	})
}

// NodeRunning reports whether the node's kwok process runs.
func (e *Env) NodeRunning(name string) bool {
	p, err := e.node(name)
	return err == nil && p.Running()
}

func (e *Env) node(name string) (*Process, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	p, ok := e.nodes[name]
	if !ok {
		return nil, fmt.Errorf("no node %q", name)
	}
	return p, nil
}

// nodeReadyStatus returns the status of the node's Ready condition, or ""
// when it has none or cannot be read.
func (e *Env) nodeReadyStatus(ctx context.Context, name string) corev1.ConditionStatus {
	node, err := e.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return ""
	}
	return NodeReady(node)
}

// WaitNodeCondition waits until the node's Ready condition has the status
// (True, False or Unknown), up to timeout.
func (e *Env) WaitNodeCondition(ctx context.Context, name string, status corev1.ConditionStatus, timeout time.Duration) error {
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		return e.nodeReadyStatus(ctx, name) == status, nil
	})
}
