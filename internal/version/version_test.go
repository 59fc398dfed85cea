package version

import (
	"runtime/debug"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestStringStamped(t *testing.T) {
	defer func(v, c, ct string) { Version, Commit, CommitTime = v, c, ct }(Version, Commit, CommitTime)
	Version, Commit, CommitTime = "v1.2.3", "0123456789abcdef", "2026-11-30T09:00:00Z"
	s := String("fastover-x")
	assert.True(t, strings.HasPrefix(s, "fastover-x v1.2.3 (commit 0123456789abcdef, 2026-11-30T09:00:00Z; go"), s)
}

func TestStringUnstamped(t *testing.T) {
	defer func(v, c, ct string) { Version, Commit, CommitTime = v, c, ct }(Version, Commit, CommitTime)
	Version, Commit, CommitTime = "", "", ""
	i := Get()
	assert.NotEmpty(t, i.Version)
	assert.Contains(t, String("p"), "p "+i.Version+" (commit ")
}

func TestFillFromBuildInfo(t *testing.T) {
	bi := &debug.BuildInfo{
		Main:     debug.Module{Version: "v0.9.0"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "abc"}, {Key: "vcs.time", Value: "2026-01-01T00:00:00Z"}},
	}
	assert.Equal(t, Info{Version: "v0.9.0", Commit: "abc", CommitTime: "2026-01-01T00:00:00Z"}, fill(Info{}, bi))
	// Stamped values win.
	assert.Equal(t, Info{Version: "v1", Commit: "c", CommitTime: "t"}, fill(Info{Version: "v1", Commit: "c", CommitTime: "t"}, bi))
	// A work-tree build has no module version.
	assert.Empty(t, fill(Info{}, &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}).Version)
}
