// Command admissionlatency measures what fastover adds to pod creation on
// the real API server: 1,000 pod creates through kube-apiserver in a
// namespace without fastover, 1,000 in one served by fastover-webhook and
// 1,000 in one served by the MutatingAdmissionPolicy (with its
// ValidatingAdmissionPolicy), in the same run on the same control plane.
// The lanes take turns in rounds of -batch creates, so that a drift of the
// machine's load hits all three alike; a create is sent when the one
// before it returned (one client, so the latency is the API server's, not
// a queue's). For each lane it prints the latency percentiles and the API
// server's CPU time per 1,000 creates: the utime+stime of the
// kube-apiserver process (/proc/<pid>/stat) across each round, summed by
// lane. The scheduler and the controller-manager are stopped once the
// namespaces exist, so that the API server does little else. Every pod
// created through fastover is checked for its mark. `make bench` runs it
// on a local control plane (internal/cluster).
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/fastover/fastover/certs"
	"github.com/fastover/fastover/internal/cluster"
	"github.com/fastover/fastover/internal/install"
	"github.com/fastover/fastover/internal/procstat"
	"github.com/fastover/fastover/tests/harness/benchrun"
	"github.com/fastover/fastover/tests/harness/podgen"
	"github.com/fastover/fastover/toleration"
	"github.com/fastover/fastover/webhook"
)

func main() { benchrun.Main("admissionlatency", run) }

type lane struct {
	name   string
	ns     string
	marked bool // every pod must come out with fastover's mark
	lat    []time.Duration
	ticks  int64
}

