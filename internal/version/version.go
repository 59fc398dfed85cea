// Package version holds what a fastover binary says about its own build:
// the version, the commit and the commit's time. `make images` and the
// release stamp them with the linker:
//
//	go build -ldflags "-X github.com/fastover/fastover/internal/version.Version=v0.1.0 \
//	    -X github.com/fastover/fastover/internal/version.Commit=<sha> \
//	    -X github.com/fastover/fastover/internal/version.CommitTime=<RFC 3339>"
//
// A plain `go build` leaves them empty; String then falls back to what the
// Go toolchain recorded (the module version of `go install ...@v0.1.0`,
// and the VCS stamp when it was built with -buildvcs), else "dev".
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Set with -ldflags -X; see the package documentation.
var (
	// Version is the release, e.g. v0.1.0, or a `git describe` of the
	// commit.
	Version string
	// Commit is the full hash of the commit built.
	Commit string
	// CommitTime is the commit's time, RFC 3339, in UTC.
	CommitTime string
)

// Info is the build information of the running binary.
type Info struct {
	Version    string
	Commit     string
	CommitTime string
	GoVersion  string
	Platform   string
}

// Get returns the stamped values, completed from the toolchain's build
// information where they were not stamped.
func Get() Info {
	i := Info{
		Version: Version, Commit: Commit, CommitTime: CommitTime,
		GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH,
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		i = fill(i, bi)
	}
	if i.Version == "" {
		i.Version = "dev"
	}
	return i
}

// fill completes i from the build information the toolchain recorded.
func fill(i Info, bi *debug.BuildInfo) Info {
	if i.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		i.Version = bi.Main.Version
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			if i.Commit == "" {
				i.Commit = s.Value
			}
		case "vcs.time":
			if i.CommitTime == "" {
				i.CommitTime = s.Value
			}
		}
	}
	return i
}

// String is the line --version prints, for the binary named program.
func String(program string) string {
	i := Get()
	commit, at := i.Commit, i.CommitTime
	if commit == "" {
		commit = "unknown"
	}
	if at == "" {
		at = "unknown"
	}
	return fmt.Sprintf("%s %s (commit %s, %s; %s %s)", program, i.Version, commit, at, i.GoVersion, i.Platform)
}
