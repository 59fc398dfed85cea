package modules

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/mod/semver"

	"github.com/fastover/fastover/tests/docs"
)

func semverLess(a, b string) bool { return semver.Compare(a, b) < 0 }

// forbidden are modules of the root module's that a consumer of the
// leader library must never get.
var forbidden = []string{
	"sigs.k8s.io/controller-runtime",
	"github.com/google/go-containerregistry",
	"sigs.k8s.io/kustomize/",
	"github.com/spf13/cobra",
	"k8s.io/cli-runtime",
	"github.com/fastover/fastover", // the root module itself
}

// leaderAdds are the modules the leader library may add to a client-go
// controller's build list: the library, and the Prometheus client with the
// modules its go.mod files require (client-go has no Prometheus). Only the
// library and the Prometheus client's own modules are compiled in.
var leaderAdds = []string{
	leaderPath,
	"github.com/prometheus/client_golang",
	"github.com/prometheus/client_model",
	"github.com/prometheus/common",
	"github.com/prometheus/procfs",
	"github.com/beorn7/perks",
	"github.com/cespare/xxhash/v2",
	"github.com/klauspost/compress",
	"github.com/kylelemons/godebug",
	"github.com/jpillora/backoff",
	"github.com/julienschmidt/httprouter",
	"github.com/mwitkow/go-conntrack",
	"github.com/alecthomas/kingpin/v2",
	"github.com/alecthomas/units",
	"github.com/xhit/go-str2duration/v2",
	"gopkg.in/yaml.v2",
}

// goGetLine finds, in the Markdown file rel, the sh block that is exactly
// one `go get` of module, and returns its arguments after "go".
func goGetLine(t *testing.T, rel, module string) []string {
	t.Helper()
	d := readDoc(t, rel)
	for _, b := range d.Blocks {
		text := strings.TrimSpace(b.Text)
		if b.Lang == "sh" && strings.HasPrefix(text, "go get "+module) && !strings.Contains(text, "\n") {
			f := strings.Fields(text)
			if f[2] == module || strings.HasPrefix(f[2], module+"@") {
				return f[1:]
			}
		}
	}
	t.Fatalf("%s has no sh block `go get %s`", rel, module)
	return nil
}

func readDoc(t *testing.T, rel string) *docs.Document {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot(t), rel))
	require.NoError(t, err)
	return docs.Parse(rel, string(data))
}

// readmeSnippet is the README's Go block of the leader library: the first
// Go block after its `go get` line.
func readmeSnippet(t *testing.T) string {
	t.Helper()
	d := readDoc(t, "README.md")
	seen := false
	for _, b := range d.Blocks {
		if b.Lang == "sh" && strings.HasPrefix(strings.TrimSpace(b.Text), "go get "+leaderPath) {
			seen = true
		}
		if seen && b.Lang == "go" {
			require.Contains(t, b.Text, "leader.New(", "README.md:%d: the leader library's snippet", b.Line)
			return b.Text
		}
	}
	t.Fatal("README.md: no Go block after the leader library's go get line")
	return ""
}

// consumerResult is what adopting the library did to a consumer module.
type consumerResult struct {
	dir         string
	goMod       change // of the go.mod's requirements
	build       change // of the build list
	before      map[string]string
	after       map[string]string
	binary      string
	afterGoMod  map[string]string
	goGetOutput string
}

// adopt copies the consumer testdata/name (its go.mod and main.go) into a
// fresh module in dir, tidies it as its own project would be, then adopts the
// library as its users do: elect.go added, getArgs run (a docs' go get
// line), extra files added, go mod tidy; then builds it.
func adopt(t *testing.T, name, dir string, getArgs []string, extra map[string]string) *consumerResult {
	t.Helper()
	env := goEnv(t)
	src := filepath.Join("testdata", name)
	for _, f := range []string{"go.mod", "main.go"} {
		require.NoError(t, copyFile(filepath.Join(src, f), filepath.Join(dir, f)))
	}
	goOutput(t, dir, env, "mod", "tidy")
	r := &consumerResult{dir: dir, before: buildList(t, dir, env)}
	beforeGoMod := requires(t, dir)

	require.NoError(t, copyFile(filepath.Join(src, "elect.go"), filepath.Join(dir, "elect.go")))
	for f, content := range extra {
		require.NoError(t, os.WriteFile(filepath.Join(dir, f), []byte(content), 0o644))
	}
	r.goGetOutput = goOutput(t, dir, env, getArgs...)
	goOutput(t, dir, env, "mod", "tidy")
	r.after = buildList(t, dir, env)
	r.afterGoMod = requires(t, dir)
	r.build = diff(r.before, r.after)
	r.goMod = diff(beforeGoMod, r.afterGoMod)
	r.binary = filepath.Join(dir, name)
	goOutput(t, dir, env, "build", "-o", r.binary, ".")
	return r
}

func (r *consumerResult) log(t *testing.T, what string) {
	t.Helper()
	t.Logf("%s\n`go %s` said:\n%s\ngo.mod:\n%s\nbuild list (go list -m all: %d modules before, %d after):\n%s",
		what, "get", indent(r.goGetOutput), r.goMod, len(r.before), len(r.after), r.build)
}

func indent(s string) string {
	s = strings.TrimSpace(s)
	if s == "" {
		return "  (nothing)"
	}
	return "  " + strings.ReplaceAll(s, "\n", "\n  ")
}

