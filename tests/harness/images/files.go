package images

import (
	"archive/tar"
	"errors"
	"io"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// file is an entry of an image's layers.
type file struct {
	name     string
	mode     int64
	uid, gid int
	size     int64
	mtime    time.Time
}

// listFiles lists the entries of every layer of the image, in order.
func listFiles(img v1.Image) ([]file, error) {
	layers, err := img.Layers()
	if err != nil {
		return nil, err
	}
	var files []file
	for _, l := range layers {
		rc, err := l.Uncompressed()
		if err != nil {
			return nil, err
		}
		tr := tar.NewReader(rc)
		for {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				_ = rc.Close()
				return nil, err
			}
			files = append(files, file{name: h.Name, mode: h.Mode, uid: h.Uid, gid: h.Gid, size: h.Size, mtime: h.ModTime})
		}
		if err := rc.Close(); err != nil {
			return nil, err
		}
	}
	return files, nil
}
