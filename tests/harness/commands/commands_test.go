package commands

import (
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestPathBuildsOnce(t *testing.T) {
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
	s := &Set{Packages: []string{"./no/such/package"}}
	defer s.Remove()
	s.once.Do(s.build)
	require.Error(t, s.err)
	assert.Contains(t, s.err.Error(), "no/such/package")
}
