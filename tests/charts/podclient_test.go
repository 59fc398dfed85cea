package charts_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/fastover/fastover/internal/cluster"
)

// podClient is a client in a pod of a real node: `testhost get` calling a
// URL every 100 ms (or as given) on connections it keeps (Go's default transport), one
// line per call in its log, which the test reads through the API server.
type podClient struct {
	env       *cluster.Env
	namespace string
	name      string
}

// startPodClient starts the client's pod on node and waits until it runs.
func startPodClient(ctx context.Context, t *testing.T, env *cluster.Env, ns, name, node, url string) *podClient {
	t.Helper()
	return startPodClientEvery(ctx, t, env, ns, name, node, url, 100*time.Millisecond)
}

// startPodClientEvery is startPodClient with the calls every every.
func startPodClientEvery(ctx context.Context, t *testing.T, env *cluster.Env, ns, name, node, url string, every time.Duration) *podClient {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			NodeName:                      node,
			TerminationGracePeriodSeconds: new(int64),
			Containers: []corev1.Container{{
				Name: "client", Image: cluster.TestHostImage,
				Command: []string{"testhost", "get", "-every=" + every.String(), "-timeout=1s", url},
			}},
		},
	}
	_, err := env.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	require.NoError(t, err)
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := env.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		return err == nil && p.Status.Phase == corev1.PodRunning, nil
	}), "the client pod %s/%s does not run on %s", ns, name, node)
	return &podClient{env: env, namespace: ns, name: name}
}

// clientCall is one call of the client: when its answer came (or it
// failed), whether it got a 200, and the answer (the body's first line, or
// the error).
type clientCall struct {
	at     time.Time
	ok     bool
	answer string
}

// calls are the client's calls sent from since on, as its log says.
func (c *podClient) calls(ctx context.Context, t *testing.T, since time.Time) []clientCall {
	t.Helper()
	b, err := c.env.Client.CoreV1().Pods(c.namespace).GetLogs(c.name, &corev1.PodLogOptions{}).DoRaw(ctx)
	require.NoError(t, err, "the client's log")
	var out []clientCall
	for _, call := range cluster.ParseTestHostLog(b) {
		if !call.Sent.Before(since) {
			out = append(out, clientCall{at: call.Done(), ok: call.OK(), answer: call.Answer})
		}
	}
	return out
}

// callStats summarises calls: how many, how many failed, who answered
// (in order of first answer) and the longest time between two answered
// calls.
type callStats struct {
	calls, failed int
	answered      []string
	longestGap    time.Duration
}

func statsOf(calls []clientCall) callStats {
	var s callStats
	var last time.Time
	for _, c := range calls {
		s.calls++
		if !c.ok {
			s.failed++
			continue
		}
		if !last.IsZero() {
			s.longestGap = max(s.longestGap, c.at.Sub(last))
		}
		last = c.at
		if len(s.answered) == 0 || s.answered[len(s.answered)-1] != c.answer {
			s.answered = append(s.answered, c.answer)
		}
	}
	return s
}
