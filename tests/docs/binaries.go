package docs

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"
)

// BuiltBinaries is a FlagSource that builds fastover's binaries from the
// repository (once, on first use) and reads their --help.
type BuiltBinaries struct {
	// Root is the repository; Dir receives the binaries.
	Root, Dir string

	once  sync.Once
	err   error
	mu    sync.Mutex
	flags map[string]map[string]bool
	subs  map[string][]string
}

// build compiles every command under cmd/ and examples/ into Dir.
func (b *BuiltBinaries) build() error {
	b.once.Do(func() {
		var pkgs []string
		for _, parent := range []string{"cmd", "examples"} {
			dirs, _ := filepath.Glob(filepath.Join(b.Root, parent, "*", "main.go"))
			for _, d := range dirs {
				rel, _ := filepath.Rel(b.Root, filepath.Dir(d))
				pkgs = append(pkgs, "./"+filepath.ToSlash(rel))
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "go", append([]string{"build", "-o", b.Dir + string(os.PathSeparator)}, pkgs...)...)
		cmd.Dir = b.Root
		if out, err := cmd.CombinedOutput(); err != nil {
			b.err = fmt.Errorf("go build %s: %w\n%s", strings.Join(pkgs, " "), err, out)
		}
	})
	return b.err
}

// help runs binary with args and --help, and returns what it printed.
func (b *BuiltBinaries) help(binary string, args ...string) (string, error) {
	if err := b.build(); err != nil {
		return "", err
	}
	exe := filepath.Join(b.Dir, binary)
	if _, err := os.Stat(exe); err != nil {
		return "", fmt.Errorf("%s is not built from cmd/ or examples/: %w", binary, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, exe, append(args, "--help")...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+filepath.Join(b.Dir, "no-kubeconfig"))
	out, err := cmd.CombinedOutput() // --help exits 0 or 2, depending on the flag package
	if len(out) == 0 {
		return "", fmt.Errorf("%s %s --help printed nothing: %w", binary, strings.Join(args, " "), err)
	}
	return string(out), nil
}

var (
	helpFlagRE = regexp.MustCompile(`^\s*(-{1,2}[A-Za-z0-9][A-Za-z0-9-]*)(?:,\s*(--[A-Za-z0-9][A-Za-z0-9-]*))?`)
	subRE      = regexp.MustCompile(`^\s{2}([a-z][a-z0-9-]*)\s`)
)

// Flags implements FlagSource.
func (b *BuiltBinaries) Flags(binary, sub string) (map[string]bool, error) {
	key := binary + " " + sub
	b.mu.Lock()
	defer b.mu.Unlock()
	if f, ok := b.flags[key]; ok {
		return f, nil
	}
	var args []string
	if sub != "" {
		args = []string{sub}
	}
	out, err := b.help(binary, args...)
	if err != nil {
		return nil, err
	}
	f := ParseHelpFlags(out)
	if b.flags == nil {
		b.flags = map[string]map[string]bool{}
	}
	b.flags[key] = f
	return f, nil
}

// Subcommands implements FlagSource: the "Available Commands" of a cobra
// command's help.
func (b *BuiltBinaries) Subcommands(binary string) ([]string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if s, ok := b.subs[binary]; ok {
		return s, nil
	}
	out, err := b.help(binary)
	if err != nil {
		return nil, err
	}
	var subs []string
	in := false
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "Available Commands:"):
			in = true
		case in && strings.TrimSpace(line) == "":
			in = false
		case in:
			if m := subRE.FindStringSubmatch(line); m != nil {
				subs = append(subs, m[1])
			}
		}
	}
	if b.subs == nil {
		b.subs = map[string][]string{}
	}
	b.subs[binary] = subs
	return subs, nil
}

// ParseHelpFlags collects the flag names (without dashes) of a --help
// text, as Go's flag package ("  -name type") and cobra ("  -n, --name
// type") print them. -h and --help are always there.
func ParseHelpFlags(help string) map[string]bool {
	f := map[string]bool{"h": true, "help": true}
	for _, line := range strings.Split(help, "\n") {
		m := helpFlagRE.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		for _, name := range m[1:] {
			if name != "" {
				f[strings.TrimLeft(name, "-")] = true
			}
		}
	}
	return f
}
