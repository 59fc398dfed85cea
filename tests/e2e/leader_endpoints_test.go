package e2e

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/fastover/fastover/internal/cluster"
	"github.com/fastover/fastover/internal/fleet"
	"github.com/fastover/fastover/leader"
)

// TestLeaderSliceCarriesTheTerm: the leader's slice names it and its term,
// the Lease's transition count, which grows with every handover.
func TestLeaderSliceCarriesTheTerm(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, f := startFleet(ctx, t, 2, shortDurations)

	var last int64 = -1
	for round := range 3 {
		id := waitServing(ctx, t, f, "", 30*time.Second)
		holder, transitions, err := f.Holder(ctx)
		require.NoError(t, err)
		require.Equal(t, id, holder)
		sl, err := f.Slices(ctx)
		require.NoError(t, err)
		require.Len(t, sl, 1)
		assert.Equal(t, id, sl[0].Annotations[leader.AnnotationIdentity])
		term, err := strconv.ParseInt(sl[0].Annotations[leader.AnnotationTerm], 10, 32)
		require.NoError(t, err, "round %d: the slice's term", round)
		assert.Equal(t, int64(transitions), term, "round %d: the term is the Lease's transition count", round)
		assert.Greater(t, term, last, "round %d: the term grows with every leader", round)
		last = term
		if round == 2 {
			break
		}
		// Planned handover; the old leader comes back as a standby.
		r := f.ByID(id)
		require.NoError(t, r.Proc.Signal(syscall.SIGTERM))
		waitServing(ctx, t, f, id, 10*time.Second)
		exited, _ := r.Proc.WaitExit(10 * time.Second)
		require.True(t, exited)
		require.NoError(t, f.Start(r))
	}
}

// TestLeaderNamedTargetPort: a Service whose targetPort is a name gets the
// number of that port in the leader's own Pod; a name its Pod lacks is
// reported with a Warning Event.
func TestLeaderNamedTargetPort(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	env := cluster.Start(t, cluster.Options{})
	require.NoError(t, env.CreateNamespace(ctx, "ha", nil))
	f := newFleet(t, env, "ha", "ctl", shortDurations, "--service-ports", "--pod-name=ctl-pod")
	// The replicas' Pod, as the API has it: only its ports matter here.
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "ctl-pod"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "ctl", Image: "fastover-example",
			Ports: []corev1.ContainerPort{{Name: "web", ContainerPort: int32(f.Port)}},
		}}},
	}
	_, err := env.Client.CoreV1().Pods("ha").Create(ctx, pod, metav1.CreateOptions{})
	require.NoError(t, err)
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "ctl"},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromString("web")}}},
	}
	_, err = env.Client.CoreV1().Services("ha").Create(ctx, svc, metav1.CreateOptions{})
	require.NoError(t, err)
	require.NoError(t, f.Add(2))

	waitServing(ctx, t, f, "", 30*time.Second)
	sl, err := f.Slices(ctx)
	require.NoError(t, err)
	require.Len(t, sl, 1)
	require.Len(t, sl[0].Ports, 1)
	assert.Equal(t, int32(f.Port), *sl[0].Ports[0].Port, "the named targetPort resolved from the Pod (not the Service's port 80)")
	assert.Equal(t, "http", *sl[0].Ports[0].Name)

	// A name the Pod lacks: reported on the Service.
	patch := `{"spec":{"ports":[{"name":"http","port":80,"targetPort":"nope"}]}}`
	_, err = env.Client.CoreV1().Services("ha").Patch(ctx, "ctl", "application/merge-patch+json", []byte(patch), metav1.PatchOptions{})
	require.NoError(t, err)
	var msg string
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		evs, err := env.Client.CoreV1().Events("ha").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for _, ev := range evs.Items {
			if ev.Reason == "NamedTargetPort" && ev.Type == corev1.EventTypeWarning && ev.InvolvedObject.Kind == "Service" {
				msg = ev.Message
				return true, nil
			}
		}
		return false, nil
	})
	require.NoError(t, err, "no Warning Event NamedTargetPort on the Service")
	assert.True(t, strings.Contains(msg, `port named "nope"`), msg)
	sl, err = f.Slices(ctx)
	require.NoError(t, err)
	require.Len(t, sl, 1)
	assert.Equal(t, int32(f.Port), *sl[0].Ports[0].Port, "the published port is left as it was")
}

