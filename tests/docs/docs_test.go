package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"

	"github.com/fastover/fastover/leader"
	"github.com/fastover/fastover/toleration"
)

// repoRoot is the module's root: the directory above this package's that
// holds go.mod.
func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	require.NoError(t, err)
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && strings.HasPrefix(string(b), "module "+module+"\n") {
			return dir
		}
		parent := filepath.Dir(dir)
		require.NotEqual(t, dir, parent, "no go.mod of %s above the test's directory", module)
		dir = parent
	}
}

// documents are the Markdown files the checker reads, relative to root:
// every .md file of the repository outside bin/, hidden directories and
// testdata (README.md, CONTRIBUTING.md, SECURITY.md, CHANGELOG.md, docs/,
// the READMEs of examples/ and charts/).
func documents(t *testing.T, root string) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(root, func(p string, e os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if e.IsDir() {
			if p != root && (strings.HasPrefix(e.Name(), ".") || e.Name() == "bin" || e.Name() == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(p, ".md") {
			rel, err := filepath.Rel(root, p)
			if err != nil {
				return err
			}
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	require.NoError(t, err)
	require.Contains(t, files, "README.md")
	return files
}

// TestDocs checks every link, command, inline reference and Go snippet of
// fastover's documentation against this tree.
func TestDocs(t *testing.T) {
	root := repoRoot(t)
	c, err := NewChecker(root, Options{
		Flags:   &BuiltBinaries{Root: root, Dir: t.TempDir()},
		RepoURL: "https://github.com/fastover/fastover",
	})
	require.NoError(t, err)

	var snippets []Snippet
	var links, blocks, spans int
	for _, f := range documents(t, root) {
		d, err := c.Load(f)
		require.NoError(t, err)
		for _, p := range c.Check(d, f == "CHANGELOG.md") {
			t.Error(p)
		}
		links, blocks, spans = links+len(d.Links), blocks+len(d.Blocks), spans+len(d.Spans)
		for _, b := range d.Blocks {
			if b.Lang == "go" {
				snippets = append(snippets, Snippet{Doc: f, Block: b})
			}
		}
	}
	ps, err := CompileSnippets(root, t.TempDir(), snippets)
	require.NoError(t, err)
	for _, p := range ps {
		t.Error(p)
	}
	t.Logf("checked %d documents: %d links, %d code blocks (%d Go snippets compiled), %d inline code spans",
		len(documents(t, root)), links, blocks, len(snippets), spans)
}

// TestFrontPage keeps README.md a front page: at most 200 lines, no test
// names, no flag tables (docs/ has those), and the leader snippet, which
// TestDocs compiles.
func TestFrontPage(t *testing.T) {
	root := repoRoot(t)
	b, err := os.ReadFile(filepath.Join(root, "README.md"))
	require.NoError(t, err)
	text := string(b)
	lines := strings.Count(text, "\n")
	assert.LessOrEqual(t, lines, 200, "README.md is a front page: move details to docs/")
	assert.GreaterOrEqual(t, lines, 100, "README.md should still tell what fastover does, the demo, the install and the leader snippet")
	for _, name := range regexp.MustCompile(`\b(?:Test|Benchmark)[A-Z]\w+`).FindAllString(text, -1) {
		t.Errorf("README.md names the test %s: test names belong in docs/", name)
	}
	assert.NotRegexp(t, `(?m)^\|\s*flag\b`, text, "README.md has a flag table: the flags are in docs/ and --help")
	d := Parse("README.md", text)
	var leaderSnippet bool
	for _, blk := range d.Blocks {
		leaderSnippet = leaderSnippet || (blk.Lang == "go" && strings.Contains(blk.Text, "leader.New("))
	}
	assert.True(t, leaderSnippet, "README.md shows the leader library's use in a Go block")
}

// fakeFlags answers for binaries without building them.
type fakeFlags map[string][]string

func (f fakeFlags) Flags(binary, sub string) (map[string]bool, error) {
	m := map[string]bool{"h": true, "help": true}
	for _, name := range f[binary] {
		m[name] = true
	}
	return m, nil
}

func (f fakeFlags) Subcommands(binary string) ([]string, error) {
	if binary == "kubectl-fastover" {
		return []string{"audit", "fix"}, nil
	}
	return nil, nil
}

// fixture is a small repository to check documents against.
func fixture(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	files := map[string]string{
		"Makefile":                     "GRACE ?=\n.PHONY: test demo\ntest: ## tests\n\tgo test ./...\ndemo:\n\t@bin/fastover-demo $(GRACE)\n",
		"docs/a.md":                    "# Alpha\n\n## The knobs\n",
		"manifests/kustomization.yaml": "resources: []\n",
		"charts/c/Chart.yaml":          "name: c\n",
		"charts/c/values.yaml":         "replicas: 2\nrule:\n  tolerationSeconds: 0\n",
		"charts/c/values.schema.json":  `{"properties": {"certificates": {"properties": {"caBundle": {"type": "string"}}}}}`,
		"cmd/x/main.go":                "package main\n\nfunc main() {}\n",
		"internal/pkg/pkg.go":          "package pkg\n\n// Exported is.\nfunc Exported() {}\n\n// T is.\ntype T struct{ F int }\n\n// M is.\nfunc (T) M() {}\n",
		"internal/pkg/pkg_test.go":     "package pkg\n\nimport \"testing\"\n\nfunc TestReal(t *testing.T) {}\n",
		"tests/tools/build.sh":         "#!/bin/sh\n",
	}
	for name, content := range files {
		p := filepath.Join(root, filepath.FromSlash(name))
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
	}
	return root
}

// TestCheckerFindsBrokenDocs proves that each check fails on what it is
// there to catch, and passes what is right.
func TestCheckerFindsBrokenDocs(t *testing.T) {
	root := fixture(t)
	flags := fakeFlags{
		"fastover-webhook": {"toleration-seconds", "reconcile"},
		"kubectl-fastover": {"A", "all-namespaces", "n", "namespace", "dry-run", "o"},
		"fastover-certs":   {"cert-dir", "hosts"},
	}
	sh := func(s string) string { return "```sh\n" + s + "\n```\n" }
	cases := []struct {
		name    string
		doc     string
		history bool
		want    string // a problem's text; "" for none
	}{
		{name: "all good", doc: "# Top\n\nSee [a](docs/a.md#the-knobs), [top](#top), [web](https://example.com/x), " +
			"[repo](https://github.com/fastover/fastover/blob/main/internal/pkg/pkg.go), <https://example.com>, `internal/pkg`, " +
			"`TestReal`, `pkg.T.M`, `pkg.Exported`, `make demo`, `kubectl fastover audit -A`.\n\n" +
			sh("# a comment\nmake test\nGRACE=50s make demo\ngo test -count=1 -run '^TestReal$' ./internal/pkg/\ngo build -o bin/ ./cmd/... \\\n  ./cmd/x\n"+
				"kubectl apply -k manifests/\nkubectl apply -f https://example.com/x.yaml\nhelm install c charts/c -n ns --set replicas=3 --set rule.tolerationSeconds=5 --set-file certificates.caBundle=ca.crt\n"+
				"fastover-webhook --toleration-seconds=5 --reconcile\nbin/fastover-certs --cert-dir /tmp/x --hosts a.b\nkubectl fastover fix --dry-run -n shop\ntests/tools/build.sh kube\ncd internal && go vet ./pkg\necho ok | sha256sum > out.txt 2>&1") +
			"```console\n$ kubectl fastover audit\nNAMESPACE  POD\n$ make test\n```\n\n```yaml\na: [1, 2]\n```\n" +
			"<!-- docs: flags fastover-webhook -->\n| flag | |\n| --- | --- |\n| `--toleration-seconds` | x |\n"},
		{name: "missing file", doc: "[x](docs/missing.md)\n", want: "docs/missing.md does not exist"},
		{name: "missing anchor in another file", doc: "[x](docs/a.md#beta)\n", want: "no heading of docs/a.md makes the anchor #beta"},
		{name: "missing anchor here", doc: "# Top\n[x](#nowhere)\n", want: "makes the anchor #nowhere"},
		{name: "link out of the repository", doc: "[x](../outside.md)\n", want: "leaves the repository"},
		{name: "link with another scheme", doc: "[x](ftp://example.com/x)\n", want: `scheme "ftp"`},
		{name: "absolute link to a missing file", doc: "[x](https://github.com/fastover/fastover/blob/main/gone.go)\n", want: "gone.go does not exist in this repository"},
		{name: "make target", doc: sh("make nosuch"), want: `make target "nosuch" is not in the Makefile`},
		{name: "make target in a console block", doc: "```console\n$ make nosuch\noutput\n```\n", want: `make target "nosuch"`},
		{name: "make target inline", doc: "Run `make nosuch`.\n", want: `make target "nosuch"`},
		{name: "make variable", doc: sh("NOPE=1 make test"), want: "variable NOPE is not used by the Makefile"},
		{name: "go package", doc: sh("go test ./nosuch/"), want: "package ./nosuch/: nosuch does not exist"},
		{name: "go package without Go files", doc: sh("go build ./manifests"), want: "no Go files in manifests"},
		{name: "go test name", doc: sh("go test -run TestGone ./internal/pkg"), want: "-run TestGone: no such test in internal/pkg"},
		{name: "kubectl path", doc: sh("kubectl apply -k manifests/overlays/gone"), want: "manifests/overlays/gone does not exist"},
		{name: "helm chart", doc: sh("helm install x charts/gone"), want: "charts/gone/Chart.yaml does not exist"},
		{name: "helm value", doc: sh("helm upgrade x charts/c --set rule.nope=1"), want: "chart charts/c has no value rule.nope"},
		{name: "flag of a binary", doc: sh("fastover-webhook --nosuch=1"), want: "fastover-webhook has no flag --nosuch=1"},
		{name: "flags after -- are the command's", doc: sh("fastover-webhook --reconcile -- my-ctl --its-own")},
		{name: "a flag before -- is checked", doc: sh("fastover-webhook --nosuch -- my-ctl --reconcile"), want: "fastover-webhook has no flag --nosuch"},
		{name: "flag of a built binary", doc: sh("bin/fastover-certs --ca-dri x"), want: "fastover-certs has no flag --ca-dri"},
		{name: "not a binary of fastover's", doc: sh("bin/fastover-gone --x"), want: "bin/fastover-gone is not one of fastover's binaries"},
		{name: "plugin subcommand", doc: sh("kubectl fastover repair"), want: `kubectl-fastover has no subcommand "repair"`},
		{name: "plugin flag", doc: sh("kubectl fastover audit --all"), want: "kubectl-fastover audit has no flag --all"},
		{name: "script", doc: sh("tests/tools/gone.sh"), want: "tests/tools/gone.sh does not exist"},
		{name: "cd", doc: sh("cd internal/gone && go get x"), want: "directory internal/gone does not exist"},
		{name: "package after cd", doc: sh("cd internal && go vet ./gone"), want: "internal/gone does not exist"},
		{name: "unknown command", doc: sh("frobnicate --now"), want: `unknown command "frobnicate"`},
		{name: "inline path", doc: "Read `internal/gone/doc.go`.\n", want: "internal/gone/doc.go does not exist"},
		{name: "inline test name", doc: "`TestGone` proves it.\n", want: "no test function of that name"},
		{name: "inline identifier", doc: "Call `pkg.Missing`.\n", want: "package pkg (internal/pkg) declares no Missing"},
		{name: "inline method", doc: "Call `pkg.T.Nope()`.\n", want: "pkg.T has no method or field Nope"},
		{name: "flag table", doc: "<!-- docs: flags fastover-webhook -->\n| flag |\n| --- |\n| `--gone` |\n", want: "fastover-webhook has no flag --gone"},
		{name: "YAML", doc: "```yaml\na: [1\n```\n", want: "YAML block"},
		{name: "history names what is gone", doc: "Moved from `internal/gone`.\n", history: true},
		{name: "history still checks links", doc: "[x](gone.md)\n", history: true, want: "gone.md does not exist"},
		{name: "unknown package prefix is not checked", doc: "`admission.PatchResponseFromRaw`, `overlays/tuned`, `bin/fastover-webhook`\n"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := NewChecker(root, Options{Flags: flags, RepoURL: "https://github.com/fastover/fastover"})
			require.NoError(t, err)
			ps := c.Check(Parse("README.md", tc.doc), tc.history)
			var got []string
			for _, p := range ps {
				got = append(got, p.String())
			}
			if tc.want == "" {
				assert.Empty(t, got)
				return
			}
			require.NotEmpty(t, got, "the checker let this pass")
			assert.Contains(t, strings.Join(got, "\n"), tc.want)
		})
	}
}

// TestCompileSnippets proves that a Go block that does not compile is
// reported at its line in its document, and one that does is not.
func TestCompileSnippets(t *testing.T) {
	root := repoRoot(t)
	good := CodeBlock{Lang: "go", Line: 10, Text: "d := leader.DefaultLeaseDuration\nfmt.Println(d, ctx, t, clientset)"}
	decl := CodeBlock{Lang: "go", Line: 20, Text: "func TestX(t *testing.T) {\n\tt.Log(time.Second)\n}"}
	bad := CodeBlock{Lang: "go", Line: 30, Text: "// comment\nleader.NoSuchThing()"}
	ps, err := CompileSnippets(root, t.TempDir(), []Snippet{{Doc: "a.md", Block: good}, {Doc: "b.md", Block: decl}, {Doc: "c.md", Block: bad}})
	require.NoError(t, err)
	require.Len(t, ps, 1, "%v", ps)
	assert.Equal(t, "c.md", ps[0].File)
	assert.Equal(t, 31, ps[0].Line)
	assert.Contains(t, ps[0].Msg, "NoSuchThing")
}

func TestSlug(t *testing.T) {
	for heading, want := range map[string]string{
		"Retrofit: kubectl fastover and the reconciler": "retrofit-kubectl-fastover-and-the-reconciler",
		"Without cert-manager: fastover-certs":          "without-cert-manager-fastover-certs",
		"Failing open, and failing closed":              "failing-open-and-failing-closed",
		"The `leader` library":                          "the-leader-library",
		"[Unreleased]":                                  "unreleased",
		"snake_case and 1.2":                            "snake_case-and-12",
	} {
		assert.Equal(t, want, Slug(heading), heading)
	}
}

func TestSplitShell(t *testing.T) {
	for line, want := range map[string][][]string{
		`make test`:                              {{"make", "test"}},
		`GRACE=50s make demo # the default`:      {{"GRACE=50s", "make", "demo"}},
		`cd a && go get x; echo "a b" | cat`:     {{"cd", "a"}, {"go", "get", "x"}, {"echo", "a b"}, {"cat"}},
		`helm x --set-file k=ca.crt > out 2>&1`:  {{"helm", "x", "--set-file", "k=ca.crt"}},
		`kubectl fastover audit --webhook=''`:    {{"kubectl", "fastover", "audit", "--webhook="}},
		`go test -run '^TestA$' ./x/ 2>&1 | tee`: {{"go", "test", "-run", "^TestA$", "./x/"}, {"tee"}},
	} {
		assert.Equal(t, want, splitShell(line), line)
	}
}

func TestParseHelpFlags(t *testing.T) {
	f := ParseHelpFlags("Usage of x:\n  -cert-dir string\n    \tdir\n  -version\n\nFlags:\n  -A, --all-namespaces   all\n      --webhook string   the webhook\n")
	for _, name := range []string{"cert-dir", "version", "A", "all-namespaces", "webhook", "help", "h"} {
		assert.True(t, f[name], name)
	}
	assert.False(t, f["dir"])
}

// TestLeaderRoleInDocs keeps the Role that docs/leader.md shows equal to
// leader.PolicyRules, the Role's one home, for an endpoint with
// RemoveSelector.
func TestLeaderRoleInDocs(t *testing.T) {
	root := repoRoot(t)
	b, err := os.ReadFile(filepath.Join(root, "docs", "leader.md"))
	require.NoError(t, err)
	var found bool
	for _, blk := range Parse("docs/leader.md", string(b)).Blocks {
		if blk.Lang != "yaml" || !strings.HasPrefix(strings.TrimSpace(blk.Text), "rules:") {
			continue
		}
		found = true
		var role struct {
			Rules []rbacv1.PolicyRule `json:"rules"`
		}
		require.NoError(t, yaml.UnmarshalStrict([]byte(blk.Text), &role))
		want := leader.PolicyRules(&leader.EndpointConfig{RemoveSelector: true})
		if !assert.Equal(t, want, role.Rules, "docs/leader.md:%d: the Role differs from leader.PolicyRules", blk.Line) {
			y, err := yaml.Marshal(map[string]any{"rules": want})
			require.NoError(t, err)
			t.Logf("leader.PolicyRules for an endpoint with RemoveSelector:\n%s", y)
		}
	}
	assert.True(t, found, "docs/leader.md shows the Role in a YAML block starting with rules:")
}

// TestRuleInDocs keeps every rule the docs show (a YAML block of kind
// Rule) readable by toleration.ParseRuleConfig, the format's one parser.
func TestRuleInDocs(t *testing.T) {
	root := repoRoot(t)
	var found int
	for _, f := range documents(t, root) {
		b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(f)))
		require.NoError(t, err)
		for _, blk := range Parse(f, string(b)).Blocks {
			if blk.Lang != "yaml" || !strings.Contains(blk.Text, "apiVersion: "+toleration.RuleAPIVersion) {
				continue
			}
			found++
			_, err := toleration.ParseRuleConfig([]byte(blk.Text))
			assert.NoError(t, err, "%s:%d: the rule does not parse", f, blk.Line)
		}
	}
	assert.Positive(t, found, "the docs show the rule's format")
}
