package e2e

import (
	"context"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/fastover/fastover/internal/cluster"
	"github.com/fastover/fastover/leader"
)

// TestLeaderSliceCarriesTheTerm: the leader's slice names it and its term,
// the Lease's transition count, which grows with every handover.
func TestLeaderSliceCarriesTheTerm(t *testing.T) {
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
