package certs

import (
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// DataLink is the symbolic link of a certificate directory that names the
// generation being served; see WriteDir.
const DataLink = "..data"

// generationLayout names a generation directory: UTC time to the
// nanosecond, then a random suffix, so that a name is never used twice.
const generationLayout = "..2006_01_02_15_04_05.000000000."

// WriteDir writes the key pair as tls.crt and tls.key into dir, and the CA
// certificate as ca.crt if ca is not nil, so that a reader of dir never
// finds a certificate and a key of different generations.
//
// The files of each call go into a new generation directory, written and
// synced to disk before anything points to it; the symbolic link ..data is
// then switched to it in one rename. tls.crt, tls.key and ca.crt are
// symbolic links through ..data (tls.crt -> ..data/tls.crt), so their paths
// never change, and at any moment all three resolve into one generation.
// The previous generation is removed afterwards: a file watcher holding
// the old files (controller-runtime's certwatcher, as the webhook uses)
// sees them go and reads the paths again. This is the layout the kubelet
// gives a Secret volume, so the webhook reads a mounted Secret and a
// directory made here alike.
//
// A reader that opens tls.crt and tls.key one after the other can still
// straddle a switch and get a certificate and a key that do not belong
// together: no layout of two files prevents that. Such a pair fails to
// load (crypto/tls checks that the key is the certificate's), and the
// reader reads again; the webhook's watcher does so on the removal of the
// previous generation. A pair read while ..data did not change always
// matches.
//
// A directory written by an older version (regular files) is converted on
// the first call: tls.key, then ca.crt, then tls.crt become links, each in
// one rename, so only during that one conversion can a reader see the new
// key beside the old certificate, for the time between two renames.
//
// ca == nil leaves no ca.crt in the new generation (a link to one is
// removed; a regular ca.crt of the older layout is left as it is). Only one
// writer may write a directory at a time.
func WriteDir(dir string, kp *KeyPair, ca *CA) (err error) {
	if kp == nil {
		return errors.New("no key pair to write")
	}
	if _, err := tls.X509KeyPair(kp.CertPEM, kp.KeyPEM); err != nil {
		return fmt.Errorf("key pair to write to %s: %w", dir, err)
	}
	files := []genFile{
		{KeyFile, kp.KeyPEM, 0o600},
		{CertFile, kp.CertPEM, 0o644},
	}
	if ca != nil {
		if len(ca.CertPEM) == 0 {
			return errors.New("the CA has no certificate to write")
		}
		files = append(files, genFile{CAFile, ca.CertPEM, 0o644})
	}
	if err := mkdirDurable(dir, 0o755); err != nil {
		return err
	}

	gen, err := os.MkdirTemp(dir, time.Now().UTC().Format(generationLayout))
	if err != nil {
		return err
	}
	published := false
	defer func() {
		if !published {
			_ = os.RemoveAll(gen)
		}
	}()
	if err := os.Chmod(gen, 0o755); err != nil {
		return err
	}
	for _, f := range files {
		if err := writeNewFile(filepath.Join(gen, f.name), f.data, f.mode); err != nil {
			return err
		}
	}
	if err := syncDir(gen); err != nil {
		return err
	}
	if err := replaceWithSymlink(dir, DataLink, filepath.Base(gen)); err != nil {
		return err
	}
	published = true

	// The paths readers open: links through ..data. Already links after
	// the first call; converted from regular files once, key first and
	// certificate last (a watcher reloads when the certificate changes).
	for _, name := range []string{KeyFile, CAFile, CertFile} {
		if name == CAFile && ca == nil {
			continue
		}
		target := filepath.Join(DataLink, name)
		if cur, err := os.Readlink(filepath.Join(dir, name)); err == nil && cur == target {
			continue
		}
		if err := replaceWithSymlink(dir, name, target); err != nil {
			return err
		}
	}
	if ca == nil {
		if cur, err := os.Readlink(filepath.Join(dir, CAFile)); err == nil && cur == filepath.Join(DataLink, CAFile) {
			if err := os.Remove(filepath.Join(dir, CAFile)); err != nil {
				return err
			}
			if err := syncDir(dir); err != nil {
				return err
			}
		}
	}
	return removeStale(dir, filepath.Base(gen))
}

// genFile is a file of a generation.
type genFile struct {
	name string
	data []byte
	mode os.FileMode
}

// removeStale removes the generations other than current, and temporary
// links a writer left behind when it was interrupted.
func removeStale(dir, current string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	removed := false
	for _, e := range entries {
		name := e.Name()
		stale := strings.HasPrefix(name, tmpLinkPrefix) ||
			(e.IsDir() && name != current && isGeneration(name))
		if !stale {
			continue
		}
		if err := os.RemoveAll(filepath.Join(dir, name)); err != nil {
			return err
		}
		removed = true
	}
	if removed {
		return syncDir(dir)
	}
	return nil
}

// isGeneration tells a generation directory's name from other names.
func isGeneration(name string) bool {
	return len(name) > 2 && strings.HasPrefix(name, "..") && name[2] >= '0' && name[2] <= '9'
}

const tmpLinkPrefix = "..tmp."

// replaceWithSymlink makes dir/name a symbolic link to target in one
// rename, whatever dir/name was (nothing, a file, a link), and syncs dir.
func replaceWithSymlink(dir, name, target string) error {
	suffix := make([]byte, 8)
	if _, err := rand.Read(suffix); err != nil {
		return err
	}
	tmp := filepath.Join(dir, tmpLinkPrefix+name+"."+hex.EncodeToString(suffix))
	if err := os.Symlink(target, tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	return syncDir(dir)
}

// writeNewFile creates path, which must not exist, with data and mode, and
// syncs it to disk.
func writeNewFile(path string, data []byte, mode os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	if err := writeSyncClose(f, data, mode); err != nil {
		_ = os.Remove(path)
		return err
	}
	return nil
}

// writeAtomic replaces path with data in one rename: the file is written
// aside and synced, renamed into place, and the directory synced, so after
// a crash path holds the old content or the new one, never a part.
func writeAtomic(path string, data []byte, mode os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".")
	if err != nil {
		return err
	}
	if err := writeSyncClose(tmp, data, mode); err != nil {
		_ = os.Remove(tmp.Name())
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		_ = os.Remove(tmp.Name())
		return err
	}
	return syncDir(filepath.Dir(path))
}

// writeSyncClose writes data to f, sets its mode (whatever the umask),
// syncs and closes it.
func writeSyncClose(f *os.File, data []byte, mode os.FileMode) error {
	_, err := f.Write(data)
	if err == nil {
		err = f.Chmod(mode)
	}
	if err == nil {
		err = fsync(f)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// fsync flushes a file or directory to disk (a variable for tests, which
// record what is synced and when).
var fsync = (*os.File).Sync

// syncDir flushes a directory's entries (creations, renames, removals) to
// disk.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = fsync(d)
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	return nil
}

// mkdirDurable makes dir and any missing parents with mode, and syncs the
// parent of each directory it made so that the new entries survive a crash.
func mkdirDurable(dir string, mode os.FileMode) error {
	var missing []string
	for p := filepath.Clean(dir); ; p = filepath.Dir(p) {
		if _, err := os.Stat(p); err == nil {
			break
		} else if !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		missing = append(missing, p)
		if filepath.Dir(p) == p {
			break
		}
	}
	if len(missing) == 0 {
		return nil
	}
	if err := os.MkdirAll(dir, mode); err != nil {
		return err
	}
	for _, p := range missing {
		if err := syncDir(filepath.Dir(p)); err != nil {
			return err
		}
	}
	return nil
}
