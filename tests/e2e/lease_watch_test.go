package e2e

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/tools/cache"

	"github.com/fastover/fastover/internal/cluster"
)

// leaseVersion is one version of the Lease seen by the test's watch, and
// when it arrived.
type leaseVersion struct {
	at      time.Time
	holder  string
	term    int32 // spec.leaseTransitions
	renewed time.Time
}

// leaseWatch is the test's watch of a Lease: an informer (a list, then a
// watch that it renews, as a client-go user has it) that keeps every
// version it sees, and hands them over one by one (next, drain).
type leaseWatch struct {
	mu       sync.Mutex
	versions []leaseVersion
	ch       chan leaseVersion
}

func watchLease(ctx context.Context, t *testing.T, env *cluster.Env, ns, name string) *leaseWatch {
	t.Helper()
	w := &leaseWatch{ch: make(chan leaseVersion, 4096)}
	lw := cache.NewListWatchFromClient(env.Client.CoordinationV1().RESTClient(), "leases", ns, fields.OneTermEqualSelector("metadata.name", name))
	inf := cache.NewSharedIndexInformer(lw, &coordinationv1.Lease{}, 0, cache.Indexers{})
	report := func(obj any) {
		l, ok := obj.(*coordinationv1.Lease)
		if !ok {
			return
		}
		v := leaseVersion{at: time.Now()}
		if l.Spec.HolderIdentity != nil {
			v.holder = *l.Spec.HolderIdentity
		}
		if l.Spec.LeaseTransitions != nil {
			v.term = *l.Spec.LeaseTransitions
		}
		if l.Spec.RenewTime != nil {
			v.renewed = l.Spec.RenewTime.Time
		}
		w.mu.Lock()
		w.versions = append(w.versions, v)
		w.mu.Unlock()
		select {
		case w.ch <- v:
		default: // nobody reads them one by one: snapshot has them
		}
	}
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    report,
		UpdateFunc: func(_, obj any) { report(obj) },
	})
	require.NoError(t, err)
	go inf.RunWithContext(ctx)
	require.True(t, cache.WaitForCacheSync(ctx.Done(), inf.HasSynced), "the Lease informer did not sync")
	return w
}

// snapshot returns every version seen so far.
func (w *leaseWatch) snapshot() []leaseVersion {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.versions)
}

// drain returns the newest version not handed over yet (zero if none),
// passing each such version to each.
func (w *leaseWatch) drain(each func(leaseVersion)) leaseVersion {
	var last leaseVersion
	for {
		select {
		case v := <-w.ch:
			each(v)
			last = v
		default:
			return last
		}
	}
}

// holder returns the newest version that names a holder: the newest not
// handed over yet if it does, else the next that does, within timeout;
// each version passes through each.
func (w *leaseWatch) holder(ctx context.Context, timeout time.Duration, each func(leaseVersion)) (leaseVersion, error) {
	if v := w.drain(each); v.holder != "" {
		return v, nil
	}
	return w.next(ctx, timeout, func(v leaseVersion) bool { each(v); return v.holder != "" })
}

// next returns the first version not handed over yet that satisfies
// cond, waiting up to timeout for it.
func (w *leaseWatch) next(ctx context.Context, timeout time.Duration, cond func(leaseVersion) bool) (leaseVersion, error) {
	limit := time.NewTimer(timeout)
	defer limit.Stop()
	for {
		select {
		case v := <-w.ch:
			if cond(v) {
				return v, nil
			}
		case <-limit.C:
			return leaseVersion{}, fmt.Errorf("not seen within %v", timeout)
		case <-ctx.Done():
			return leaseVersion{}, ctx.Err()
		}
	}
}