func run() error {
	bin := benchrun.BinFlag("fastover-webhook")
	n := flag.Int("creates", 1000, "pod creates per lane")
	batch := flag.Int("batch", 50, "creates per lane per round")
	warmup := flag.Int("warmup", 50, "creates per lane before measuring")
	podFile := flag.String("pod", "webhook/testdata/pod.json", "the pod created (its name, namespace and server-set fields are replaced)")
	if err := benchrun.Parse(); err != nil {
		return err
	}
	if *n < 1 || *batch < 1 || *warmup < 0 {
		return errors.New("-creates and -batch must be positive, -warmup not negative")
	}
	binDir, err := benchrun.Binaries(*bin, "fastover-webhook")
	if err != nil {
		return err
	}
	whBin := binDir.Path("fastover-webhook")
	pod, err := readPod(*podFile)
	if err != nil {
		return err
	}

	env, err := binDir.Start()
	if err != nil {
		return err
	}
	defer env.Stop()
	ctx := context.Background()
	pid, err := apiServerPid(env, binDir.Path("kube-apiserver"))
	if err != nil {
		return err
	}

	lanes := []*lane{{name: "no mutation", ns: "lat-none"}, {name: "webhook", ns: "lat-webhook", marked: true}}
	inject := map[string]string{toleration.NamespaceLabel: toleration.NamespaceLabelValue}
	if err := env.CreateNamespace(ctx, "lat-none", nil); err != nil {
		return err
	}
	if err := env.CreateNamespace(ctx, "lat-webhook", inject); err != nil {
		return err
	}
	if err := startWebhook(ctx, env, whBin, "lat-webhook"); err != nil {
		return err
	}
	if err := env.CreateNamespace(ctx, "lat-policy", inject); err != nil {
		return err
	}
	rule := toleration.DefaultRule()
	if _, err := install.PolicyMode(ctx, env.Config, install.PolicyOptions{
		Rule: &rule, NamespaceSelector: podgen.LaneSelector("lat-policy"), WaitNamespace: "lat-policy",
	}); err != nil {
		return err
	}
	lanes = append(lanes, &lane{name: "policy", ns: "lat-policy", marked: true})
	// Quiet: nothing else is to be scheduled or reconciled.
	if err := errors.Join(env.StopComponent(cluster.Scheduler), env.StopComponent(cluster.ControllerManager)); err != nil {
		return err
	}

	create := func(l *lane, name string) (time.Duration, error) {
		p := pod.DeepCopy()
		p.Name = name
		began := time.Now()
		got, err := env.Client.CoreV1().Pods(l.ns).Create(ctx, p, metav1.CreateOptions{})
		took := time.Since(began)
		if err != nil {
			return 0, fmt.Errorf("%s: create %s: %w", l.name, name, err)
		}
		if _, ok := got.Annotations[toleration.AnnotationInjected]; ok != l.marked {
			return 0, fmt.Errorf("%s: pod %s: fastover's mark present %t, want %t", l.name, name, ok, l.marked)
		}
		return took, nil
	}
	for _, l := range lanes {
		for i := range *warmup {
			if _, err := create(l, fmt.Sprintf("warm-%d", i)); err != nil {
				return err
			}
		}
	}
	began := time.Now()
	for done := 0; done < *n; done += *batch {
		k := min(*batch, *n-done)
		for _, l := range lanes {
			before, err := procstat.CPUTicks(pid)
			if err != nil {
				return err
			}
			for i := range k {
				took, err := create(l, fmt.Sprintf("p-%d", done+i))
				if err != nil {
					return err
				}
				l.lat = append(l.lat, took)
			}
			after, err := procstat.CPUTicks(pid)
			if err != nil {
				return err
			}
			l.ticks += after - before
		}
	}
	elapsed := time.Since(began)

	fmt.Printf("pod creation through kube-apiserver (local control plane, %s), %d creates per lane, one client, lanes in turn by %d, after %d warm-up creates each;\n",
		apiServerVersion(env), *n, *batch, *warmup)
	fmt.Printf("the pod: %s (%d bytes as JSON), stored in etcd; webhook: fastover-webhook on loopback (manifests/webhook's configuration); policy: overlays/policy;\n", filepath.Base(*podFile), podSize(pod))
	fmt.Printf("scheduler and controller-manager stopped; the default rule\n")
	fmt.Printf("API server CPU = utime+stime of kube-apiserver across the lane's rounds (its background work included, alike for all lanes)\n\n")
	fmt.Printf("%-12s %8s %9s %9s %9s %9s %9s %24s\n", "lane", "creates", "p50", "p90", "p99", "max", "mean", "API server CPU/1000")
	base := lanes[0]
	for _, l := range lanes {
		cpu := float64(l.ticks) / procstat.ClockTicks / float64(len(l.lat)) * 1000
		extra := ""
		if l != base {
			extra = fmt.Sprintf(" (%+.2fs)", cpu-float64(base.ticks)/procstat.ClockTicks/float64(len(base.lat))*1000)
		}
		fmt.Printf("%-12s %8d %9s %9s %9s %9s %9s %24s\n", l.name, len(l.lat), ms(pct(l.lat, 50)), ms(pct(l.lat, 90)), ms(pct(l.lat, 99)),
			ms(pct(l.lat, 100)), ms(mean(l.lat)), fmt.Sprintf("%.2fs%s", cpu, extra))
	}
	fmt.Println()
	for _, l := range lanes[1:] {
		fmt.Printf("%-12s adds %s at p50, %s at p99 to a pod create\n", l.name+":", diff(pct(l.lat, 50), pct(base.lat, 50)), diff(pct(l.lat, 99), pct(base.lat, 99)))
	}
	fmt.Printf("measured in %v\n", elapsed.Round(time.Second))
	return nil
}

// readPod reads the pod to create, without what the API server sets.
func readPod(path string) (*corev1.Pod, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var p corev1.Pod
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	p.ObjectMeta = metav1.ObjectMeta{Labels: p.Labels, Annotations: p.Annotations, OwnerReferences: p.OwnerReferences}
	p.Status = corev1.PodStatus{}
	p.Spec.NodeName = ""
	// The namespace's default ServiceAccount, whose token volume the API
	// server adds, as for a pod of a new namespace.
	p.Spec.ServiceAccountName, p.Spec.DeprecatedServiceAccount = "", ""
	p.Spec.Volumes = slices.DeleteFunc(p.Spec.Volumes, func(v corev1.Volume) bool { return strings.HasPrefix(v.Name, "kube-api-access-") })
	for _, cs := range [][]corev1.Container{p.Spec.InitContainers, p.Spec.Containers} {
		for i := range cs {
			cs[i].VolumeMounts = slices.DeleteFunc(cs[i].VolumeMounts, func(m corev1.VolumeMount) bool { return strings.HasPrefix(m.Name, "kube-api-access-") })
		}
	}
	return &p, nil
}

