package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// copySelf copies the running binary into dir as fastover-run, executable
// by all, and returns its path. It writes a temporary file and renames it,
// so that a container that runs the path never sees half a binary. The
// image has no shell and no cp: an init container runs this instead.
func copySelf(dir string) (string, error) {
	self, err := os.Executable()
	if err != nil {
		return "", err
	}
	info, err := os.Stat(dir)
	if err != nil {
		return "", err
	}
	if !info.IsDir() {
		return "", fmt.Errorf("%s is not a directory", dir)
	}
	src, err := os.Open(self)
	if err != nil {
		return "", err
	}
	defer func() { _ = src.Close() }()
	tmp, err := os.CreateTemp(dir, ".fastover-run-*")
	if err != nil {
		return "", err
	}
	defer func() { _ = os.Remove(tmp.Name()) }() // a no-op once renamed
	if _, err := io.Copy(tmp, src); err != nil {
		_ = tmp.Close()
		return "", err
	}
	if err := tmp.Chmod(0o755); err != nil {
		_ = tmp.Close()
		return "", err
	}
	if err := tmp.Close(); err != nil {
		return "", err
	}
	dst := filepath.Join(dir, "fastover-run")
	return dst, os.Rename(tmp.Name(), dst)
}
