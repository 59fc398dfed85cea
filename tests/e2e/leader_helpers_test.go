package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/fastover/fastover/internal/cluster"
	"github.com/fastover/fastover/internal/fleet"
)

var shortDurations = fleet.Durations{Lease: 4 * time.Second, Renew: 3 * time.Second, Retry: time.Second}

// newFleet prepares replicas of fastover-example.
func newFleet(t *testing.T, env *cluster.Env, ns, svc string, d fleet.Durations, extra ...string) *fleet.Fleet {
	t.Helper()
	f, err := fleet.New(env, binary(t, "fastover-example"), ns, svc, d, extra...)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// startFleet starts a control plane and n replicas of fastover-example
// behind a selector-less Service "ctl" in namespace "ha".
func startFleet(ctx context.Context, t *testing.T, n int, d fleet.Durations, extra ...string) (*cluster.Env, *fleet.Fleet) {
	t.Helper()
	env := cluster.Start(t, cluster.Options{})
	if err := env.CreateNamespace(ctx, "ha", nil); err != nil {
		t.Fatal(err)
	}
	f := newFleet(t, env, "ha", "ctl", d, extra...)
	if err := f.CreateService(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if err := f.Add(n); err != nil {
		t.Fatal(err)
	}
	return env, f
}

func waitServing(ctx context.Context, t *testing.T, f *fleet.Fleet, not string, timeout time.Duration) string {
	t.Helper()
	id, err := f.WaitServing(ctx, not, timeout)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func mustWatch(ctx context.Context, t *testing.T, f *fleet.Fleet) *fleet.Log {
	t.Helper()
	l, err := f.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return l
}
