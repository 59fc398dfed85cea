package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/fastover/fastover/tests/cluster"
	"github.com/fastover/fastover/tests/fleet"
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
