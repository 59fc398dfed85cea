// Command leaderbaseline is the baseline of fastover's failover benchmark:
// the same small controller as fastover-example (same flags, GET / answers
// its identity), written the way a user would by hand with client-go's
// tools/leaderelection: a LeaseLock, ReleaseOnCancel, and an
// OnStartedLeading callback that writes the Service's EndpointSlice with
// the leader's address and deletes its other slices; on a planned stop,
// OnStoppedLeading deletes the slice it wrote. A replica that does not lead
// refuses GET / (503), so that a client reaching a standby (in a pod, a
// crashed leader's container restarted at the published address) does
// not take it for the leader. Its identity defaults to the host name (a
// pod's name) and a random suffix, as controller-runtime's does;
// --crash-signals makes it crash on SIGUSR1 (a panic) and SIGUSR2 (an
// OOM kill), for the crash measurements on real nodes.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/fastover/fastover/internal/crashsignal"
	"github.com/fastover/fastover/tests/harness/benchrun"
)

func main() { benchrun.Main("leaderbaseline", run) }

func run() error {
	var (
		kubeconfig, namespace, service, lease, id, address, listen string
		port                                                       int
		leaseDuration, renewDeadline, retryPeriod                  time.Duration
	)
	flag.StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig file")
	flag.StringVar(&namespace, "namespace", "", "namespace")
	flag.StringVar(&service, "service", "", "Service")
	flag.StringVar(&lease, "lease", "", "Lease")
	flag.StringVar(&id, "id", "", "identity")
	flag.StringVar(&address, "address", "", "published address")
	flag.StringVar(&listen, "listen", "", "HTTP listen address")
	flag.IntVar(&port, "port", 8080, "published port")
	flag.DurationVar(&leaseDuration, "lease-duration", 15*time.Second, "")
	flag.DurationVar(&renewDeadline, "renew-deadline", 10*time.Second, "")
	flag.DurationVar(&retryPeriod, "retry-period", 2*time.Second, "")
	flag.Bool("remove-selector", false, "not supported; accepted for flag compatibility")
	crashSignals := flag.Bool("crash-signals", false, "crash on SIGUSR1 (a panic) and SIGUSR2 (memory allocated until OOM-killed)")
	actingLog := flag.String("acting-log", "", "append a line to this file each time the leader acts (every 10 ms while it leads), as fastover-example's --acting-log")
	if err := benchrun.Parse(); err != nil {
		return err
	}
	if id == "" {
		host, err := os.Hostname()
		if err != nil {
			return err
		}
		id = fmt.Sprintf("%s_%08x", host, rand.Uint32())
	}
	if *crashSignals {
		crashsignal.Handle("leaderbaseline")
	}

	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	l, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	var leading atomic.Bool
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) {
		if !leading.Load() {
			w.Header().Set("Connection", "close")
			http.Error(w, id+" does not lead", http.StatusServiceUnavailable)
			return
		}
		_, _ = fmt.Fprintln(w, id)
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(l) }()
	defer func() { _ = srv.Close() }()

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	slices := client.DiscoveryV1().EndpointSlices(namespace)
	var written *discoveryv1.EndpointSlice
	acts, err := openActingLog(*actingLog, id, client, namespace, lease)
	if err != nil {
		return err
	}
	defer acts.close()

	var le *leaderelection.LeaderElector
	le, err = leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Namespace: namespace, Name: lease},
			Client:     client.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: id},
		},
		LeaseDuration:   leaseDuration,
		RenewDeadline:   renewDeadline,
		RetryPeriod:     retryPeriod,
		ReleaseOnCancel: true,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				klog.InfoS("became the leader", "identity", id)
				leading.Store(true)
				written, err = publish(ctx, client, namespace, service, id, address, int32(port))
				if err != nil {
					klog.ErrorS(err, "could not publish")
				}
				acts.run(ctx, le)
			},
			OnStoppedLeading: func() {
				leading.Store(false)
				acts.stop()
				if written == nil {
					return
				}
				// Delete only the slice this replica wrote, in case a new
				// leader has already rewritten it.
				dctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				err := slices.Delete(dctx, written.Name, metav1.DeleteOptions{
					Preconditions: &metav1.Preconditions{UID: &written.UID, ResourceVersion: &written.ResourceVersion},
				})
				if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
					klog.ErrorS(err, "could not withdraw the endpoint")
				}
			},
		},
	})
	if err != nil {
		return err
	}
	le.Run(ctx)
	if ctx.Err() == nil {
		return errors.New("leadership lost")
	}
	return nil
}

// publish writes the leader's slice (create, or update what is there) and
// deletes the Service's other slices.
func publish(ctx context.Context, client kubernetes.Interface, ns, service, id, address string, port int32) (*discoveryv1.EndpointSlice, error) {
	slices := client.DiscoveryV1().EndpointSlices(ns)
	want := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name:      service + "-leader",
			Namespace: ns,
			Labels: map[string]string{
				discoveryv1.LabelServiceName: service,
				discoveryv1.LabelManagedBy:   "leaderbaseline",
			},
			Annotations: map[string]string{"leader": id},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{
			Addresses:  []string{address},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)},
			TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: id},
		}},
		Ports: []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To(port)}},
	}
	got, err := slices.Get(ctx, want.Name, metav1.GetOptions{})
	var written *discoveryv1.EndpointSlice
	switch {
	case apierrors.IsNotFound(err):
		written, err = slices.Create(ctx, want, metav1.CreateOptions{})
	case err == nil:
		want.ResourceVersion = got.ResourceVersion
		written, err = slices.Update(ctx, want, metav1.UpdateOptions{})
	}
	if err != nil {
		return nil, err
	}
	others, err := slices.List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + service})
	if err != nil {
		return written, err
	}
	for _, s := range others.Items {
		if s.Name != want.Name {
			_ = slices.Delete(ctx, s.Name, metav1.DeleteOptions{})
		}
	}
	return written, nil
}