// endpointsView is what a reader of the Endpoints API sees of the Service:
// its addresses, ports, identity and term.
type endpointsView struct {
	addrs []string
	ports []int32
	id    string
	term  string
}

func viewEndpoints(ctx context.Context, f *fleet.Fleet) (endpointsView, error) {
	ep, err := f.Env.Client.CoreV1().Endpoints(f.Namespace).Get(ctx, f.Service, metav1.GetOptions{})
	if err != nil {
		return endpointsView{}, err
	}
	v := endpointsView{id: ep.Annotations[leader.AnnotationIdentity], term: ep.Annotations[leader.AnnotationTerm]}
	for _, ss := range ep.Subsets {
		for _, a := range ss.Addresses {
			v.addrs = append(v.addrs, a.IP)
		}
		for _, p := range ss.Ports {
			v.ports = append(v.ports, p.Port)
		}
	}
	return v, nil
}

// TestLeaderEndpointsReaders: readers of the Endpoints API and of the
// EndpointSlice API see the same single leader, with its term, through
// planned handovers and kills, with kube-controller-manager's mirroring
// controller running; and no mirrored slice ever appears for the Service
// (the leader's Endpoints object is labelled skip-mirror), while one does
// for an unlabelled Endpoints object of another Service.
func TestLeaderEndpointsReaders(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	env := cluster.Start(t, cluster.Options{})
	require.NoError(t, env.CreateNamespace(ctx, "ha", nil))
	mirrored := discoveryv1.LabelManagedBy + "=endpointslicemirroring-controller.k8s.io"
	w, err := env.Client.DiscoveryV1().EndpointSlices("ha").Watch(ctx, metav1.ListOptions{LabelSelector: mirrored})
	require.NoError(t, err)
	defer w.Stop()
	var mu sync.Mutex
	mirroredFor := map[string]int{} // service name -> mirrored slices seen
	go func() {
		for ev := range w.ResultChan() {
			if s, ok := ev.Object.(*discoveryv1.EndpointSlice); ok {
				mu.Lock()
				mirroredFor[s.Labels[discoveryv1.LabelServiceName]]++
				mu.Unlock()
			}
		}
	}()

	d := shortDurations
	f := newFleet(t, env, "ha", "ctl", d)
	require.NoError(t, f.CreateService(ctx, nil))
	require.NoError(t, f.Add(3))

	// A reader of each API, sampling all along: never more than one
	// address.
	var samples, multi int
	var bad []string
	sampleCtx, stopSampling := context.WithCancel(ctx)
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for sampleCtx.Err() == nil {
			v, err := viewEndpoints(sampleCtx, f)
			sl, err2 := f.Slices(sampleCtx)
			if err == nil && err2 == nil {
				mu.Lock()
				samples++
				if len(v.addrs) > 1 || len(fleet.PublishedAddresses(sl)) > 1 {
					multi++
					bad = append(bad, fmt.Sprintf("endpoints %v slices %v", v.addrs, fleet.PublishedAddresses(sl)))
				}
				mu.Unlock()
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()

	check := func(t *testing.T, id string) {
		t.Helper()
		want := f.ByID(id).Address()
		var last string
		err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
			v, err := viewEndpoints(ctx, f)
			if err != nil {
				last = err.Error()
				return false, nil
			}
			sl, err := f.Slices(ctx)
			if err != nil || len(sl) != 1 {
				last = fmt.Sprintf("slices %v %v", sliceSummary(sl), err)
				return false, nil
			}
			last = fmt.Sprintf("endpoints %+v, slice %v %v", v, fleet.PublishedAddresses(sl), sl[0].Annotations)
			return slices.Equal(v.addrs, []string{want}) && slices.Equal(fleet.PublishedAddresses(sl), []string{want}) &&
				v.id == id && sl[0].Annotations[leader.AnnotationIdentity] == id &&
				v.term != "" && v.term == sl[0].Annotations[leader.AnnotationTerm] &&
				slices.Equal(v.ports, []int32{int32(f.Port)}), nil
		})
		require.NoError(t, err, "Endpoints and EndpointSlice readers do not both see %s alone: %s", id, last)
	}

	id := waitServing(ctx, t, f, "", 30*time.Second)
	check(t, id)
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL, syscall.SIGTERM} {
		r := f.ByID(id)
		require.NoError(t, r.Proc.Signal(sig))
		next := waitServing(ctx, t, f, id, d.Lease+5*time.Second)
		check(t, next)
		t.Logf("%v: %s -> %s; both APIs agree", sig, id, next)
		exited, _ := r.Proc.WaitExit(10 * time.Second)
		require.True(t, exited)
		r.Proc.Stop(syscall.SIGKILL, 0)
		require.NoError(t, f.Start(r))
		id = next
	}

	// The mirroring controller runs: it mirrors another selector-less
	// Service's unlabelled Endpoints object.
	other := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "plain"}, Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}}}}
	_, err = env.Client.CoreV1().Services("ha").Create(ctx, other, metav1.CreateOptions{})
	require.NoError(t, err)
	//nolint:staticcheck // the Endpoints API is what this test writes
	plain := &corev1.Endpoints{ObjectMeta: metav1.ObjectMeta{Name: "plain"}, Subsets: []corev1.EndpointSubset{{
		Addresses: []corev1.EndpointAddress{{IP: "192.0.2.200"}}, Ports: []corev1.EndpointPort{{Name: "http", Port: 80}},
	}}}
	_, err = env.Client.CoreV1().Endpoints("ha").Create(ctx, plain, metav1.CreateOptions{})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return mirroredFor["plain"] > 0
	}, 30*time.Second, 50*time.Millisecond, "the mirroring controller does not run: the test would prove nothing")

	stopSampling()
	<-sampled
	mu.Lock()
	defer mu.Unlock()
	t.Logf("%d samples of both APIs", samples)
	assert.Zero(t, multi, "a reader saw more than one address: %v", bad)
	assert.Zero(t, mirroredFor["ctl"], "a mirrored slice appeared for the leader's Service")
}

