package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/fastover/fastover/leader"
)

// Every problem of a command line at once, with status 2; --help is no
// error.
func TestCommandLine(t *testing.T) {
	t.Setenv("POD_NAMESPACE", "")
	t.Setenv("POD_IP", "")
	for _, tc := range []struct {
		args []string
		code int
		want []string
	}{
		{[]string{"--help"}, 0, []string{"Usage: fastover-run [flags] -- COMMAND", "-ready-http", "Exit status"}},
		{[]string{}, 2, []string{"no COMMAND", "--lease is required", "--namespace is required"}},
		{[]string{"--lease=l", "--namespace=n", "--service=s", "--", "true"}, 2, []string{"--service needs the leader's address"}},
		{[]string{"--lease=l", "--namespace=n", "--ready-http=http://a/", "--ready-tcp=a:1", "--", "true"}, 2, []string{"give one check, not both"}},
		{[]string{"--lease=l", "--namespace=n", "--ready-tcp=8080", "--", "true"}, 2, []string{"want host:port"}},
		{[]string{"--lease=l", "--namespace=n", "--grace-period=0s", "--", "true"}, 2, []string{"--grace-period=0s"}},
		{[]string{"--lease=l", "--namespace=n", "--bogus", "--", "true"}, 2, []string{"flag provided but not defined: -bogus"}},
		{[]string{"--lease=l", "--namespace=n", "--", "no-such-command-anywhere"}, 127, []string{"no-such-command-anywhere", "not found"}},
	} {
		var out bytes.Buffer
		code := run(tc.args, &out)
		assert.Equal(t, tc.code, code, "%v:\n%s", tc.args, out.String())
		for _, w := range tc.want {
			assert.Contains(t, out.String(), w, "%v", tc.args)
		}
	}
}

// Flags after COMMAND are COMMAND's, with or without "--".
func TestCommandKeepsItsFlags(t *testing.T) {
	o, err := parseFlags([]string{"--lease=l", "--namespace=n", "my-ctl", "--lease=x", "-v"}, &bytes.Buffer{})
	require.NoError(t, err)
	assert.Equal(t, []string{"my-ctl", "--lease=x", "-v"}, o.command)
	assert.Equal(t, "l", o.lease)
	o, err = parseFlags([]string{"--lease=l", "--namespace=n", "--", "--odd-name"}, &bytes.Buffer{})
	require.NoError(t, err)
	assert.Equal(t, []string{"--odd-name"}, o.command)
}

// reviewing makes the fake API server answer a SelfSubjectRulesReview
// with rules.
func reviewing(client *fake.Clientset, incomplete bool, rules ...authorizationv1.ResourceRule) {
	client.PrependReactor("create", "selfsubjectrulesreviews", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, &authorizationv1.SelfSubjectRulesReview{Status: authorizationv1.SubjectRulesReviewStatus{ResourceRules: rules, Incomplete: incomplete}}, nil
	})
}

// allRules grants what PolicyRules asks for.
func allRules(ep *leader.EndpointConfig) []authorizationv1.ResourceRule {
	var out []authorizationv1.ResourceRule
	for _, r := range leader.PolicyRules(ep) {
		out = append(out, authorizationv1.ResourceRule{Verbs: r.Verbs, APIGroups: r.APIGroups, Resources: r.Resources})
	}
	return out
}

func TestPreflight(t *testing.T) {
	ctx := context.Background()
	ep := &leader.EndpointConfig{Service: "svc", Address: "10.0.0.1"}
	plain := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "svc"}}

	client := fake.NewClientset(plain)
	reviewing(client, false, allRules(ep)...)
	assert.NoError(t, preflight(ctx, client, "ns", ep), "everything there")

	client = fake.NewClientset(plain)
	reviewing(client, false, authorizationv1.ResourceRule{Verbs: []string{"*"}, APIGroups: []string{"*"}, Resources: []string{"*"}})
	assert.NoError(t, preflight(ctx, client, "ns", ep), "wildcards")

	client = fake.NewClientset()
	reviewing(client, false, allRules(ep)...)
	err := preflight(ctx, client, "ns", ep)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "Service ns/svc not found: create it without a selector")

	selector := plain.DeepCopy()
	selector.Spec.Selector = map[string]string{"app": "x"}
	client = fake.NewClientset(selector)
	reviewing(client, false, allRules(ep)...)
	err = preflight(ctx, client, "ns", ep)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "has a selector: remove it")

	// Leases only: the endpoint's permissions are missing, each named;
	// pods and events are optional.
	client = fake.NewClientset(plain)
	reviewing(client, false, allRules(nil)[0])
	err = preflight(ctx, client, "ns", ep)
	require.Error(t, err)
	for _, w := range []string{"get endpointslices.discovery.k8s.io", "delete endpointslices.discovery.k8s.io", "watch services", "update endpoints"} {
		assert.Contains(t, err.Error(), w)
	}
	assert.NotContains(t, err.Error(), "pods")
	assert.NotContains(t, err.Error(), "events")

	// A rule limited to resourceNames grants no list or watch.
	client = fake.NewClientset(plain)
	named := allRules(ep)
	named[0].ResourceNames = []string{"l"}
	reviewing(client, false, named...)
	err = preflight(ctx, client, "ns", ep)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "watch leases.coordination.k8s.io")

	// An incomplete review (another authorizer) is no error.
	client = fake.NewClientset(plain)
	reviewing(client, true)
	assert.NoError(t, preflight(ctx, client, "ns", ep))

	// Election only: no Service to check.
	client = fake.NewClientset()
	reviewing(client, false, allRules(nil)...)
	assert.NoError(t, preflight(ctx, client, "ns", nil))
}

func FuzzCommandLine(f *testing.F) {
	f.Add("--lease=l --namespace=n --ready-http=http://127.0.0.1:1/x -- true")
	f.Add("--ready-tcp=[::1]:80 --grace-period=1h")
	f.Fuzz(func(t *testing.T, line string) {
		o, err := parseFlags(strings.Fields(line), &bytes.Buffer{})
		if err == nil && !o.showVersion {
			if len(o.command) == 0 || o.lease == "" || o.namespace == "" || o.grace <= 0 {
				t.Fatalf("%q: accepted without what it needs: %+v", line, o)
			}
		}
	})
}

// --copy-to copies the binary (here, the test binary) into a directory,
// executable; a missing directory or a COMMAND beside it is an error.
func TestCopyTo(t *testing.T) {
	dir := t.TempDir()
	var out bytes.Buffer
	require.Equal(t, 0, run([]string{"--copy-to=" + dir}, &out), out.String())
	self, err := os.Executable()
	require.NoError(t, err)
	want, err := os.ReadFile(self)
	require.NoError(t, err)
	got, err := os.ReadFile(filepath.Join(dir, "fastover-run"))
	require.NoError(t, err)
	assert.Equal(t, want, got)
	info, err := os.Stat(filepath.Join(dir, "fastover-run"))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o755), info.Mode().Perm())
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Len(t, entries, 1, "no temporary file left")

	out.Reset()
	assert.Equal(t, 1, run([]string{"--copy-to=" + filepath.Join(dir, "missing")}, &out))
	assert.Contains(t, out.String(), "--copy-to:")
	out.Reset()
	assert.Equal(t, 2, run([]string{"--copy-to=" + dir, "--", "true"}, &out))
	assert.Contains(t, out.String(), "--copy-to takes no COMMAND")
}
