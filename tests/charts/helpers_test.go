package charts_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/fastover/fastover/internal/cluster"
	"github.com/fastover/fastover/toleration"
)

var (
	buildOnce sync.Once
	buildDir  string
	buildErr  error
)

// binary builds fastover's commands once per run and returns one's path.
// They are built in the repository's workspace, as `make` builds them: this
// module's go.sum holds what its own packages need, not every command's.
func binary(t *testing.T, name string) string {
	t.Helper()
	buildOnce.Do(func() {
		var root string
		if root, buildErr = cluster.ModuleRoot(); buildErr != nil {
			return
		}
		buildDir, buildErr = os.MkdirTemp("", "fastover-charts-bin-")
		if buildErr != nil {
			return
		}
		cmd := exec.Command("go", "build", "-o", buildDir+"/", "./cmd/fastover-webhook", "./examples/fastover-example")
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "GOWORK=") // the go.work above root, though make runs this module with GOWORK=off
		out, err := cmd.CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %w\n%s", err, out)
		}
	})
	require.NoError(t, buildErr)
	return filepath.Join(buildDir, name)
}

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		_ = os.RemoveAll(buildDir)
	}
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
// chart's Deployment behind its Service: the API server (with
// --enable-aggregator-routing) resolves the Service to a ready endpoint of
// its EndpointSlices, as kube-proxy would. The test keeps the replica's
// EndpointSlice as the kubelet's probe and the EndpointSlice controller
// would: ready follows /readyz every second; the slice goes with the process.
type replica struct {
	id    int
	proc  *cluster.Process
	slice string
	probe string
	ready atomic.Bool
}

func startReplica(ctx context.Context, t *testing.T, env *cluster.Env, ns, svc, ip, certDir string, id int, args []string) *replica {
	t.Helper()
	ports, err := cluster.FreePorts(3)
	require.NoError(t, err)
	r := &replica{id: id, slice: svc + "-r" + strconv.Itoa(id), probe: "http://127.0.0.1:" + strconv.Itoa(ports[1]) + "/readyz"}
	r.proc, err = env.StartProcess(r.slice, binary(t, "fastover-webhook"), append([]string{
		"--host=" + ip, "--port=" + strconv.Itoa(ports[0]), "--cert-dir=" + certDir,
		"--health-probe-bind-address=127.0.0.1:" + strconv.Itoa(ports[1]),
		"--metrics-bind-address=127.0.0.1:" + strconv.Itoa(ports[2]),
		"--shutdown-delay=3s",
	}, args...)...)
	require.NoError(t, err)
	slices := env.Client.DiscoveryV1().EndpointSlices(ns)
	_, err = slices.Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: r.slice, Labels: map[string]string{
			discoveryv1.LabelServiceName: svc,
			discoveryv1.LabelManagedBy:   "charts-test.fastover.io",
		}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{ip}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(false)}}},
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("webhook"), Port: ptr.To(int32(ports[0])), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	go func() {
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-r.proc.Exited():
				if err := slices.Delete(context.WithoutCancel(ctx), r.slice, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
					t.Logf("replica %d: delete its slice: %v", id, err)
				}
				return
			case <-tick.C:
			}
			ok := probeOK(ctx, r.probe)
			if ok == r.ready.Load() {
				continue
			}
			patch := fmt.Sprintf(`{"endpoints":[{"addresses":[%q],"conditions":{"ready":%v}}]}`, ip, ok)
			if _, err := slices.Patch(ctx, r.slice, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err == nil {
				r.ready.Store(ok)
			}
		}
	}()
	return r
}

func probeOK(ctx context.Context, url string) bool {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, http.NoBody)
	if err != nil {
		return false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	_ = resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

func (r *replica) waitReady(ctx context.Context) error {
	return wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true,
		func(context.Context) (bool, error) { return r.ready.Load(), nil })
}

// machineIPv4 is an address of this machine an EndpointSlice may hold.
func machineIPv4(t *testing.T) string {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	require.NoError(t, err)
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			if ip := n.IP.To4(); ip != nil && ip.IsGlobalUnicast() && !ip.IsLoopback() && !ip.IsLinkLocalUnicast() {
				return ip.String()
			}
		}
	}
	t.Fatal("no IPv4 address but loopback on this machine: an EndpointSlice cannot point at the webhook")
	return ""
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
