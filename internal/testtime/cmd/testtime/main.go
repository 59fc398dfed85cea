// Command testtime keeps the events of `go test -json` and summarises
// them (see package testtime); `make test` runs it.
//
//	go test -json ./... | testtime tee bin/test-times/unit.json
//	testtime table bin/test-times
//
// tee prints the tests' output as `go test -v` does and appends the events
// to FILE. table reads DIR/phases.tsv (make's phases, if present) and every
// DIR/*.json, and prints where the time went.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sort"

	"github.com/fastover/fastover/internal/testtime"
)

const module = "github.com/fastover/fastover"

func main() {
	slowest := flag.Int("slowest", 25, "how many of the slowest tests table lists")
	flag.Usage = func() {
		_, _ = fmt.Fprintf(flag.CommandLine.Output(), "usage: %s tee FILE | table DIR\n\n"+
			"tee:   copy go test -json from stdin to FILE (appended), print the output as go test -v\n"+
			"table: print make's phases (DIR/phases.tsv), the packages and the slowest tests of DIR/*.json\n\n", os.Args[0])
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
		err = tee(flag.Arg(1))
	case "table":
		err = table(flag.Arg(1), *slowest)
	default:
		flag.Usage()
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "testtime:", err)
		os.Exit(1)
	}
}

func tee(file string) error {
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(file, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	err = testtime.Tee(os.Stdin, os.Stdout, f, module)
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
