package charts_test

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/fastover/fastover/internal/cluster"
	"github.com/fastover/fastover/tests/harness/commands"
	"github.com/fastover/fastover/tests/harness/webhookreplica"
	"github.com/fastover/fastover/toleration"
)

// built are the commands the chart tests run, built for this run.
var built = &commands.Set{Packages: []string{"./cmd/fastover-webhook", "./examples/fastover-example", "./cmd/kubectl-fastover"}}

// binary returns the path of one of fastover's commands, built once per
// test run.
func binary(t *testing.T, name string) string {
	t.Helper()
	return built.Path(t, name)
}

func TestMain(m *testing.M) {
	code := m.Run()
	built.Remove()
	os.Exit(code)
}

// restricted are the labels the README puts on a release namespace.
func restricted(extra map[string]string) map[string]string {
	l := map[string]string{
		"pod-security.kubernetes.io/enforce": "restricted",
		"pod-security.kubernetes.io/warn":    "restricted",
		"pod-security.kubernetes.io/audit":   "restricted",
	}
	for k, v := range extra {
		l[k] = v
	}
	return l
}

// containerArgs returns the args of a rendered Deployment's first container.
func containerArgs(t *testing.T, objs []*unstructured.Unstructured, name string) []string {
	t.Helper()
	d := findObj(t, objs, "Deployment", name)
	cs, _, err := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "containers")
	require.NoError(t, err)
	require.NotEmpty(t, cs)
	raw, _ := cs[0].(map[string]any)["args"].([]any)
	out := make([]string, 0, len(raw))
	for _, a := range raw {
		out = append(out, fmt.Sprint(a))
	}
	return out
}

func findObj(t *testing.T, objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	t.Fatalf("no %s %s in the render", kind, name)
	return nil
}

// renderedRule is the rule of the rendered ConfigMap fastover-rule.
func renderedRule(t *testing.T, objs []*unstructured.Unstructured) toleration.Rule {
	t.Helper()
	cm := findObj(t, objs, "ConfigMap", toleration.RuleConfigMapName)
	data, _, _ := unstructured.NestedStringMap(cm.Object, "data")
	r, err := toleration.ParseRuleData(data)
	require.NoError(t, err, data)
	return r
}

// replica is one fastover-webhook process standing for a pod of the
// chart's Deployment behind its Service.
type replica = webhookreplica.Replica

func startReplica(ctx context.Context, t *testing.T, env *cluster.Env, ns, svc, ip, certDir string, id int, args []string) *replica {
	t.Helper()
	r, err := webhookreplica.Start(ctx, env, webhookreplica.Options{
		Binary: binary(t, "fastover-webhook"), Namespace: ns, Service: svc, IP: ip, CertDir: certDir,
		ID: id, ManagedBy: "charts-test.fastover.io", Args: append([]string{"--shutdown-delay=3s"}, args...), Logf: t.Logf,
	})
	require.NoError(t, err)
	return r
}

// machineIPv4 is an address of this machine an EndpointSlice may hold.
func machineIPv4(t *testing.T) string {
	t.Helper()
	ip, ok := webhookreplica.MachineIPv4()
	if !ok {
		t.Fatal("no IPv4 address but loopback on this machine: an EndpointSlice cannot point at the webhook")
	}
	return ip
}

// podStream creates a pod every 20 ms and sorts the admissions: by the
// injection mark, failed, or admitted without injection.
type podStream struct {
	mu          sync.Mutex
	marks       map[string]int
	errs        []string
	notInjected []string
	attempts    int
	maxLatency  time.Duration
	stop, done  chan struct{}
	once        sync.Once
}

func startPodStream(ctx context.Context, env *cluster.Env, ns string) *podStream {
	s := &podStream{marks: map[string]int{}, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		for {
			select {
			case <-s.stop:
				return
			case <-ctx.Done():
				return
			default:
			}
			p := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{GenerateName: "p-"},
				Spec: corev1.PodSpec{
					// No node has the label: the pods stay Pending (real
					// nodes would run 50 pods a second otherwise).
					NodeSelector:    map[string]string{"fastover.io/test-no-node": "true"},
					SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](65532), SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
					Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10", SecurityContext: &corev1.SecurityContext{
						AllowPrivilegeEscalation: ptr.To(false), Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
					}}},
				},
			}
			began := time.Now()
			pod, err := env.Client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
			took := time.Since(began)
			s.mu.Lock()
			s.attempts++
			s.maxLatency = max(s.maxLatency, took)
			switch {
			case err != nil:
				s.errs = append(s.errs, err.Error())
			case pod.Annotations[toleration.AnnotationInjected] == "":
				s.notInjected = append(s.notInjected, pod.Name)
			default:
				s.marks[pod.Annotations[toleration.AnnotationInjected]]++
			}
			s.mu.Unlock()
			time.Sleep(20 * time.Millisecond)
		}
	}()
	return s
}

// waitMark waits until n more pods got the injection mark.
func (s *podStream) waitMark(ctx context.Context, t *testing.T, mark string, n int) {
	t.Helper()
	s.mu.Lock()
	target := s.marks[mark] + n
	s.mu.Unlock()
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.marks[mark] >= target, nil
	})
	require.NoError(t, err, "pods are not admitted with %q", mark)
}

// finish stops the client (again: a no-op).
func (s *podStream) finish() {
	s.once.Do(func() { close(s.stop) })
	<-s.done
}
