package benchrun

import (
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestBinariesNamesEveryMissingOne(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "present"), []byte("#!/bin/sh\n"), 0o755))

	b, err := Binaries(dir, "present", "absent", "gone")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "absent: ")
	assert.Contains(t, err.Error(), "gone: ")
	assert.NotContains(t, err.Error(), "present: ")
	assert.Contains(t, err.Error(), "(make bench builds it)")
	assert.ErrorIs(t, err, os.ErrNotExist)
	assert.Equal(t, Bin(dir), b)

	b, err = Binaries(dir, "present")
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(dir, "present"), b.Path("present"))
}

func TestBinariesIsAbsolute(t *testing.T) {
	t.Chdir(t.TempDir())
	require.NoError(t, os.Mkdir("bin", 0o755))
	b, err := Binaries("bin")
	require.NoError(t, err)
	assert.True(t, filepath.IsAbs(string(b)), "%q", b)
}

func TestParseRefusesArguments(t *testing.T) {
	args, set := os.Args, flag.CommandLine
	t.Cleanup(func() { os.Args, flag.CommandLine = args, set })

	flag.CommandLine = flag.NewFlagSet("bench", flag.ContinueOnError)
	bin := BinFlag("nothing")
	os.Args = []string{"bench", "-bin", "/x", "stray"}
	require.EqualError(t, Parse(), `unexpected arguments ["stray"]`)
	assert.Equal(t, "/x", *bin)

	flag.CommandLine = flag.NewFlagSet("bench", flag.ContinueOnError)
	bin = BinFlag("nothing")
	os.Args = []string{"bench"}
	require.NoError(t, Parse())
	assert.Equal(t, "bin", *bin)
}
