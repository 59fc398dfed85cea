// Command testtime keeps the events of `go test -json` and summarises
// them (see package testtime); `make test` runs it.
//
//	go test -json ./... | testtime tee bin/test-times/unit.json
//	testtime table bin/test-times
//	go test -run "$(testtime -serial tests tests/e2e)" ./tests/e2e
//
// tee prints the tests' output as `go test -v` does (-prefix: every line
// with its package, for a stream printed beside another) and appends the
// events to FILE. table reads DIR/phases.tsv (make's phases, if present)
// and every DIR/*.json, and prints where the time went. tests prints, for
// each package DIR, a `go test -run` pattern of its tests that call
// t.Parallel first (-parallel, or DIR:parallel), the others (-serial, or
// DIR:serial) or all, or of a shard of them (-shard I/N; with -times DIR
// the shards are balanced by the tests' times in DIR's events, a run
// before, else every N-th name). With several packages, one pattern a
// line, the shard is balanced over all their tests together:
//
//	testtime -shard 1/2 -times bin/test-times.last tests tests/e2e:serial tests/charts
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/fastover/fastover/internal/testtime"
)

const module = "github.com/fastover/fastover"

func main() {
	slowest := flag.Int("slowest", 25, "how many of the slowest tests table lists")
	prefix := flag.Bool("prefix", false, "tee: prefix every line with its package")
	serial := flag.Bool("serial", false, "tests: the tests that do not call t.Parallel first")
	parallel := flag.Bool("parallel", false, "tests: the tests that call t.Parallel first")
	shard := flag.String("shard", "", "tests: I/N, the I-th of N shards of the tests, every N-th in name order from the I-th")
	times := flag.String("times", "", "tests -shard: balance the shards by the tests' times in this directory's events (a run before; missing: name order)")
	flag.Usage = func() {
		_, _ = fmt.Fprintf(flag.CommandLine.Output(), "usage: %s [flags] tee FILE | table DIR | tests DIR[:serial|:parallel]...\n\n"+
			"tee:   copy go test -json from stdin to FILE (appended), print the output as go test -v\n"+
			"table: print make's phases (DIR/phases.tsv), the packages and the slowest tests of DIR/*.json\n"+
			"tests: print a go test -run pattern of each package DIR's tests, a line each (-serial, -parallel, or all; -shard, balanced over all the packages)\n\n", os.Args[0])
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() < 2 || (flag.Arg(0) != "tests" && flag.NArg() != 2) {
		flag.Usage()
		os.Exit(2)
	}
	var err error
	switch flag.Arg(0) {
	case "tee":
		err = tee(flag.Arg(1), *prefix)
	case "table":
		err = table(flag.Arg(1), *slowest)
	case "tests":
		if *serial && *parallel {
			fmt.Fprintln(os.Stderr, "testtime: tests takes -serial or -parallel (neither: every test), not both")
			os.Exit(2)
		}
		err = tests(flag.Args()[1:], *serial, *parallel, *shard, *times)
	default:
		flag.Usage()
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "testtime:", err)
		os.Exit(1)
	}
}

// pkgTests is the selection of one package's tests that tests prints: DIR
// (with -serial or -parallel), DIR:serial or DIR:parallel.
type pkgTests struct {
	dir   string
	names []string
}

func tests(args []string, serial, parallel bool, shard, times string) error {
	var pkgs []pkgTests
	for _, arg := range args {
		dir, sel, _ := strings.Cut(arg, ":")
		ser, par := serial, parallel
		switch sel {
		case "":
		case "serial":
			ser, par = true, false
		case "parallel":
			ser, par = false, true
		default:
			return fmt.Errorf("%s: want DIR, DIR:serial or DIR:parallel", arg)
		}
		s, p, err := testtime.Tests(dir)
		if err != nil {
			return err
		}
		var names []string
		switch {
		case ser:
			names = s
		case par:
			names = p
		default:
			names = slices.Concat(s, p)
			sort.Strings(names)
		}
		pkgs = append(pkgs, pkgTests{dir: dir, names: names})
	}
	if shard != "" {
		var i, n int
		if _, err := fmt.Sscanf(shard, "%d/%d", &i, &n); err != nil || n < 1 || i < 1 || i > n {
			return fmt.Errorf("-shard %q: want I/N, 1 <= I <= N", shard)
		}
		groups := make([][]string, len(pkgs))
		took := make([]map[string]time.Duration, len(pkgs))
		for k, p := range pkgs {
			groups[k] = p.names
			var err error
			if took[k], err = tookBefore(times, p.dir); err != nil {
				return err
			}
		}
		for k, names := range testtime.BalanceGroups(groups, took, i, n) {
			pkgs[k].names = names
		}
	}
	for _, p := range pkgs {
		sort.Strings(p.names)
		if _, err := fmt.Println(testtime.Pattern(p.names)); err != nil {
			return err
		}
	}
	return nil
}

func tee(file string, prefix bool) error {
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(file, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	err = testtime.Tee(os.Stdin, os.Stdout, f, module, prefix)
	return errors.Join(err, f.Close())
}

func table(dir string, slowest int) error {
	r := testtime.Report{Module: module, Slowest: slowest, Parallel: runtime.GOMAXPROCS(0)}
	if f, err := os.Open(filepath.Join(dir, "phases.tsv")); err == nil {
		r.Phases, err = testtime.ReadPhases(f)
		_ = f.Close()
		if err != nil {
			return err
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	var err error
	if r.Summary, err = summarize(dir); err != nil {
		return err
	}
	if len(r.Phases) == 0 && len(r.Summary.Packages) == 0 {
		return fmt.Errorf("%s holds no phases.tsv and no go test -json events", dir)
	}
	return testtime.WriteTable(os.Stdout, r)
}

// summarize summarises the events of every dir/*.json.
func summarize(dir string) (testtime.Summary, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return testtime.Summary{}, err
	}
	sort.Strings(files)
	var readers []io.Reader
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			return testtime.Summary{}, err
		}
		defer func() { _ = f.Close() }()
		readers = append(readers, f)
	}
	return testtime.Summarize(io.MultiReader(readers...))
}

// tookBefore is how long the tests of the package in pkgDir took in the
// events of timesDir; nothing if timesDir is empty or does not exist.
func tookBefore(timesDir, pkgDir string) (map[string]time.Duration, error) {
	if timesDir == "" {
		return nil, nil
	}
	if _, err := os.Stat(timesDir); errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	s, err := summarize(timesDir)
	if err != nil {
		return nil, err
	}
	return testtime.Took(s, path.Join(module, filepath.ToSlash(filepath.Clean(pkgDir)))), nil
}
