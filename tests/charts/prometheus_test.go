package charts_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/yaml"

	"github.com/fastover/fastover/certs"
	"github.com/fastover/fastover/internal/cluster"
	"github.com/fastover/fastover/internal/fleet"
	"github.com/fastover/fastover/internal/install"
	"github.com/fastover/fastover/tests/charts"
	"github.com/fastover/fastover/toleration"
	"github.com/fastover/fastover/webhook"
)

// TestPrometheusAlerts runs a real Prometheus (the pinned server, built by
// tests/tools/build.sh prometheus) with the fastover chart's rules on a
// local control plane. It scrapes a fastover-webhook replica and three
// replicas of fastover-example, each "in" a Pod whose status the test
// writes as a kubelet would. A healthy fleet and webhook fire nothing. A
// planned handover (SIGTERM) fires nothing either. Then the new leader is
// killed and its container reported ended: a standby takes over at once,
// FastoverLeaderCrashTakeover fires and FastoverLeaderMissing does not.
// Then every replica is killed: FastoverLeaderMissing fires. Last, the
// chart's webhook configuration is applied, the webhook stops and a pod of
// a labelled namespace is admitted without it: the API server's metrics
// (scraped too) fire FastoverWebhookFailingOpen. The alerts, and the terms
// by how they began, are read back from Prometheus' API.
//
// Simplified, and said so: Prometheus scrapes static targets (the
// processes' addresses, with the labels a PodMonitor would give them)
// every second, and the rules are rendered with noLeaderFor=10s, so that
// the test takes seconds, not minutes.
func TestPrometheusAlerts(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	bin, err := cluster.BinDir()
	require.NoError(t, err)
	env := cluster.Start(t, cluster.Options{})

	// The webhook: one replica, its certificate from a CA of the test's.
	const hookNS = "fastover-system"
	require.NoError(t, env.CreateNamespace(ctx, hookNS, nil))
	const validity = 30 * 24 * time.Hour // far from FastoverWebhookCertificateExpiresSoon's 7 days
	ca, err := certs.NewCA("prometheus-test", validity)
	require.NoError(t, err)
	ip := machineIPv4(t)
	kp, err := ca.Issue([]string{ip}, validity)
	require.NoError(t, err)
	certDir := t.TempDir()
	require.NoError(t, certs.WriteDir(certDir, kp, ca))
	hook := startReplica(ctx, t, env, hookNS, "fastover-webhook", ip, certDir, 1, nil)
	defer hook.Proc.Stop(syscall.SIGTERM, 10*time.Second)

	// The fleet: three replicas in Pods, crash takeover on.
	const ns = "team"
	require.NoError(t, env.CreateNamespace(ctx, ns, nil))
	f, err := fleet.New(env, binary(t, "fastover-example"), ns, "ctl",
		fleet.Durations{Lease: 4 * time.Second, Renew: 3 * time.Second, Retry: time.Second})
	require.NoError(t, err)
	require.NoError(t, f.CreateService(ctx, nil))
	release, err := f.AddPodReplicas(ctx, 3, map[string]string{"app": "ctl"})
	t.Cleanup(release)
	require.NoError(t, err)
	defer fleet.StopAll(f.Replicas)
	for _, r := range f.Replicas {
		require.NoError(t, fleet.SetPodStatus(ctx, env.Client, ns, r.ID, true, nil))
		require.NoError(t, f.Start(r))
	}
	first, err := f.WaitServing(ctx, "", time.Minute)
	require.NoError(t, err)

	// Prometheus, scraping every second, with the chart's rules.
	dir := t.TempDir()
	rules := ruleSpec(t, "monitoring.prometheusRule.enabled=true", "monitoring.prometheusRule.leaders.noLeaderFor=10s")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "rules.yaml"), rules, 0o600))
	targets := []map[string]any{{
		"targets": []string{strings.TrimSuffix(strings.TrimPrefix(hook.Metrics, "http://"), "/metrics")},
		"labels":  map[string]string{"job": "fastover-webhook", "namespace": hookNS, "pod": "fastover-webhook-1"},
	}}
	for _, r := range f.Replicas {
		u, err := f.URL(r, "/metrics")
		require.NoError(t, err)
		pu, err := url.Parse(u)
		require.NoError(t, err)
		targets = append(targets, map[string]any{
			"targets": []string{pu.Host},
			"labels":  map[string]string{"job": "ctl", "namespace": ns, "pod": r.ID},
		})
	}
	// The API server too: its admission metrics say when it admitted pods
	// without calling the webhook.
	apiserver, err := url.Parse(env.Config.Host)
	require.NoError(t, err)
	config, err := yaml.Marshal(map[string]any{
		"global":     map[string]any{"scrape_interval": "1s", "scrape_timeout": "900ms", "evaluation_interval": "1s"},
		"rule_files": []string{filepath.Join(dir, "rules.yaml")},
		"scrape_configs": []map[string]any{
			{"job_name": "fastover", "honor_labels": true, "static_configs": targets},
			{
				"job_name": "apiserver", "scheme": "https",
				"authorization":  map[string]any{"credentials": env.Config.BearerToken},
				"tls_config":     map[string]any{"insecure_skip_verify": true},
				"static_configs": []map[string]any{{"targets": []string{apiserver.Host}}},
			},
		},
	})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "prometheus.yml"), config, 0o600))
	ports, err := cluster.FreePorts(1)
	require.NoError(t, err)
	api := "http://127.0.0.1:" + strconv.Itoa(ports[0])
	prom, err := env.StartProcess("prometheus", filepath.Join(bin, "prometheus"),
		"--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0])),
		"--log.level=warn")
	require.NoError(t, err)
	defer prom.Stop(syscall.SIGTERM, 10*time.Second)

	// Every target scraped, the webhook's certificate among the series.
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		up, err := promQuery(ctx, api, `sum(up)`)
		return err == nil && len(up) == 1 && up[0] == 5, nil
	}), "Prometheus did not scrape the five targets")
	expiry, err := promQuery(ctx, api, `fastover_webhook_certificate_expiry_timestamp_seconds{job="fastover-webhook"}`)
	require.NoError(t, err)
	require.Len(t, expiry, 1)
	assert.InDelta(t, float64(time.Now().Add(validity).Unix()), expiry[0], 120, "the served certificate's end")
	standbys, err := promQuery(ctx, api, `count((fastover_leader_ready{job="ctl"} == 1) and (fastover_leader_is_leader{job="ctl"} == 0))`)
	require.NoError(t, err)
	assert.Equal(t, []float64{2}, standbys, "two warm standbys")
	time.Sleep(3 * time.Second) // a few evaluations of every rule
	assert.Empty(t, alertStates(ctx, t, api), "alerts pending or firing on a healthy fleet and webhook")

	// A planned handover: SIGTERM to the leader. Watched for longer than
	// the no-leader alert's wait, it fires nothing.
	fleet.ByID(f.Replicas, first).Proc.Stop(syscall.SIGTERM, 10*time.Second)
	stopped := time.Now()
	second, err := f.WaitServing(ctx, first, time.Minute)
	require.NoError(t, err)
	t.Logf("%s took over from %s %v after the SIGTERM", second, first, time.Since(stopped).Round(time.Millisecond))
	seen := watchAlerts(ctx, t, api, stopped.Add(15*time.Second), nil)
	assert.Empty(t, firingOf(seen), "a planned handover fired alerts (states seen: %v)", seen)
	assert.Equal(t, []float64{1}, beganCount(ctx, t, api, "handover"), "the new leader's term, by how it began")

	// A crash: the leader is killed and its container reported ended.
	fleet.ByID(f.Replicas, second).Proc.Stop(syscall.SIGKILL, 0)
	require.NoError(t, fleet.SetPodStatus(ctx, env.Client, ns, second, false, &corev1.ContainerStateTerminated{
		ExitCode: 137, Reason: "Error", FinishedAt: metav1.Time{Time: time.Now().Add(time.Second).Truncate(time.Second)},
	}))
	crashed := time.Now()
	third, err := f.WaitServing(ctx, second, time.Minute)
	require.NoError(t, err)
	t.Logf("%s took over from %s %v after the kill", third, second, time.Since(crashed).Round(time.Millisecond))
	var firedAt time.Duration
	seen = watchAlerts(ctx, t, api, crashed.Add(15*time.Second), func(states map[string]string) {
		if firedAt == 0 && states["FastoverLeaderCrashTakeover"] == "firing" {
			firedAt = time.Since(crashed)
		}
	})
	t.Logf("alert states seen after the crash: %v; FastoverLeaderCrashTakeover firing %v after the kill", seen, firedAt.Round(time.Millisecond))
	assert.Equal(t, "firing", seen["FastoverLeaderCrashTakeover"])
	assert.NotEqual(t, "firing", seen["FastoverLeaderMissing"], "a crash takeover fired the no-leader alert")
	assert.Equal(t, []float64{1}, beganCount(ctx, t, api, "crash-takeover"))

	// Every replica gone: the no-leader alert fires once its wait is over.
	fleet.StopAll(f.Replicas)
	gone := time.Now()
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		return alertStates(ctx, t, api)["FastoverLeaderMissing"] == "firing", nil
	}), "FastoverLeaderMissing did not fire with every replica gone")
	took := time.Since(gone)
	t.Logf("FastoverLeaderMissing firing %v after every replica stopped", took.Round(time.Millisecond))
	assert.GreaterOrEqual(t, took, 10*time.Second, "fired before its wait (noLeaderFor=10s)")

	// The webhook goes; the API server admits a pod of a labelled
	// namespace without it (failurePolicy Ignore), and its metrics say so:
	// FastoverWebhookFailingOpen fires. The configuration is the chart's,
	// pointed at the replica by URL as overlays/local does.
	mwc := charts.Find(render(t, charts.Webhook, hookNS, "certificates.source=secret", "certificates.caBundle="+string(ca.CertPEM)),
		"MutatingWebhookConfiguration", "fastover")
	require.NotNil(t, mwc)
	require.NoError(t, install.SetWebhookURL(mwc, "https://"+net.JoinHostPort(ip, strconv.Itoa(hook.Port))+webhook.Path))
	applier, err := install.NewApplier(env.Config)
	require.NoError(t, err)
	_, err = applier.Apply(ctx, []*unstructured.Unstructured{mwc}, install.ApplyOptions{})
	require.NoError(t, err)
	const injected = "injected"
	require.NoError(t, env.CreateNamespace(ctx, injected, map[string]string{toleration.NamespaceLabel: toleration.NamespaceLabelValue}))
	require.NoError(t, install.WaitInjecting(ctx, env.Client, injected, time.Minute))
	assert.NotContains(t, alertStates(ctx, t, api), "FastoverWebhookFailingOpen", "while the webhook serves")
	hook.Proc.Stop(syscall.SIGTERM, 10*time.Second)
	// Two pods: the API server creates its fail-open series at the first
	// failure, and this Prometheus is too young for the rule to count a
	// new series whole (it needs data from before the window, so that a
	// restarted Prometheus does not page for old failures; promtool tests
	// that path): the second failure is the increase it sees.
	admit := func(name string) {
		t.Helper()
		pod, err := env.Client.CoreV1().Pods(injected).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}}},
		}, metav1.CreateOptions{})
		require.NoError(t, err, "failurePolicy Ignore admits the pod")
		assert.NotContains(t, pod.Annotations, toleration.AnnotationInjected, "admitted without the webhook")
	}
	admit("unmutated-1")
	failOpen := `apiserver_admission_webhook_fail_open_count{name="pods.fastover.io"}`
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		v, err := promQuery(ctx, api, failOpen)
		return err == nil && len(v) == 1 && v[0] == 1, nil
	}), "the API server's %s", failOpen)
	admit("unmutated-2")
	failed := time.Now()
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		return alertStates(ctx, t, api)["FastoverWebhookFailingOpen"] == "firing", nil
	}), "FastoverWebhookFailingOpen did not fire")
	t.Logf("FastoverWebhookFailingOpen firing %v after the second pod admitted without the webhook", time.Since(failed).Round(time.Millisecond))
}

