package docs

import (
	"fmt"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// Problem is something wrong in a document, at a line.
type Problem struct {
	File string
	Line int
	Msg  string
}

func (p Problem) String() string { return fmt.Sprintf("%s:%d: %s", p.File, p.Line, p.Msg) }

// FlagSource tells the flags and subcommands of fastover's own binaries.
type FlagSource interface {
	// Flags returns the flag names (without dashes) that binary accepts,
	// after subcommand sub if it is not empty.
	Flags(binary, sub string) (map[string]bool, error)
	// Subcommands returns the subcommands of binary (none for a binary
	// without subcommands).
	Subcommands(binary string) ([]string, error)
}

// Binaries are fastover's own commands, as a document may name them.
var Binaries = []string{"fastover-webhook", "fastover-certs", "kubectl-fastover", "fastover-run", "fastover-example", "fastover-demo", "configmap-operator"}

// Options tune a Checker.
type Options struct {
	// Flags answers for fastover's binaries; nil skips the flag checks.
	Flags FlagSource
	// RepoURL is the repository's address: absolute links into it
	// (RepoURL/blob/<ref>/<path>, /tree/) must name a file that exists.
	RepoURL string
}

// Checker checks documents against the repository at Root.
type Checker struct {
	Root string
	opts Options

	makefile string
	targets  map[string]bool
	docs     map[string]*Document
	tests    map[string]bool // Test*, Benchmark*, Fuzz*, Example* functions of the repository
	decls    map[string]map[string]bool
}

// NewChecker reads what the checks need from the repository at root: the
// Makefile's targets and the test functions.
func NewChecker(root string, opts Options) (*Checker, error) {
	c := &Checker{Root: root, opts: opts, docs: map[string]*Document{}, decls: map[string]map[string]bool{}}
	mk, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		return nil, fmt.Errorf("read the Makefile: %w", err)
	}
	c.makefile = string(mk)
	c.targets = makeTargets(c.makefile)
	if c.tests, err = testFunctions(root); err != nil {
		return nil, err
	}
	return c, nil
}

var (
	targetRE   = regexp.MustCompile(`(?m)^([A-Za-z0-9][A-Za-z0-9_.%/ -]*?)\s*:([^=]|$)`)
	testFuncRE = regexp.MustCompile(`(?m)^func ((?:Test|Benchmark|Fuzz|Example)\w*)\(`)
)

// makeTargets lists the explicit targets of a Makefile's text.
func makeTargets(text string) map[string]bool {
	t := map[string]bool{}
	for _, m := range targetRE.FindAllStringSubmatch(text, -1) {
		for _, name := range strings.Fields(m[1]) {
			if !strings.HasPrefix(name, ".") && !strings.Contains(name, "%") {
				t[name] = true
			}
		}
	}
	return t
}

// testFunctions lists the test, benchmark, fuzz and example functions of
// every _test.go file under root (bin/ and hidden directories aside).
func testFunctions(root string) (map[string]bool, error) {
	names := map[string]bool{}
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
		if !strings.HasSuffix(p, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for _, m := range testFuncRE.FindAllStringSubmatch(string(b), -1) {
			names[m[1]] = true
		}
		return nil
	})
	return names, err
}

// Load parses the document at rel (relative to Root).
func (c *Checker) Load(rel string) (*Document, error) {
	rel = path.Clean(filepath.ToSlash(rel))
	if d, ok := c.docs[rel]; ok {
		return d, nil
	}
	b, err := os.ReadFile(filepath.Join(c.Root, filepath.FromSlash(rel)))
	if err != nil {
		return nil, err
	}
	d := Parse(rel, string(b))
	c.docs[rel] = d
	return d, nil
}

// Check checks one document: its links, its commands, its inline code.
// With history set (a changelog), inline code may name what no longer
// exists, so only links and commands are checked.
func (c *Checker) Check(d *Document, history bool) []Problem {
	var ps []Problem
	add := func(line int, format string, args ...any) {
		ps = append(ps, Problem{File: d.Path, Line: line, Msg: fmt.Sprintf(format, args...)})
	}
	for _, l := range d.Links {
		if msg := c.checkLink(d, l.Target); msg != "" {
			add(l.Line, "link %q: %s", l.Target, msg)
		}
	}
	for _, b := range d.Blocks {
		switch b.Lang {
		case "sh", "bash", "shell", "console":
			dir, line := ".", -1
			for _, cmd := range shellCommands(b.Text, b.Lang == "console") {
				if cmd.line != line {
					dir, line = ".", cmd.line // a cd lasts for the rest of its line
				}
				for _, msg := range c.checkCommandIn(dir, cmd.words) {
					add(b.Line+cmd.line, "command `%s`: %s", strings.Join(cmd.words, " "), msg)
				}
				if len(cmd.words) == 2 && cmd.words[0] == "cd" && !filepath.IsAbs(cmd.words[1]) {
					dir = path.Join(dir, cmd.words[1])
				}
			}
		case "yaml", "yml":
			if msg := checkYAML(b.Text); msg != "" {
				add(b.Line, "YAML block: %s", msg)
			}
		}
	}
	if history {
		return ps
	}
	for _, s := range d.Spans {
		for _, msg := range c.checkSpan(s) {
			add(s.Line, "`%s`: %s", s.Text, msg)
		}
	}
	return ps
}

