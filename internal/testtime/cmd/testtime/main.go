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
// and every DIR/*.json, and prints where the time went. tests prints a
// `go test -run` pattern of the package DIR's tests that call t.Parallel
// first (-parallel), the others (-serial) or all, or of a shard of them
// (-shard I/N).
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"

	"github.com/fastover/fastover/internal/testtime"
)

const module = "github.com/fastover/fastover"

func main() {
	slowest := flag.Int("slowest", 25, "how many of the slowest tests table lists")
	prefix := flag.Bool("prefix", false, "tee: prefix every line with its package")
	serial := flag.Bool("serial", false, "tests: the tests that do not call t.Parallel first")
	parallel := flag.Bool("parallel", false, "tests: the tests that call t.Parallel first")
	shard := flag.String("shard", "", "tests: I/N, the I-th of N shards of the tests, every N-th in name order from the I-th")
	flag.Usage = func() {
		_, _ = fmt.Fprintf(flag.CommandLine.Output(), "usage: %s [flags] tee FILE | table DIR | tests DIR\n\n"+
			"tee:   copy go test -json from stdin to FILE (appended), print the output as go test -v\n"+
			"table: print make's phases (DIR/phases.tsv), the packages and the slowest tests of DIR/*.json\n"+
			"tests: print a go test -run pattern of the package DIR's tests (-serial, -parallel, or all; -shard)\n\n", os.Args[0])
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 2 {
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
		err = tests(flag.Arg(1), *serial, *parallel, *shard)
	default:
		flag.Usage()
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "testtime:", err)
		os.Exit(1)
	}
}

func tests(dir string, serial, parallel bool, shard string) error {
	ser, par, err := testtime.Tests(dir)
	if err != nil {
		return err
	}
	var names []string
	switch {
	case serial:
		names = ser
	case parallel:
		names = par
	default:
		names = slices.Concat(ser, par)
		sort.Strings(names)
	}
	if shard != "" {
		var i, n int
		if _, err := fmt.Sscanf(shard, "%d/%d", &i, &n); err != nil || n < 1 || i < 1 || i > n {
			return fmt.Errorf("-shard %q: want I/N, 1 <= I <= N", shard)
		}
		names = testtime.Shard(names, i, n)
	}
	_, err = fmt.Println(testtime.Pattern(names))
	return err
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
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return err
	}
	sort.Strings(files)
	var readers []io.Reader
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			return err
		}
		defer func() { _ = f.Close() }()
		readers = append(readers, f)
	}
	if r.Summary, err = testtime.Summarize(io.MultiReader(readers...)); err != nil {
		return err
	}
	if len(r.Phases) == 0 && len(r.Summary.Packages) == 0 {
		return fmt.Errorf("%s holds no phases.tsv and no go test -json events", dir)
	}
	return testtime.WriteTable(os.Stdout, r)
}
