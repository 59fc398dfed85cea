package webhookreplica

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/fastover/fastover/internal/cluster"
)

// Options say what a Replica runs and where it is published.
type Options struct {
	// Binary is the fastover-webhook binary.
	Binary string
	// Namespace and Service are the Service the replica stands behind.
	Namespace, Service string
	// IP is the address the webhook listens on and its endpoint holds.
	IP string
	// CertDir holds the serving certificate (certs.WriteDir).
	CertDir string
	// ID numbers the replica; its slice is named Service-rID.
	ID int
	// ManagedBy labels the slice (endpointslice.kubernetes.io/managed-by).
	ManagedBy string
	// Args are added to the webhook's own flags (listen addresses, ports
	// and certificate directory).
	Args []string
	// Logf reports what the prober could not write; nil: silent.
	Logf func(format string, args ...any)
}

// Replica is one fastover-webhook process and its EndpointSlice.
type Replica struct {
	ID    int
	Proc  *cluster.Process
	Slice string
	// Port is the webhook's; Probe its /readyz URL, Metrics its /metrics.
	Port           int
	Probe, Metrics string
	ready          atomic.Bool // as last written to the slice
}

// Start starts the replica's process and slice (not ready) and the prober
// that keeps the slice until ctx ends or the process exits.
func Start(ctx context.Context, env *cluster.Env, o Options) (*Replica, error) {
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	ports, err := cluster.FreePorts(3)
	if err != nil {
		return nil, err
	}
	r := &Replica{
		ID: o.ID, Port: ports[0],
		Slice:   o.Service + "-r" + strconv.Itoa(o.ID),
		Probe:   "http://127.0.0.1:" + strconv.Itoa(ports[1]) + "/readyz",
		Metrics: "http://127.0.0.1:" + strconv.Itoa(ports[2]) + "/metrics",
	}
	r.Proc, err = env.StartProcess(r.Slice, o.Binary, append([]string{
		"--host=" + o.IP, "--port=" + strconv.Itoa(ports[0]), "--cert-dir=" + o.CertDir,
		"--health-probe-bind-address=127.0.0.1:" + strconv.Itoa(ports[1]),
		"--metrics-bind-address=127.0.0.1:" + strconv.Itoa(ports[2]),
	}, o.Args...)...)
	if err != nil {
		return nil, err
	}
	slices := env.Client.DiscoveryV1().EndpointSlices(o.Namespace)
	_, err = slices.Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: r.Slice, Labels: map[string]string{
			discoveryv1.LabelServiceName: o.Service,
			discoveryv1.LabelManagedBy:   o.ManagedBy,
		}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{o.IP}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(false)}}},
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("webhook"), Port: ptr.To(int32(r.Port)), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}, metav1.CreateOptions{})
	if err != nil {
		r.Proc.Stop(syscall.SIGKILL, 0)
		return nil, err
	}
	go r.prober(ctx, o, slices)
	return r, nil
}

// endpointSlices is the part of the client the prober writes with.
type endpointSlices interface {
	Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (*discoveryv1.EndpointSlice, error)
	Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error
}

// prober is the kubelet's readiness probe (every second, one failure
// counts) and the EndpointSlice controller's update, in one: the
// endpoint's ready condition follows /readyz; the slice goes with the
// process.
func (r *Replica) prober(ctx context.Context, o Options, slices endpointSlices) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.Proc.Exited():
			if err := slices.Delete(context.WithoutCancel(ctx), r.Slice, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				o.Logf("replica %d: delete its slice: %v", r.ID, err)
			}
			return
		case <-tick.C:
		}
		ready := ProbeOK(ctx, r.Probe)
		if ready == r.ready.Load() {
			continue
		}
		patch := fmt.Sprintf(`{"endpoints":[{"addresses":[%q],"conditions":{"ready":%v}}]}`, o.IP, ready)
		if _, err := slices.Patch(ctx, r.Slice, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			o.Logf("replica %d: set ready=%v: %v", r.ID, ready, err)
			continue
		}
		r.ready.Store(ready)
	}
}

// Ready reports whether the replica's endpoint is ready, as last written.
func (r *Replica) Ready() bool { return r.ready.Load() }

// WaitReady waits up to 30 seconds until the replica's endpoint is ready.
func (r *Replica) WaitReady(ctx context.Context) error {
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true,
		func(context.Context) (bool, error) { return r.ready.Load(), nil })
	if err != nil {
		return fmt.Errorf("replica %d: its endpoint is not ready (%s answers no 200): %w", r.ID, r.Probe, err)
	}
	return nil
}

// ProbeOK reports whether a GET of url answers 200 within a second, as a
// kubelet's HTTP probe with its default timeout.
func ProbeOK(ctx context.Context, url string) bool {
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

// MachineIPv4 is an address of this machine an EndpointSlice may hold
// (not loopback, not link-local); false if it has none.
func MachineIPv4() (string, bool) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return "", false
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			if ip := n.IP.To4(); ip != nil && ip.IsGlobalUnicast() && !ip.IsLoopback() && !ip.IsLinkLocalUnicast() {
				return ip.String(), true
			}
		}
	}
	return "", false
}
