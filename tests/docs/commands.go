package docs

import (
	"encoding/json"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"
)

// command is one simple command of a shell line: its words, and the line
// of the block it starts on (0-based).
type command struct {
	words []string
	line  int
}

// shellCommands splits a shell snippet into simple commands: lines joined
// at a trailing backslash, comments dropped, quotes removed, split at
// &&, ||, ;, | and &, redirections dropped. In a console block only the
// lines after a "$ " prompt are commands; the rest is output.
func shellCommands(text string, console bool) []command {
	var cmds []command
	lines := strings.Split(text, "\n")
	for i := 0; i < len(lines); i++ {
		line, start := lines[i], i
		if console {
			rest, ok := strings.CutPrefix(strings.TrimLeft(line, " "), "$ ")
			if !ok {
				continue
			}
			line = rest
		}
		for strings.HasSuffix(line, `\`) && i+1 < len(lines) {
			i++
			line = strings.TrimSuffix(line, `\`) + " " + lines[i]
		}
		for _, words := range splitShell(line) {
			cmds = append(cmds, command{words: words, line: start})
		}
	}
	return cmds
}

// splitShell tokenizes one shell line into simple commands.
func splitShell(line string) [][]string {
	var (
		cmds    [][]string
		words   []string
		word    strings.Builder
		inWord  bool
		quote   rune
		skipNxt bool // the next word is a redirection's target
	)
	endWord := func() {
		if inWord {
			if skipNxt {
				skipNxt = false
			} else {
				words = append(words, word.String())
			}
		}
		word.Reset()
		inWord = false
	}
	endCmd := func() {
		endWord()
		if len(words) > 0 {
			cmds = append(cmds, words)
		}
		words = nil
	}
	rs := []rune(line)
	for i := 0; i < len(rs); i++ {
		r := rs[i]
		switch {
		case quote != 0:
			switch {
			case r == quote:
				quote = 0
			case r == '\\' && quote == '"' && i+1 < len(rs):
				i++
				word.WriteRune(rs[i])
			default:
				word.WriteRune(r)
			}
		case r == '\'' || r == '"':
			quote, inWord = r, true
		case r == '\\' && i+1 < len(rs):
			i++
			word.WriteRune(rs[i])
			inWord = true
		case r == '#' && !inWord:
			endCmd()
			return cmds
		case r == ' ' || r == '\t':
			endWord()
		case r == ';' || r == '|' || r == '&':
			if r == '&' && word.Len() > 0 && strings.HasSuffix(word.String(), ">") {
				word.WriteRune(r) // 2>&1
				continue
			}
			endCmd()
			if i+1 < len(rs) && (rs[i+1] == '&' || rs[i+1] == '|') {
				i++
			}
		case r == '>' || r == '<':
			// A redirection: drop it and its target.
			if inWord && !isDigits(word.String()) {
				endWord()
			}
			word.Reset()
			inWord = false
			for i+1 < len(rs) && (rs[i+1] == '>' || rs[i+1] == '&') {
				i++
			}
			if i+1 < len(rs) && rs[i+1] != ' ' {
				// 2>&1 or >file: the target is glued on.
				j := i + 1
				for j < len(rs) && rs[j] != ' ' && rs[j] != ';' && rs[j] != '|' && rs[j] != '&' {
					j++
				}
				i = j - 1
			} else {
				skipNxt = true
			}
		default:
			word.WriteRune(r)
			inWord = true
		}
	}
	endCmd()
	return cmds
}

func isDigits(s string) bool {
	return s != "" && strings.Trim(s, "0123456789") == ""
}

var envAssignRE = regexp.MustCompile(`^([A-Za-z_][A-Za-z0-9_]*)=`)

// external are commands the docs may use whose arguments are not checked.
var external = []string{
	"apt-get", "cat", "cosign", "curl", "docker", "echo", "export", "git", "kustomize",
	"podman", "sha256sum", "sudo", "tar",
}

// isCommandWord says whether an inline code span starting with w is a
// command the checker parses.
func isCommandWord(w string) bool {
	switch w {
	case "make", "go", "kubectl", "helm":
		return true
	}
	return slices.Contains(Binaries, w) || strings.HasPrefix(w, "bin/")
}

// checkCommand checks one simple command: make targets and variables,
// go packages and test names, kubectl and helm paths and chart values,
// fastover's binaries' flags, and scripts that must exist.
func (c *Checker) checkCommand(words []string) []string {
	return c.checkCommandIn(".", words)
}

func (c *Checker) checkCommandIn(dir string, words []string) []string {
	var env []string
	for len(words) > 0 {
		m := envAssignRE.FindStringSubmatch(words[0])
		if m == nil {
			break
		}
		env = append(env, m[1])
		words = words[1:]
	}
	if len(words) == 0 {
		return nil
	}
	name, args := words[0], words[1:]
	switch {
	case name == "make":
		return c.checkMake(env, args)
	case name == "go":
		return c.checkGo(dir, args)
	case name == "kubectl":
		return c.checkKubectl(dir, args)
	case name == "helm":
		return c.checkHelm(dir, args)
	case name == "cd":
		if len(args) == 1 && !filepath.IsAbs(args[0]) && !strings.HasPrefix(args[0], "~") && !strings.HasPrefix(args[0], "$") {
			if !c.exists(path.Join(dir, args[0])) {
				return []string{fmt.Sprintf("directory %s does not exist", path.Join(dir, args[0]))}
			}
		}
		return nil
	case slices.Contains(Binaries, name):
		return c.checkFlags(name, "", args)
	case strings.HasPrefix(name, "bin/"):
		bin := strings.TrimPrefix(name, "bin/")
		if !slices.Contains(Binaries, bin) {
			return []string{fmt.Sprintf("%s is not one of fastover's binaries (%s)", name, strings.Join(Binaries, ", "))}
		}
		return c.checkFlags(bin, "", args)
	case strings.Contains(name, "/"):
		if filepath.IsAbs(name) || strings.HasPrefix(name, "~") {
			return nil
		}
		if !c.exists(path.Join(dir, name)) {
			return []string{fmt.Sprintf("%s does not exist", path.Join(dir, name))}
		}
		return nil
	case slices.Contains(external, name):
		return nil
	}
	return []string{fmt.Sprintf("unknown command %q (known: make, go, kubectl, helm, cd, fastover's binaries, paths, %s)", name, strings.Join(external, ", "))}
}

// exists says whether rel (relative to the repository's root) exists.
func (c *Checker) exists(rel string) bool {
	_, err := os.Stat(filepath.Join(c.Root, filepath.FromSlash(path.Clean(rel))))
	return err == nil
}

// checkMake checks make's targets and the variables set for it.
func (c *Checker) checkMake(env, args []string) []string {
	var msgs []string
	checkVar := func(v string) {
		if !regexp.MustCompile(`\b` + regexp.QuoteMeta(v) + `\b`).MatchString(c.makefile) {
			msgs = append(msgs, fmt.Sprintf("variable %s is not used by the Makefile", v))
		}
	}
	for _, v := range env {
		checkVar(v)
	}
	for _, a := range args {
		if m := envAssignRE.FindStringSubmatch(a); m != nil {
			checkVar(m[1])
			continue
		}
		if strings.HasPrefix(a, "-") {
			continue
		}
		if !c.targets[a] {
			msgs = append(msgs, fmt.Sprintf("make target %q is not in the Makefile (targets: %s)", a, strings.Join(sortedKeys(c.targets), ", ")))
		}
	}
	return msgs
}

// goValueFlags are the go command's flags that take a value.
var goValueFlags = []string{
	"o", "run", "skip", "bench", "benchtime", "count", "timeout", "tags", "ldflags", "gcflags", "p",
	"coverprofile", "covermode", "coverpkg", "cpu", "overlay", "modfile", "exec", "C", "parallel",
	"fuzz", "fuzztime", "mod", "pgo", "cpuprofile", "memprofile", "outputdir",
}

// checkGo checks the packages of go build, run, test, vet, install, get
// and list, and the test names given to -run.
func (c *Checker) checkGo(dir string, args []string) []string {
	if len(args) == 0 {
		return []string{"go without a subcommand"}
	}
	sub, args := args[0], args[1:]
	switch sub {
	case "build", "run", "test", "vet", "install", "get", "list", "generate":
	default:
		return nil
	}
	var (
		msgs []string
		pkgs []string
		run  string
	)
	for i := 0; i < len(args); i++ {
		a := args[i]
		if strings.HasPrefix(a, "-") {
			name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
			if slices.Contains(goValueFlags, name) && !hasValue && i+1 < len(args) {
				i++
				value = args[i]
			}
			if name == "run" {
				run = value
			}
			continue
		}
		pkgs = append(pkgs, a)
		if sub == "run" {
			break // the rest are the program's arguments
		}
	}
	var dirs []string
	for _, p := range pkgs {
		rel, ok := c.packageDir(dir, p)
		if !ok {
			continue
		}
		if !c.exists(rel) {
			msgs = append(msgs, fmt.Sprintf("package %s: %s does not exist", p, rel))
			continue
		}
		if !strings.HasSuffix(p, "/...") && !c.hasGoFiles(rel) {
			msgs = append(msgs, fmt.Sprintf("package %s: no Go files in %s", p, rel))
			continue
		}
		dirs = append(dirs, rel)
	}
	if run != "" && sub == "test" {
		for _, name := range strings.Split(strings.Trim(run, "^$"), "|") {
			name = strings.Trim(name, "^$()")
			if testNameRE.MatchString(name) && !c.testIn(dirs, name) {
				msgs = append(msgs, fmt.Sprintf("-run %s: no such test in %s", name, strings.Join(dirs, ", ")))
			}
		}
	}
	return msgs
}

// module is fastover's module path.
const module = "github.com/fastover/fastover"

// packageDir maps a package pattern to a directory relative to the
// repository's root; false for patterns outside fastover's module.
func (c *Checker) packageDir(dir, p string) (string, bool) {
	p = strings.TrimSuffix(strings.TrimSuffix(p, "/..."), "@latest")
	switch {
	case p == module:
		return ".", true
	case strings.HasPrefix(p, module+"/"):
		return strings.TrimPrefix(p, module+"/"), true
	case p == "." || strings.HasPrefix(p, "./") || strings.HasPrefix(p, "../"):
		return path.Clean(path.Join(dir, p)), true
	}
	return "", false
}

// hasGoFiles says whether a directory holds a .go file.
func (c *Checker) hasGoFiles(rel string) bool {
	m, _ := filepath.Glob(filepath.Join(c.Root, filepath.FromSlash(rel), "*.go"))
	return len(m) > 0
}

// testIn says whether a test function name is declared in one of dirs
// (any _test.go file of the repository when dirs is empty).
func (c *Checker) testIn(dirs []string, name string) bool {
	if len(dirs) == 0 {
		return c.tests[name]
	}
	re := regexp.MustCompile(`(?m)^func ` + regexp.QuoteMeta(name) + `\(`)
	for _, d := range dirs {
		files, _ := filepath.Glob(filepath.Join(c.Root, filepath.FromSlash(d), "*_test.go"))
		for _, f := range files {
			if b, err := os.ReadFile(f); err == nil && re.Match(b) {
				return true
			}
		}
	}
	return false
}

// checkKubectl checks the paths given to -k and -f, and the plugin's
// subcommands and flags.
func (c *Checker) checkKubectl(dir string, args []string) []string {
	if len(args) > 0 && args[0] == "fastover" {
		return c.checkFlags("kubectl-fastover", "", args[1:])
	}
	var msgs []string
	for i := 0; i < len(args); i++ {
		name, value, hasValue := strings.Cut(args[i], "=")
		if name != "-k" && name != "-f" && name != "--kustomize" && name != "--filename" {
			if i == 1 && args[0] == "kustomize" {
				value, hasValue = args[i], true
			} else {
				continue
			}
		}
		if !hasValue {
			if i+1 >= len(args) {
				return append(msgs, fmt.Sprintf("%s without a value", name))
			}
			i++
			value = args[i]
		}
		if value == "-" || strings.Contains(value, "://") || filepath.IsAbs(value) || strings.HasPrefix(value, "~") {
			continue
		}
		if !c.exists(path.Join(dir, value)) {
			msgs = append(msgs, fmt.Sprintf("%s does not exist", path.Join(dir, value)))
		}
	}
	return msgs
}

// helmValueFlags are helm's flags that take a value.
var helmValueFlags = []string{"n", "namespace", "set", "set-file", "set-string", "set-json", "f", "values", "version", "kube-context", "kubeconfig", "timeout", "o", "output"}

// checkHelm checks the chart of helm install, upgrade, template and lint,
// and the value keys given to --set and --set-file.
func (c *Checker) checkHelm(dir string, args []string) []string {
	if len(args) == 0 {
		return nil
	}
	sub := args[0]
	var positional, keys []string
	for i := 1; i < len(args); i++ {
		a := args[i]
		if strings.HasPrefix(a, "-") {
			name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
			if slices.Contains(helmValueFlags, name) && !hasValue && i+1 < len(args) {
				i++
				value = args[i]
			}
			if strings.HasPrefix(name, "set") {
				for _, kv := range strings.Split(value, ",") {
					k, _, _ := strings.Cut(kv, "=")
					keys = append(keys, k)
				}
			}
			continue
		}
		positional = append(positional, a)
	}
	var chart string
	switch sub {
	case "install", "upgrade", "template":
		if len(positional) >= 2 {
			chart = positional[1]
		}
	case "lint", "show":
		if len(positional) >= 1 {
			chart = positional[len(positional)-1]
		}
	default:
		return nil
	}
	local := strings.HasPrefix(chart, ".") || strings.Contains(chart, "/")
	if chart == "" || strings.Contains(chart, "://") || !local {
		return nil
	}
	rel := path.Clean(path.Join(dir, chart))
	if !c.exists(path.Join(rel, "Chart.yaml")) {
		return []string{fmt.Sprintf("chart %s: %s/Chart.yaml does not exist", chart, rel)}
	}
	var msgs []string
	for _, k := range keys {
		if !c.chartHasValue(rel, k) {
			msgs = append(msgs, fmt.Sprintf("chart %s has no value %s (neither in values.yaml nor in values.schema.json)", rel, k))
		}
	}
	return msgs
}

// chartHasValue says whether a dotted key is in the chart's values.yaml
// or its values.schema.json.
func (c *Checker) chartHasValue(chart, key string) bool {
	parts := strings.Split(key, ".")
	if b, err := os.ReadFile(filepath.Join(c.Root, filepath.FromSlash(chart), "values.yaml")); err == nil {
		var v map[string]any
		if yaml.Unmarshal(b, &v) == nil && lookup(v, parts) {
			return true
		}
	}
	if b, err := os.ReadFile(filepath.Join(c.Root, filepath.FromSlash(chart), "values.schema.json")); err == nil {
		var s map[string]any
		if json.Unmarshal(b, &s) == nil {
			for _, p := range parts {
				props, _ := s["properties"].(map[string]any)
				next, ok := props[p].(map[string]any)
				if !ok {
					return false
				}
				s = next
			}
			return true
		}
	}
	return false
}

func lookup(v map[string]any, parts []string) bool {
	for i, p := range parts {
		next, ok := v[p]
		if !ok {
			return false
		}
		if i == len(parts)-1 {
			return true
		}
		if v, ok = next.(map[string]any); !ok {
			return false
		}
	}
	return true
}

// checkFlags checks the subcommand and the flags given to one of
// fastover's binaries.
func (c *Checker) checkFlags(binary, sub string, args []string) []string {
	if c.opts.Flags == nil {
		return nil
	}
	subs, err := c.opts.Flags.Subcommands(binary)
	if err != nil {
		return []string{err.Error()}
	}
	var msgs []string
	if sub == "" && len(subs) > 0 {
		for _, a := range args {
			if !strings.HasPrefix(a, "-") {
				if !slices.Contains(subs, a) {
					msgs = append(msgs, fmt.Sprintf("%s has no subcommand %q (it has %s)", binary, a, strings.Join(subs, ", ")))
				} else {
					sub = a
				}
				break
			}
		}
	}
	flags, err := c.opts.Flags.Flags(binary, sub)
	if err != nil {
		return append(msgs, err.Error())
	}
	for _, a := range args {
		if a == "--" {
			break // what follows is another command's (fastover-run -- COMMAND)
		}
		if a == "-" || !strings.HasPrefix(a, "-") {
			continue
		}
		m := flagWordRE.FindStringSubmatch(a)
		if m == nil {
			continue
		}
		if !flags[m[1]] {
			where := binary
			if sub != "" {
				where += " " + sub
			}
			msgs = append(msgs, fmt.Sprintf("%s has no flag %s (see %s --help)", where, a, where))
		}
	}
	return msgs
}

// checkYAML says what is wrong with a YAML block, or "".
func checkYAML(text string) string {
	var v any
	if err := yaml.Unmarshal([]byte(text), &v); err != nil {
		return err.Error()
	}
	return ""
}
