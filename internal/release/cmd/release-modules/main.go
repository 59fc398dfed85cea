// Command release-modules prints the tags of a release of fastover's Go
// modules, in the order to push them, or pins the go.mod files of the tree
// to the release's version (see package release).
//
//	go run ./internal/release/cmd/release-modules tags v0.1.0
//	go run ./internal/release/cmd/release-modules pin v0.1.0
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/fastover/fastover/internal/release"
)

func main() {
	root := flag.String("root", ".", "the repository's root")
	flag.Usage = func() {
		_, _ = fmt.Fprintf(flag.CommandLine.Output(), "usage: %s [-root DIR] tags|pin VERSION\n\n"+
			"tags: print the release's tags, one a line, in the order to push them\n"+
			"pin:  make the go.mod files require fastover's modules at VERSION\n\n", os.Args[0])
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 2 {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(*root, flag.Arg(0), flag.Arg(1)); err != nil {
		fmt.Fprintln(os.Stderr, "release-modules:", err)
		os.Exit(1)
	}
}

func run(root, verb, version string) error {
	switch verb {
	case "tags":
		tags, err := release.Tags(version)
		if err != nil {
			return err
		}
		for _, t := range tags {
			fmt.Println(t)
		}
		return nil
	case "pin":
		return release.Pin(root, version)
	}
	return fmt.Errorf("unknown verb %q (tags or pin)", verb)
}