// checkLink says what is wrong with a link target, or "".
func (c *Checker) checkLink(d *Document, target string) string {
	if target == "" {
		return "empty"
	}
	if i := strings.Index(target, ":"); i > 0 && !strings.ContainsAny(target[:i], "/#.") {
		u, err := url.Parse(target)
		if err != nil {
			return err.Error()
		}
		switch u.Scheme {
		case "http", "https":
			if u.Host == "" || strings.ContainsAny(u.Host, " \t") {
				return "no host"
			}
			return c.checkRepoURL(u)
		case "mailto":
			return ""
		default:
			return fmt.Sprintf("scheme %q is neither http nor https", u.Scheme)
		}
	}
	file, anchor, _ := strings.Cut(target, "#")
	if file == "" {
		if !d.Anchors[anchor] {
			return fmt.Sprintf("no heading of %s makes the anchor #%s", d.Path, anchor)
		}
		return ""
	}
	var rel string
	if strings.HasPrefix(file, "/") {
		rel = path.Clean(strings.TrimPrefix(file, "/"))
	} else {
		rel = path.Clean(path.Join(path.Dir(d.Path), file))
	}
	if rel == ".." || strings.HasPrefix(rel, "../") {
		return "leaves the repository"
	}
	if _, err := os.Stat(filepath.Join(c.Root, filepath.FromSlash(rel))); err != nil {
		return fmt.Sprintf("%s does not exist", rel)
	}
	if anchor != "" && strings.HasSuffix(rel, ".md") {
		other, err := c.Load(rel)
		if err != nil {
			return err.Error()
		}
		if !other.Anchors[anchor] {
			return fmt.Sprintf("no heading of %s makes the anchor #%s", rel, anchor)
		}
	}
	return ""
}

// checkRepoURL checks a link into the repository itself (blob or tree):
// the file must exist.
func (c *Checker) checkRepoURL(u *url.URL) string {
	if c.opts.RepoURL == "" {
		return ""
	}
	base, err := url.Parse(c.opts.RepoURL)
	if err != nil || !strings.EqualFold(u.Host, base.Host) {
		return ""
	}
	rest, ok := strings.CutPrefix(u.Path, strings.TrimSuffix(base.Path, "/")+"/")
	if !ok {
		return ""
	}
	parts := strings.SplitN(rest, "/", 3)
	if len(parts) < 3 || (parts[0] != "blob" && parts[0] != "tree") {
		return ""
	}
	if _, err := os.Stat(filepath.Join(c.Root, filepath.FromSlash(parts[2]))); err != nil {
		return fmt.Sprintf("%s does not exist in this repository", parts[2])
	}
	return ""
}

var (
	pathSpanRE  = regexp.MustCompile(`^\.?/?[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)*/?$`)
	testNameRE  = regexp.MustCompile(`^(?:Test|Benchmark|Fuzz)[A-Z0-9_]\w*$`)
	qualifiedRE = regexp.MustCompile(`^([a-z][a-z0-9]*)\.([A-Z]\w*)(?:\.([A-Z]\w*))?`)
	flagWordRE  = regexp.MustCompile(`^--?([A-Za-z0-9][A-Za-z0-9-]*)`)
)

// checkSpan checks an inline code span: a make command's target, a path
// into the repository, a test's name, an identifier of one of fastover's
// packages, and, under a "flags BINARY" directive, a flag of BINARY.
func (c *Checker) checkSpan(s Span) []string {
	text := strings.TrimSpace(s.Text)
	if bin, ok := strings.CutPrefix(s.Directive, "flags "); ok && strings.HasPrefix(text, "-") {
		var msgs []string
		for _, w := range strings.FieldsFunc(text, func(r rune) bool { return r == ',' || r == ' ' }) {
			if m := flagWordRE.FindStringSubmatch(w); m != nil {
				msgs = append(msgs, c.checkFlags(strings.TrimSpace(bin), "", []string{"--" + m[1]})...)
			}
		}
		return msgs
	}
	if words := strings.Fields(text); len(words) > 1 && isCommandWord(words[0]) {
		var msgs []string
		for _, cmd := range shellCommands(text, false) {
			msgs = append(msgs, c.checkCommand(cmd.words)...)
		}
		return msgs
	}
	switch {
	case testNameRE.MatchString(text):
		if !c.tests[text] {
			return []string{"no test function of that name in the repository"}
		}
	case pathSpanRE.MatchString(strings.TrimSuffix(text, "/...")) && strings.Contains(text, "/"):
		p := strings.TrimPrefix(strings.TrimSuffix(text, "/..."), "./")
		first, _, _ := strings.Cut(p, "/")
		if strings.HasPrefix(text, "/") || first == "" || first == "bin" || !c.topLevel(first) {
			return nil
		}
		if _, err := os.Stat(filepath.Join(c.Root, filepath.FromSlash(p))); err != nil {
			return []string{fmt.Sprintf("%s does not exist", p)}
		}
	case qualifiedRE.MatchString(text):
		m := qualifiedRE.FindStringSubmatch(text)
		return c.checkIdentifier(m[1], m[2], m[3])
	}
	return nil
}

// topLevel says whether name is a directory at the repository's root.
func (c *Checker) topLevel(name string) bool {
	fi, err := os.Stat(filepath.Join(c.Root, name))
	return err == nil && fi.IsDir()
}

// sortedKeys returns a map's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
