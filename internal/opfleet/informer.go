package opfleet

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/fastover/fastover/internal/cluster"
	"github.com/fastover/fastover/internal/fleet"
)

// LabelCache is the label of the ConfigMaps examples/informer-controller
// caches (its LabelCache).
const LabelCache = "example.fastover.io/cache"

// NewInformerFleet prepares a fleet of examples/informer-controller
// replicas: warm ones start their informers while standing by
// (leader.Config.Prepare), cold ones once they lead. Each replica serves
// /readyz on 127.0.0.1:<its MetricsPort> (ReadyAll waits for it).
func NewInformerFleet(env *cluster.Env, binary, namespace, name string, warm bool, d fleet.Durations) *Fleet {
	f := New(env, binary, namespace, name, Fastover, d)
	f.Args = func(r *Replica) []string {
		return []string{
			"--kubeconfig=" + env.Kubeconfig,
			"--namespace=" + namespace,
			"--lease=" + name,
			"--service=" + name,
			"--address=" + r.Address(),
			"--id=" + r.ID,
			"--warm=" + strconv.FormatBool(warm),
			"--probe-address=127.0.0.1:" + strconv.Itoa(r.MetricsPort),
			"--lease-duration=" + d.Lease.String(),
			"--renew-deadline=" + d.Renew.String(),
			"--retry-period=" + d.Retry.String(),
		}
	}
	return f
}

// WaitReady waits up to timeout for the replica's /readyz (informer
// fleets only): a warm replica is ready once its caches are synced.
func (f *Fleet) WaitReady(ctx context.Context, r *Replica, timeout time.Duration) error {
	url := "http://127.0.0.1:" + strconv.Itoa(r.MetricsPort) + "/readyz"
	err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		if r.Proc != nil && !r.Proc.Running() {
			return false, fmt.Errorf("%s exited: %w", r.ID, r.Proc.ExitErr())
		}
		resp, err := f.http.Get(url)
		if err != nil {
			return false, nil
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		return fmt.Errorf("%s not ready within %v: %w", r.ID, timeout, err)
	}
	return nil
}

// ReadyAll waits for every replica's /readyz.
func (f *Fleet) ReadyAll(ctx context.Context, timeout time.Duration) error {
	for _, r := range f.Replicas {
		if err := f.WaitReady(ctx, r, timeout); err != nil {
			return err
		}
	}
	return nil
}

// SeedConfigMaps creates n ConfigMaps labelled LabelCache=true in the
// namespace, each with about size bytes of data, with parallel requests;
// ones that exist already count. It is the cache the informer fleets
// hold.
func SeedConfigMaps(ctx context.Context, cfg *rest.Config, namespace string, n, size int) error {
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = -1, 0 // no client-side limit: the API server's own
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	value := strings.Repeat("x", max(size-100, 1))
	const workers = 16
	next := make(chan int)
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				cm := &corev1.ConfigMap{
					ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cached-%05d", i), Labels: map[string]string{LabelCache: "true"}},
					Data:       map[string]string{"index": strconv.Itoa(i), "payload": value},
				}
				_, err := client.CoreV1().ConfigMaps(namespace).Create(ctx, cm, metav1.CreateOptions{})
				if err != nil && !apierrors.IsAlreadyExists(err) {
					errs <- fmt.Errorf("create ConfigMap %s/%s: %w", namespace, cm.Name, err)
					return
				}
			}
		}()
	}
	var firstErr error
feed:
	for i := range n {
		select {
		case next <- i:
		case firstErr = <-errs:
			break feed
		}
	}
	close(next)
	wg.Wait()
	close(errs)
	return errors.Join(firstErr, <-errs)
}
