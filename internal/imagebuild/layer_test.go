package imagebuild

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestLayerBytesDeterministic(t *testing.T) {
	at := time.Date(2026, 11, 30, 9, 0, 0, 123, time.FixedZone("x", 3600))
	entries := []entry{
		{path: "/usr/local/bin/app", mode: 0o755, data: []byte("binary")},
		{path: "etc/passwd", mode: 0o644, data: []byte("root")},
		{path: "tmp/", mode: 0o1777},
	}
	a, err := layerBytes(entries, at)
	require.NoError(t, err)
	// Another order of the same entries: the same bytes.
	b, err := layerBytes([]entry{entries[2], entries[0], entries[1]}, at)
	require.NoError(t, err)
	assert.Equal(t, a, b)

	zr, err := gzip.NewReader(bytes.NewReader(a))
	require.NoError(t, err)
	assert.True(t, zr.ModTime.IsZero(), "gzip header time")
	assert.Empty(t, zr.Name)
	tr := tar.NewReader(zr)
	var names []string
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		names = append(names, h.Name)
		assert.Equal(t, at.UTC().Truncate(time.Second), h.ModTime.UTC(), h.Name)
		assert.Equal(t, 0, h.Uid)
		assert.Equal(t, 0, h.Gid)
		assert.Equal(t, "root", h.Uname)
		assert.Equal(t, "root", h.Gname)
	}
	assert.Equal(t, []string{"etc/", "etc/passwd", "tmp/", "usr/", "usr/local/", "usr/local/bin/", "usr/local/bin/app"}, names)
}

func TestLayerBytesRejects(t *testing.T) {
	for _, p := range []string{"", "/", "../x", "a/../../b"} {
		_, err := layerBytes([]entry{{path: p, mode: 0o644}}, time.Now())
		assert.Error(t, err, "path %q", p)
	}
	_, err := layerBytes([]entry{{path: "a", mode: 0o644}, {path: "/a", mode: 0o644}}, time.Now())
	assert.ErrorContains(t, err, "twice")
}