// watchAlerts polls Prometheus' alerts until the deadline and returns the
// worst state each alert reached (firing over pending); each poll's states
// also go to f, if set.
func watchAlerts(ctx context.Context, t *testing.T, api string, until time.Time, f func(map[string]string)) map[string]string {
	t.Helper()
	seen := map[string]string{}
	for time.Now().Before(until) {
		states := alertStates(ctx, t, api)
		for name, state := range states {
			if seen[name] != "firing" {
				seen[name] = state
			}
		}
		if f != nil {
			f(states)
		}
		time.Sleep(250 * time.Millisecond)
	}
	return seen
}

// firingOf are the names of the alerts that fired.
func firingOf(seen map[string]string) []string {
	var out []string
	for name, state := range seen {
		if state == "firing" {
			out = append(out, name)
		}
	}
	return out
}

// beganCount is the fleet's count of terms begun the given way, summed
// over the replicas Prometheus scrapes now.
func beganCount(ctx context.Context, t *testing.T, api, began string) []float64 {
	t.Helper()
	v, err := promQuery(ctx, api, `sum(fastover_leader_leaderless_seconds_count{job="ctl",began="`+began+`"})`)
	require.NoError(t, err)
	return v
}

// promQuery runs an instant query and returns the values of its vector.
func promQuery(ctx context.Context, api, q string) ([]float64, error) {
	var res struct {
		Status string `json:"status"`
		Data   struct {
			Result []struct {
				Value [2]any `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := promGet(ctx, api+"/api/v1/query?query="+url.QueryEscape(q), &res); err != nil {
		return nil, err
	}
	var out []float64
	for _, r := range res.Data.Result {
		s, _ := r.Value[1].(string)
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return nil, fmt.Errorf("%s: value %q: %w", q, s, err)
		}
		out = append(out, v)
	}
	return out, nil
}

// alertStates returns the state (pending, firing) of every active alert,
// by name.
func alertStates(ctx context.Context, t *testing.T, api string) map[string]string {
	t.Helper()
	var res struct {
		Data struct {
			Alerts []struct {
				Labels map[string]string `json:"labels"`
				State  string            `json:"state"`
			} `json:"alerts"`
		} `json:"data"`
	}
	require.NoError(t, promGet(ctx, api+"/api/v1/alerts", &res))
	out := map[string]string{}
	for _, a := range res.Data.Alerts {
		if out[a.Labels["alertname"]] != "firing" {
			out[a.Labels["alertname"]] = a.State
		}
	}
	return out
}

func promGet(ctx context.Context, u string, into any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", u, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(into)
}
