// Command images builds fastover's container images: one OCI image index
// per binary (fastover-webhook, fastover-example, fastover-certs,
// fastover-run) for
// linux/amd64 and linux/arm64, written as OCI layouts under -out, and with
// -registry pushed there by digest. `make images` runs it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/fastover/fastover/internal/imagebuild"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		fmt.Fprintln(os.Stderr, "images:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("images", flag.ContinueOnError)
	o := imagebuild.Options{Log: os.Stderr}
	var push imagebuild.PushOptions
	var platforms, binaries, commitTime string
	fs.StringVar(&o.ModuleRoot, "C", ".", "the module's root")
	fs.StringVar(&o.OutDir, "out", "bin/images", "directory of the OCI layouts, one per image")
	fs.StringVar(&platforms, "platforms", "linux/amd64,linux/arm64", "comma-separated platforms of every index")
	fs.StringVar(&binaries, "binaries", "", "comma-separated images to build (default: all of "+names()+")")
	fs.StringVar(&o.Version, "version", "", "version to stamp (default: git describe --tags --always --dirty)")
	fs.StringVar(&o.Commit, "commit", "", "commit to stamp (default: git rev-parse HEAD)")
	fs.StringVar(&commitTime, "commit-time", "", "commit time to stamp, RFC 3339 or Unix seconds (default: the commit's)")
	fs.StringVar(&o.Source, "source", "https://github.com/fastover/fastover", "URL of the source repository (org.opencontainers.image.source)")
	fs.StringVar(&push.Registry, "registry", "", "push each index by digest to REGISTRY/<image> (e.g. ghcr.io/fastover)")
	fs.StringVar(&push.Tag, "tag", "", "with -registry, also tag each index")
	fs.BoolVar(&push.Insecure, "insecure", false, "with -registry, allow plain HTTP")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	for _, p := range strings.Split(platforms, ",") {
		pl, err := v1.ParsePlatform(strings.TrimSpace(p))
		if err != nil {
			return fmt.Errorf("-platforms: %w", err)
		}
		o.Platforms = append(o.Platforms, *pl)
	}
	if binaries != "" {
		for _, n := range strings.Split(binaries, ",") {
			b, ok := find(strings.TrimSpace(n))
			if !ok {
				return fmt.Errorf("-binaries: no image %q (have %s)", n, names())
			}
			o.Binaries = append(o.Binaries, b)
		}
	}
	if o.Version == "" || o.Commit == "" || commitTime == "" {
		v, c, at, err := imagebuild.Describe(ctx, o.ModuleRoot)
		if err != nil {
			return err
		}
		o.Version = firstNonEmpty(o.Version, v)
		o.Commit = firstNonEmpty(o.Commit, c)
		o.CommitTime = at
	}
	if commitTime != "" {
		t, err := parseTime(commitTime)
		if err != nil {
			return fmt.Errorf("-commit-time: %w", err)
		}
		o.CommitTime = t
	}

	began := time.Now()
	images, err := imagebuild.Build(ctx, o)
	if err != nil {
		return err
	}
	for _, img := range images {
		var sizes []string
		for p, n := range img.Sizes {
			sizes = append(sizes, fmt.Sprintf("%s %.1f MiB", p, float64(n)/(1<<20)))
		}
		sort.Strings(sizes)
		fmt.Printf("%s@%s  %s  (%s)\n", img.Name, img.Digest, img.Layout, strings.Join(sizes, ", "))
	}
	fmt.Fprintf(os.Stderr, "%d images of %s (commit %s, %s) in %v\n", len(images), o.Version, o.Commit, o.CommitTime.Format(time.RFC3339), time.Since(began).Round(time.Millisecond))
	if push.Registry == "" {
		return nil
	}
	refs, err := imagebuild.Push(ctx, images, push)
	for _, r := range refs {
		fmt.Println("pushed", r.String())
	}
	return err
}

func firstNonEmpty(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func parseTime(s string) (time.Time, error) {
	var secs int64
	if _, err := fmt.Sscanf(s, "%d", &secs); err == nil && fmt.Sprint(secs) == s {
		return time.Unix(secs, 0).UTC(), nil
	}
	return time.Parse(time.RFC3339, s)
}

func find(n string) (imagebuild.Binary, bool) {
	for _, b := range imagebuild.Binaries {
		if b.Name == n {
			return b, true
		}
	}
	return imagebuild.Binary{}, false
}

func names() string {
	var n []string
	for _, b := range imagebuild.Binaries {
		n = append(n, b.Name)
	}
	return strings.Join(n, ", ")
}