func podSize(p *corev1.Pod) int {
	b, _ := json.Marshal(p)
	return len(b)
}

// apiServerPid finds the kube-apiserver that env started: a child of this
// process running the binary apiServer on env's port.
func apiServerPid(env *cluster.Env, apiServer string) (int, error) {
	port := env.Config.Host[strings.LastIndexByte(env.Config.Host, ':')+1:]
	want := apiServer
	dirs, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", d.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
		if args[0] != want || !slices.Contains(args, "--secure-port="+port) {
			continue
		}
		if ppid, err := procstat.ParentPid(pid); err != nil || ppid != os.Getpid() {
			continue
		}
		return pid, nil
	}
	return 0, fmt.Errorf("no kube-apiserver child of this process on port %s", port)
}

func apiServerVersion(env *cluster.Env) string {
	v, err := env.Client.Discovery().ServerVersion()
	if err != nil {
		return "version unknown"
	}
	return "kube-apiserver " + v.GitVersion
}

// startWebhook runs fastover-webhook with a fresh certificate beside the
// control plane and registers manifests/webhook's configuration (failure
// policy Fail: a failed call is an error here, not an unmutated pod) for
// the namespace ns, waiting until the API server calls it.
func startWebhook(ctx context.Context, env *cluster.Env, bin, ns string) error {
	ca, err := certs.NewCA("admissionlatency", time.Hour)
	if err != nil {
		return err
	}
	kp, err := ca.Issue([]string{"127.0.0.1"}, time.Hour)
	if err != nil {
		return err
	}
	certDir := filepath.Join(env.Dir, "webhook-certs")
	if err := certs.WriteDir(certDir, kp, ca); err != nil {
		return err
	}
	ports, err := cluster.FreePorts(3)
	if err != nil {
		return err
	}
	proc, err := env.StartProcess("fastover-webhook", bin,
		"--host=127.0.0.1",
		"--port="+strconv.Itoa(ports[0]),
		"--cert-dir="+certDir,
		"--health-probe-bind-address=127.0.0.1:"+strconv.Itoa(ports[1]),
		"--metrics-bind-address=127.0.0.1:"+strconv.Itoa(ports[2]))
	if err != nil {
		return err
	}
	readyCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := proc.WaitHTTP(readyCtx, "http://127.0.0.1:"+strconv.Itoa(ports[1])+"/readyz"); err != nil {
		return err
	}
	mwc, err := podgen.WebhookConfiguration("https://127.0.0.1:"+strconv.Itoa(ports[0])+webhook.Path, ca.CertPEM, ns, "Fail")
	if err != nil {
		return err
	}
	applier, err := install.NewApplier(env.Config)
	if err != nil {
		return err
	}
	if _, err := applier.Apply(ctx, []*unstructured.Unstructured{mwc}, install.ApplyOptions{}); err != nil {
		return err
	}
	return install.WaitInjecting(ctx, env.Client, ns, 30*time.Second)
}

func pct(d []time.Duration, p int) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	i := (len(s)*p + 99) / 100
	return s[max(0, min(len(s)-1, i-1))]
}

func mean(d []time.Duration) time.Duration {
	var sum time.Duration
	for _, x := range d {
		sum += x
	}
	return sum / time.Duration(len(d))
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond)) }

func diff(a, b time.Duration) string {
	return fmt.Sprintf("%+.2fms", float64(a-b)/float64(time.Millisecond))
}
