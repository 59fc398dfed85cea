package install

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
)

// MirrorConfigMap does for a process that runs outside the cluster what
// the kubelet does for a ConfigMap volume: it writes each key of the
// ConfigMap ns/name into dir, and rewrites them whenever the ConfigMap
// changes, the way the kubelet does (WriteKubeletDir). It returns once the
// files are first written (waiting for the ConfigMap to exist), and keeps
// mirroring in the background until ctx is done. Changes are picked up
// within the poll interval; a deleted ConfigMap leaves the last files, as
// the kubelet does.
func MirrorConfigMap(ctx context.Context, client kubernetes.Interface, ns, name, dir string, poll time.Duration) error {
	var (
		written bool
		last    string // resourceVersion written
	)
	sync := func(ctx context.Context) (bool, error) {
		cm, err := client.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return written, nil
		}
		if err != nil {
			return false, nil //nolint:nilerr // transient: try again at the next poll
		}
		if written && cm.ResourceVersion == last && last != "" {
			return true, nil
		}
		files := map[string][]byte{}
		for k, v := range cm.Data {
			files[k] = []byte(v)
		}
		for k, v := range cm.BinaryData {
			files[k] = v
		}
		if err := WriteKubeletDir(dir, files); err != nil {
			return false, fmt.Errorf("mirror ConfigMap %s/%s into %s: %w", ns, name, dir, err)
		}
		written, last = true, cm.ResourceVersion
		return true, nil
	}
	if err := wait.PollUntilContextCancel(ctx, poll, true, sync); err != nil {
		return fmt.Errorf("wait for ConfigMap %s/%s: %w", ns, name, err)
	}
	go func() {
		_ = wait.PollUntilContextCancel(ctx, poll, false, func(ctx context.Context) (bool, error) {
			_, err := sync(ctx)
			return false, err
		})
	}()
	return nil
}

// WriteKubeletDir writes files into dir with the layout and the atomic
// update of the kubelet's ConfigMap and Secret volumes: the files go into
// a new hidden timestamped directory, the symlink ..data is swapped to it
// by a rename, and each file is a symlink KEY -> ..data/KEY. A reader of
// dir/KEY sees the old content or the new one, never a mix; keys no longer
// in files are removed, and so is the previous directory.
func WriteKubeletDir(dir string, files map[string][]byte) error {
	for k := range files {
		if k == "" || strings.ContainsAny(k, `/\`) || strings.HasPrefix(k, "..") {
			return fmt.Errorf("key %q: not a file name", k)
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	ts, err := os.MkdirTemp(dir, ".."+time.Now().UTC().Format("2006_01_02_15_04_05."))
	if err != nil {
		return err
	}
	for k, v := range files {
		if err := os.WriteFile(filepath.Join(ts, k), v, 0o644); err != nil {
			return err
		}
	}
	data := filepath.Join(dir, "..data")
	old, _ := os.Readlink(data)
	tmp := filepath.Join(dir, "..data_tmp")
	_ = os.Remove(tmp)
	if err := os.Symlink(filepath.Base(ts), tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, data); err != nil {
		return err
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if _, keep := files[e.Name()]; !keep && !strings.HasPrefix(e.Name(), "..") {
			if err := os.Remove(filepath.Join(dir, e.Name())); err != nil {
				return err
			}
		}
	}
	for k := range files {
		link := filepath.Join(dir, k)
		if _, err := os.Lstat(link); err == nil {
			continue
		}
		if err := os.Symlink(filepath.Join("..data", k), link); err != nil {
			return err
		}
	}
	if old != "" && old != filepath.Base(ts) {
		return os.RemoveAll(filepath.Join(dir, old))
	}
	return nil
}