// startDualStackReplicas starts n replicas of f that publish 192.0.2.N and
// 2001:db8::N (--pod-ips), as fleet.Add does otherwise.
func startDualStackReplicas(t *testing.T, f *fleet.Fleet, n int) {
	t.Helper()
	for range n {
		r := &fleet.Replica{N: len(f.Replicas) + 1}
		r.ID = f.Name + "-" + strconv.Itoa(r.N)
		f.Replicas = append(f.Replicas, r)
		args := append([]string{
			"--kubeconfig=" + f.Env.Kubeconfig,
			"--namespace=" + f.Namespace,
			"--service=" + f.Service,
			"--lease=" + f.Lease,
			"--id=" + r.ID,
			"--address=" + r.Address(),
			"--pod-ips=" + r.Address() + ",2001:db8::" + strconv.Itoa(r.N),
			"--listen=127.0.0." + strconv.Itoa(r.N) + ":" + strconv.Itoa(f.Port),
			"--port=" + strconv.Itoa(f.Port),
		}, f.Args...)
		p, err := f.Env.StartProcess(r.ID, f.Binary, args...)
		require.NoError(t, err)
		r.Proc = p
	}
}

// slicesByName returns "addressType address identity" per slice name.
func slicesByName(ctx context.Context, f *fleet.Fleet) (map[string]string, error) {
	sl, err := f.Slices(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, s := range sl {
		var addrs []string
		for _, ep := range s.Endpoints {
			addrs = append(addrs, ep.Addresses...)
		}
		out[s.Name] = fmt.Sprintf("%s %s %s", s.AddressType, strings.Join(addrs, ","), s.Annotations[leader.AnnotationIdentity])
	}
	return out, nil
}

// TestLeaderDualStack: on an API server with IPv4 and IPv6 service
// ranges, a RequireDualStack Service gets the leader's address of each
// family, one slice per family, through a planned handover, and its
// Endpoints object the primary family's; an IPv6-only Service gets an
// IPv6 slice.
func TestLeaderDualStack(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	env := cluster.Start(t, cluster.Options{APIServerFlags: []string{"--service-cluster-ip-range=10.96.0.0/16,fd00:10:96::/108"}})
	require.NoError(t, env.CreateNamespace(ctx, "ha", nil))
	d := shortDurations

	f := newFleet(t, env, "ha", "ctl", d)
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "ctl"},
		Spec: corev1.ServiceSpec{
			IPFamilyPolicy: ptr.To(corev1.IPFamilyPolicyRequireDualStack),
			Ports:          []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(int32(f.Port))}},
		},
	}
	created, err := env.Client.CoreV1().Services("ha").Create(ctx, svc, metav1.CreateOptions{})
	require.NoError(t, err)
	require.Equal(t, []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}, created.Spec.IPFamilies, "a dual-stack Service")
	startDualStackReplicas(t, f, 2)

	expect := func(t *testing.T, f *fleet.Fleet, want func(holder string) map[string]string, not string) string {
		t.Helper()
		var holder string
		var last map[string]string
		err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			h, _, err := f.Holder(ctx)
			if err != nil || h == "" || h == not {
				return false, nil
			}
			got, err := slicesByName(ctx, f)
			if err != nil {
				return false, nil
			}
			holder, last = h, got
			w := want(h)
			if len(got) != len(w) {
				return false, nil
			}
			for k, v := range w {
				if got[k] != v {
					return false, nil
				}
			}
			return true, nil
		})
		require.NoError(t, err, "slices %v", last)
		return holder
	}
	dual := func(h string) map[string]string {
		n := strings.TrimPrefix(f.ByID(h).Address(), fleet.PublishedNet)
		return map[string]string{
			"ctl-fastover":      "IPv4 192.0.2." + n + " " + h,
			"ctl-fastover-ipv6": "IPv6 2001:db8::" + n + " " + h,
		}
	}
	id := expect(t, f, dual, "")
	// The Endpoints object follows the slices a moment later.
	var v endpointsView
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		var err error
		v, err = viewEndpoints(ctx, f)
		return err == nil && v.id == id, nil
	})
	require.NoError(t, err, "no Endpoints object naming %s: %+v", id, v)
	assert.Equal(t, []string{f.ByID(id).Address()}, v.addrs, "the Endpoints object has the primary family's address")

	// A planned handover moves both.
	r := f.ByID(id)
	require.NoError(t, r.Proc.Signal(syscall.SIGTERM))
	next := expect(t, f, dual, id)
	t.Logf("dual-stack handover %s -> %s", id, next)

	// An IPv6-only Service: the leader's IPv6 address alone.
	f6 := newFleet(t, env, "ha", "v6", d)
	f6.Name = "v6"
	svc6 := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "v6"},
		Spec: corev1.ServiceSpec{
			IPFamilies: []corev1.IPFamily{corev1.IPv6Protocol},
			Ports:      []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(int32(f6.Port))}},
		},
	}
	_, err = env.Client.CoreV1().Services("ha").Create(ctx, svc6, metav1.CreateOptions{})
	require.NoError(t, err)
	startDualStackReplicas(t, f6, 1)
	expect(t, f6, func(h string) map[string]string {
		return map[string]string{"v6-fastover-ipv6": "IPv6 2001:db8::1 " + h}
	}, "")
}
