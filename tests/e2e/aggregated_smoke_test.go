package e2e

import (
	"context"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/fastover/fastover/internal/cluster"
	"github.com/fastover/fastover/internal/fleet"
	"github.com/fastover/fastover/internal/netns"
)

// TestAggregatedAPIServes: kube-apiserver is a client of the leader's
// endpoint (issue 16 §2). Three replicas of fastover-example serve the
// aggregated API example.fastover.io/v1alpha1 behind their selector-less
// Service, registered with an APIService; kube-apiserver
// (--enable-aggregator-routing) resolves the Service to the endpoint the
// leader publishes. Discovery lists the resource, a LIST through
// kube-apiserver names the leader, a replica refuses a caller without the
// front proxy's certificate, and after the leader's SIGTERM the LIST names
// the new leader.
func TestAggregatedAPIServes(t *testing.T) {
	t.Parallel()
	ns := netns.ForTest(t, netns.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	exe := binary(t, "fastover-example") // built before the clock starts
	start := time.Now()
	env := cluster.Start(t, cluster.Options{Netns: ns})
	t.Logf("%v: control plane up", time.Since(start).Round(time.Millisecond))
	require.NoError(t, env.CreateNamespace(ctx, "ha", nil))
	f, err := fleet.New(env, exe, "ha", "ctl", shortDurations)
	require.NoError(t, err)
	f.BindPublished = true
	require.NoError(t, f.EnableAPI())
	require.NoError(t, f.CreateService(ctx, nil))
	require.NoError(t, f.Add(3))
	leader := waitServing(ctx, t, f, "", 30*time.Second)
	t.Logf("%v: %s serves", time.Since(start).Round(time.Millisecond), leader)

	regStart := time.Now()
	require.NoError(t, f.RegisterAPIService(ctx))
	t.Logf("APIService %s Available %v after its creation", fleet.APIServiceName, time.Since(regStart).Round(time.Millisecond))

	// Discovery through kube-apiserver.
	res, err := env.Client.Discovery().ServerResourcesForGroupVersion(fleet.APIGroup + "/" + fleet.APIVersion)
	require.NoError(t, err)
	require.Len(t, res.APIResources, 2)
	assert.Equal(t, "replicas", res.APIResources[0].Name)
	assert.Equal(t, "Replica", res.APIResources[0].Kind)
	assert.Equal(t, "policies", res.APIResources[1].Name)

	// The LIST names the leader; a GET of it answers, of a standby 404.
	var got fleet.APIAnswer
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		got, err = f.CallAPI(ctx)
		return err == nil, nil
	}), "LIST through kube-apiserver: %v", err)
	assert.Equal(t, fleet.APIAnswer{ID: leader, Leading: true, Term: got.Term}, got)
	_, err = env.Client.CoreV1().RESTClient().Get().AbsPath(fleet.ReplicasPath, leader).DoRaw(ctx)
	require.NoError(t, err)
	standby := f.Replicas[0].ID
	if standby == leader {
		standby = f.Replicas[1].ID
	}
	_, err = env.Client.CoreV1().RESTClient().Get().AbsPath(fleet.ReplicasPath, standby).DoRaw(ctx)
	assert.True(t, apierrors.IsNotFound(err), "GET of the standby %s through kube-apiserver: %v", standby, err)

	// kubectl get asks for a Table: it gets one, of the leader.
	table, err := env.Client.CoreV1().RESTClient().Get().AbsPath(fleet.ReplicasPath).
		SetHeader("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io,application/json").DoRaw(ctx)
	require.NoError(t, err)
	assert.Contains(t, string(table), `"kind":"Table"`)
	assert.Contains(t, string(table), `"`+leader+`"`)

	// A replica refuses the API to a caller without the front proxy's
	// client certificate; / stays open.
	l := f.ByID(leader)
	code, _ := getRetrying(ctx, t, f, l.Address(), fleet.ReplicasPath)
	assert.Equal(t, http.StatusUnauthorized, code)
	code, body := getRetrying(ctx, t, f, l.Address(), "/")
	assert.Equal(t, http.StatusOK, code)
	assert.Equal(t, leader, body)

	t.Logf("%v: checks done", time.Since(start).Round(time.Millisecond))
	// SIGTERM: the LIST names the new leader. Answers from the old one
	// until then are counted, by what it says of itself.
	pubs := mustWatch(ctx, t, f)
	term := time.Now()
	require.NoError(t, l.Proc.Signal(syscall.SIGTERM))
	var next fleet.APIAnswer
	var failed, oldLeading, oldStandby int
	var lastErr error
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 20*time.Second, true, func(ctx context.Context) (bool, error) {
		a, err := f.CallAPI(ctx)
		if err != nil {
			failed++
			lastErr = err
			return false, nil
		}
		if a.ID == leader {
			if a.Leading {
				oldLeading++
			} else {
				oldStandby++
			}
			return false, nil
		}
		next = a
		return true, nil
	}), "no answer from a new leader through kube-apiserver; last error: %v", lastErr)
	gap := time.Since(term)
	assert.True(t, next.Leading, "the answer after the handover comes from a leader: %+v", next)
	assert.NotEqual(t, leader, next.ID)
	cond, err := f.APIServiceAvailable(ctx)
	require.NoError(t, err)
	t.Logf("SIGTERM of %s: %s answered through kube-apiserver %v later; before it %d answers from the old leader leading, %d from it no longer leading, %d failed calls (last: %v); APIService Available=%s (%s) since %s",
		leader, next.ID, gap.Round(time.Millisecond), oldLeading, oldStandby, failed, lastErr, cond.Status, cond.Reason, cond.LastTransitionTime.Format(time.RFC3339))
	for _, p := range pubs.Snapshot() {
		t.Logf("  published %v after the SIGTERM: %v", p.At.Sub(term).Round(time.Millisecond), p.Addrs)
	}
	l.Proc.Stop(syscall.SIGTERM, 10*time.Second)
	for _, line := range strings.Split(l.Proc.Tail(400), "\n") {
		if strings.Contains(line, "aggregated API request") {
			t.Log("  " + line)
		}
	}
	t.Logf("the test took %v", time.Since(start).Round(time.Second))
}

// getRetrying calls a replica directly, retrying for a few seconds if the
// call fails (the fleet's client gives up after 300 ms, a TLS handshake on
// a loaded machine can take longer).
func getRetrying(ctx context.Context, t *testing.T, f *fleet.Fleet, addr, path string) (int, string) {
	t.Helper()
	var code int
	var body string
	var err error
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		code, body, err = f.Get(addr, path)
		return err == nil, nil
	}), "GET %s from %s: %v", path, addr, err)
	return code, body
}