// outside lists the modules of the list (as in change: "path ...") whose
// path is not one of allowed.
func outside(list []string, allowed []string) []string {
	ok := map[string]bool{}
	for _, a := range allowed {
		ok[a] = true
	}
	var out []string
	for _, l := range list {
		if p, _, _ := strings.Cut(l, " "); !ok[p] {
			out = append(out, l)
		}
	}
	return out
}

// forbiddenIn lists the modules of list ("path version") that are
// forbidden.
func forbiddenIn(list []string) []string {
	var out []string
	for _, l := range list {
		for _, f := range forbidden {
			// A path ending in / names every module under it.
			if (strings.HasSuffix(f, "/") && strings.HasPrefix(l, f)) || strings.HasPrefix(l, f+" ") {
				out = append(out, l)
			}
		}
	}
	sort.Strings(out)
	return out
}

// entries is a build list as "path version" lines.
func entries(m map[string]string) []string {
	var out []string
	for p, v := range m {
		out = append(out, p+" "+v)
	}
	return out
}

// clientGo is testdata/clientgo adopted once for the package's tests: the
// README's go get line, its snippet compiled beside.
var clientGo struct {
	once sync.Once
	r    *consumerResult
	ok   bool
}

func adoptClientGo(t *testing.T) *consumerResult {
	t.Helper()
	clientGo.once.Do(func() {
		get := goGetLine(t, "README.md", leaderPath)
		require.Equal(t, get, goGetLine(t, "docs/leader.md", leaderPath), "README.md and docs/leader.md give one go get line")
		snippets := map[string]string{"readme_snippet.go": docs.GoFile("main", readmeSnippet(t))}
		for i, b := range readDoc(t, "docs/leader.md").Blocks {
			if b.Lang == "go" && strings.Contains(b.Text, "leader.") {
				snippets[fmt.Sprintf("leader_md_snippet%d.go", i)] = docs.GoFile("main", b.Text)
			}
		}
		// In scratch: TestMinimumClientGoOnControlPlane runs its binary.
		dir, err := os.MkdirTemp(scratch, "clientgo-")
		require.NoError(t, err)
		clientGo.r = adopt(t, "clientgo", dir, get, snippets)
		t.Logf("compiled in the consumer: %s", strings.Join(slices.Sorted(maps.Keys(snippets)), ", "))
		clientGo.ok = true
	})
	if !clientGo.ok {
		t.Fatal("adopting the library in testdata/clientgo failed (see the first test that tried)")
	}
	return clientGo.r
}

// TestConsumerClientGo: a client-go v0.35 controller runs the README's go
// get line: it gets the library at the proxy's version, nothing of
// k8s.io/* moves, and nothing but the library and the Prometheus client
// joins its build list (no controller-runtime, go-containerregistry,
// kustomize or cobra); the README's snippet and docs/leader.md's compile
// in it.
func TestConsumerClientGo(t *testing.T) {
	_, version := startProxy(t)
	r := adoptClientGo(t)
	r.log(t, "a client-go v0.35 controller after `go get "+leaderPath+"` (README.md)")

	assert.Equal(t, version, r.afterGoMod[leaderPath], "go.mod requires the library at the proxy's version")
	assert.Equal(t, "v0.35.0", r.after["k8s.io/client-go"])
	for _, l := range append(r.build.upgraded, r.build.downgraded...) {
		assert.False(t, strings.HasPrefix(l, "k8s.io/"), "a k8s.io module moved: %s", l)
	}
	assert.Empty(t, r.build.removed)
	assert.Empty(t, forbiddenIn(entries(r.after)), "modules of the root module's in the build list")
	assert.Empty(t, outside(r.build.added, leaderAdds), "modules added to the build list outside the allowed set %v", leaderAdds)
	// go mod tidy also records modules that were in the build list already.
	var newToGoMod []string
	for _, l := range outside(r.goMod.added, leaderAdds) {
		if p, _, _ := strings.Cut(l, " "); r.before[p] == "" {
			newToGoMod = append(newToGoMod, l)
		}
	}
	assert.Empty(t, newToGoMod, "modules added to go.mod outside the allowed set and the build list before")
}

// TestConsumerControllerRuntime: a controller-runtime v0.22 operator runs
// docs/leader.md's go get line for leader/ctrlmanager: its
// controller-runtime stays where it was (the adapter needs v0.22.0), the
// k8s.io modules move to the library's minimum (v0.35.0) and no further,
// and nothing of the root module's joins.
func TestConsumerControllerRuntime(t *testing.T) {
	_, version := startProxy(t)
	get := goGetLine(t, "docs/leader.md", ctrlmanagerPath)
	r := adopt(t, "ctrlruntime", t.TempDir(), get, nil)
	r.log(t, "a controller-runtime v0.22.4 operator after `go get "+ctrlmanagerPath+"` (docs/leader.md)")

	assert.Equal(t, version, r.afterGoMod[ctrlmanagerPath])
	assert.Equal(t, version, r.after[leaderPath])
	assert.Equal(t, r.before["sigs.k8s.io/controller-runtime"], r.after["sigs.k8s.io/controller-runtime"],
		"controller-runtime is not upgraded: the adapter needs v0.22.0")
	for _, m := range []string{"k8s.io/client-go", "k8s.io/api", "k8s.io/apimachinery"} {
		assert.Equal(t, "v0.35.0", r.after[m], "%s: at the library's minimum, no newer", m)
	}
	for _, l := range r.build.downgraded {
		t.Errorf("downgraded: %s", l)
	}
	// The operator had controller-runtime (and cobra, through
	// apiextensions-apiserver) before: none of the root module's joins.
	assert.Empty(t, forbiddenIn(r.build.added), "modules of the root module's added to the build list")
}
