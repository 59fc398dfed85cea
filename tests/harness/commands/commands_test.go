package commands

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestPathBuildsOnce(t *testing.T) {
	t.Setenv(DirEnv, "") // make test sets it for the suites
	s := &Set{Packages: []string{"./internal/cluster/pause"}}
	defer s.Remove()
	p := s.Path(t, "pause")
	fi, err := os.Stat(p)
	require.NoError(t, err)
	assert.NotZero(t, fi.Mode()&0o111, "not executable")
	assert.Equal(t, p, s.Path(t, "pause"))

	s.Remove()
	_, err = os.Stat(p)
	assert.ErrorIs(t, err, os.ErrNotExist)
}

func TestBuildErrorSaysWhat(t *testing.T) {
	t.Setenv(DirEnv, "")
	s := &Set{Packages: []string{"./no/such/package"}}
	defer s.Remove()
	s.once.Do(s.build)
	require.Error(t, s.err)
	assert.Contains(t, s.err.Error(), "no/such/package")
}

func TestSharedDirectory(t *testing.T) {
	dir := t.TempDir()
	cmd := filepath.Join(dir, "fastover-example")
	require.NoError(t, os.WriteFile(cmd, []byte("#!/bin/sh\n"), 0o755))
	t.Setenv(DirEnv, dir)
	// A package that does not build: with the directory set, nothing is built.
	s := &Set{Packages: []string{"./no/such/package"}}
	assert.Equal(t, cmd, s.Path(t, "fastover-example"))
	s.Remove()
	_, err := os.Stat(cmd)
	assert.NoError(t, err, "Remove deleted the shared directory's command")
}
