package imagebuild

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"path"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// entry is a file or directory of a layer.
type entry struct {
	path string // relative, no leading slash; a directory's ends in /
	mode int64
	data []byte
}

// layerBytes writes the entries as a gzipped tar that depends on nothing
// but its arguments: entries sorted by path, every parent directory listed,
// owned by root:root (0:0) with the owner names set, every time mtime (to
// the second), no other metadata, and a gzip header without name or time.
func layerBytes(entries []entry, mtime time.Time) ([]byte, error) {
	all := map[string]entry{}
	for _, e := range entries {
		p := strings.TrimPrefix(e.path, "/")
		if p == "" || strings.Contains(p, "..") {
			return nil, fmt.Errorf("bad path in layer: %q", e.path)
		}
		e.path = p
		if _, dup := all[p]; dup {
			return nil, fmt.Errorf("path %q twice in one layer", p)
		}
		all[p] = e
		// Parent directories, unless listed with a mode of their own.
		for dir := path.Dir(strings.TrimSuffix(p, "/")); dir != "."; dir = path.Dir(dir) {
			if _, ok := all[dir+"/"]; !ok {
				all[dir+"/"] = entry{path: dir + "/", mode: 0o755}
			}
		}
	}
	paths := make([]string, 0, len(all))
	for p := range all {
		paths = append(paths, p)
	}
	sort.Strings(paths)

	mtime = mtime.UTC().Truncate(time.Second)
	var tarBuf bytes.Buffer
	tw := tar.NewWriter(&tarBuf)
	for _, p := range paths {
		e := all[p]
		h := &tar.Header{
			Name: p, Mode: e.mode, ModTime: mtime,
			Uid: 0, Gid: 0, Uname: "root", Gname: "root",
			Format: tar.FormatUSTAR,
		}
		if strings.HasSuffix(p, "/") {
			h.Typeflag = tar.TypeDir
		} else {
			h.Typeflag = tar.TypeReg
			h.Size = int64(len(e.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("layer entry %s: %w", p, err)
		}
		if _, err := tw.Write(e.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}

	var gz bytes.Buffer
	zw, err := gzip.NewWriterLevel(&gz, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	if _, err := zw.Write(tarBuf.Bytes()); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return gz.Bytes(), nil
}

// newLayer is an OCI layer of the entries; see layerBytes.
func newLayer(entries []entry, mtime time.Time) (v1.Layer, error) {
	b, err := layerBytes(entries, mtime)
	if err != nil {
		return nil, err
	}
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(b)), nil
	}, tarball.WithMediaType(types.OCILayer))
}

// baseEntries are what every image has besides its binary: an
// /etc/passwd and /etc/group that name the user the image runs as (and
// root), and a /tmp. No shell, no package manager, no libraries.
func baseEntries() []entry {
	return []entry{
		{path: "etc/passwd", mode: 0o644, data: []byte(
			"root:x:0:0:root:/root:/sbin/nologin\n" +
				"nonroot:x:65532:65532:nonroot:/:/sbin/nologin\n")},
		{path: "etc/group", mode: 0o644, data: []byte("root:x:0:\nnonroot:x:65532:\n")},
		{path: "tmp/", mode: 0o1777},
	}
}
