package docs

import (
	"context"
	"encoding/json"
	"fmt"
	"go/scanner"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Snippet is a Go code block of a document.
type Snippet struct {
	Doc   string
	Block CodeBlock
}

// knownImports are the packages a snippet may use without importing them:
// the checker adds the import when the snippet uses the name.
var knownImports = map[string]string{
	"context":     "context",
	"errors":      "errors",
	"fmt":         "fmt",
	"http":        "net/http",
	"net":         "net",
	"os":          "os",
	"signal":      "os/signal",
	"syscall":     "syscall",
	"testing":     "testing",
	"time":        "time",
	"kubernetes":  "k8s.io/client-go/kubernetes",
	"informers":   "k8s.io/client-go/informers",
	"metav1":      "k8s.io/apimachinery/pkg/apis/meta/v1",
	"corev1":      "k8s.io/api/core/v1",
	"wait":        "k8s.io/apimachinery/pkg/util/wait",
	"prometheus":  "github.com/prometheus/client_golang/prometheus",
	"require":     "github.com/stretchr/testify/require",
	"leader":      module + "/leader",
	"follow":      module + "/leader/follow",
	"rest":        "k8s.io/client-go/rest",
	"toleration":  module + "/toleration",
	"retrofit":    module + "/retrofit",
	"webhook":     module + "/webhook",
	"certs":       module + "/certs",
	"cluster":     module + "/internal/cluster",
	"netns":       module + "/internal/netns",
	"fleet":       module + "/internal/fleet",
	"certmanager": module + "/internal/certmanager",
	"install":     module + "/internal/install",
}

// The parameters a statement snippet may use without declaring them.
const snippetParams = "ctx context.Context, t *testing.T, clientset kubernetes.Interface, runController func(context.Context) error"

var declStartRE = regexp.MustCompile(`^(package|import|func|type|var|const)\b`)

// snippetSource wraps a Go block into a compilable file: declarations as
// they are, statements as the body of a function whose parameters are
// ctx, t, clientset and runController. It returns the file and the
// number of lines before the block's first line.
func snippetSource(code string) (string, int) {
	first := ""
	for _, l := range strings.Split(code, "\n") {
		if t := strings.TrimSpace(l); t != "" && !strings.HasPrefix(t, "//") {
			first = t
			break
		}
	}
	used := usedNames(code)
	decl := declStartRE.MatchString(first)
	if !decl {
		for _, n := range []string{"context", "testing", "kubernetes"} {
			used[n] = true
		}
	}
	var imports []string
	for name := range used {
		// A snippet that imports a package itself keeps its own import.
		if p, ok := knownImports[name]; ok && !strings.Contains(code, strconv.Quote(p)) {
			imports = append(imports, strconv.Quote(p))
		}
	}
	sort.Strings(imports)
	var b strings.Builder
	b.WriteString("package snippet\n\n")
	if len(imports) > 0 {
		b.WriteString("import (\n\t" + strings.Join(imports, "\n\t") + "\n)\n\n")
	}
	if decl {
		head := strings.Count(b.String(), "\n")
		b.WriteString(code + "\n")
		return b.String(), head
	}
	b.WriteString("func _(" + snippetParams + ") error {\n")
	head := strings.Count(b.String(), "\n")
	b.WriteString(code + "\n\treturn nil\n}\n")
	return b.String(), head
}

// GoFile is a Go block of a document as a file of package pkg, wrapped as
// CompileSnippets wraps it (statements as the body of a function with ctx,
// t, clientset and runController), for a build outside this module: a
// consumer's.
func GoFile(pkg, code string) string {
	src, _ := snippetSource(code)
	return strings.Replace(src, "package snippet\n", "package "+pkg+"\n", 1)
}

// usedNames are the identifiers of a snippet followed by a dot (outside
// comments and strings): the packages it uses.
func usedNames(code string) map[string]bool {
	used := map[string]bool{}
	fset := token.NewFileSet()
	var s scanner.Scanner
	s.Init(fset.AddFile("snippet.go", -1, len(code)), []byte(code), nil, 0)
	prev, prevLit := token.ILLEGAL, ""
	for {
		_, tok, lit := s.Scan()
		if tok == token.EOF {
			break
		}
		if tok == token.PERIOD && prev == token.IDENT {
			used[prevLit] = true
		}
		prev, prevLit = tok, lit
	}
	return used
}

// CompileSnippets compiles the Go blocks of the documents with go build,
// each as its own package inside the module (through an overlay: nothing
// is written into the repository), and reports those that do not compile.
func CompileSnippets(root, tmp string, snippets []Snippet) ([]Problem, error) {
	if len(snippets) == 0 {
		return nil, nil
	}
	type placed struct {
		Snippet
		file string // the overlay's path of the wrapped file
		head int
	}
	overlay := map[string]string{}
	var all []placed
	var pkgs []string
	for i, s := range snippets {
		src, head := snippetSource(s.Block.Text)
		// The compiler names the file behind the overlay: keep the
		// package's name in its path.
		real := filepath.Join(tmp, "zz_snippets", fmt.Sprintf("s%d", i), "snippet.go")
		if err := os.MkdirAll(filepath.Dir(real), 0o700); err != nil {
			return nil, err
		}
		if err := os.WriteFile(real, []byte(src), 0o600); err != nil {
			return nil, err
		}
		rel := fmt.Sprintf("tests/docs/zz_snippets/s%d", i)
		file := filepath.Join(root, filepath.FromSlash(rel), "snippet.go")
		overlay[file] = real
		all = append(all, placed{Snippet: s, file: file, head: head})
		pkgs = append(pkgs, "./"+rel)
	}
	o, err := json.Marshal(map[string]any{"Replace": overlay})
	if err != nil {
		return nil, err
	}
	overlayFile := filepath.Join(tmp, "overlay.json")
	if err := os.WriteFile(overlayFile, o, 0o600); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", append([]string{"build", "-overlay", overlayFile}, pkgs...)...)
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	if err == nil {
		return nil, nil
	}
	// Errors read "tests/docs/zz_snippets/s3/snippet.go:12:3: msg" (the
	// path may be absolute or relative to root).
	errRE := regexp.MustCompile(`(?m)zz_snippets/s(\d+)/snippet\.go:(\d+)(?::\d+)?: (.*)$`)
	var ps []Problem
	for _, m := range errRE.FindAllStringSubmatch(string(out), -1) {
		i, _ := strconv.Atoi(m[1])
		line, _ := strconv.Atoi(m[2])
		if i >= len(all) {
			continue
		}
		s := all[i]
		ps = append(ps, Problem{File: s.Doc, Line: s.Block.Line + line - 1 - s.head, Msg: "Go snippet does not compile: " + m[3]})
	}
	if len(ps) == 0 {
		return nil, fmt.Errorf("go build of the snippets: %w\n%s", err, out)
	}
	return ps, nil
}
