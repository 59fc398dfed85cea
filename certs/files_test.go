package certs

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/controller-runtime/pkg/certwatcher"
)

// assertOneGeneration checks the layout WriteDir promises: the names are
// links through ..data, ..data names the one generation directory, which
// holds exactly the names; nothing else is left in dir.
func assertOneGeneration(t *testing.T, dir string, names ...string) {
	t.Helper()
	gen, err := os.Readlink(filepath.Join(dir, DataLink))
	require.NoError(t, err, "..data is a symbolic link")
	assert.False(t, filepath.IsAbs(gen), "..data is relative, so the directory can move: %s", gen)
	want := append([]string{DataLink, gen}, names...)
	sort.Strings(want)
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var got []string
	for _, e := range entries {
		got = append(got, e.Name())
	}
	assert.Equal(t, want, got, "no other generation, no temporary file left behind")
	for _, name := range names {
		target, err := os.Readlink(filepath.Join(dir, name))
		if assert.NoError(t, err, "%s is a link", name) {
			assert.Equal(t, filepath.Join(DataLink, name), target)
		}
	}
	inGen, err := os.ReadDir(filepath.Join(dir, gen))
	require.NoError(t, err)
	got = nil
	for _, e := range inGen {
		got = append(got, e.Name())
		assert.True(t, e.Type().IsRegular(), "%s/%s is a regular file", gen, e.Name())
	}
	want = append([]string{}, names...)
	sort.Strings(want)
	assert.Equal(t, want, got)
}

func issue(t testing.TB, ca *CA) *KeyPair {
	t.Helper()
	kp, err := ca.Issue([]string{"localhost"}, time.Hour)
	require.NoError(t, err)
	return kp
}

func TestWriteDirRotates(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "certs")
	ca, err := NewCA("x", time.Hour)
	require.NoError(t, err)
	for range 3 {
		kp := issue(t, ca)
		require.NoError(t, WriteDir(dir, kp, ca))
		assertOneGeneration(t, dir, CAFile, CertFile, KeyFile)
		got, err := os.ReadFile(filepath.Join(dir, CertFile))
		require.NoError(t, err)
		assert.Equal(t, kp.CertPEM, got)
		got, err = os.ReadFile(filepath.Join(dir, KeyFile))
		require.NoError(t, err)
		assert.Equal(t, kp.KeyPEM, got)
		info, err := os.Stat(filepath.Join(dir, KeyFile))
		require.NoError(t, err)
		assert.Equal(t, os.FileMode(0o600), info.Mode().Perm())
		info, err = os.Stat(filepath.Join(dir, CertFile))
		require.NoError(t, err)
		assert.Equal(t, os.FileMode(0o644), info.Mode().Perm())
	}

	// What an interrupted writer leaves behind goes with the next write.
	require.NoError(t, os.Mkdir(filepath.Join(dir, "..2020_01_01_00_00_00.000000000.1"), 0o755))
	require.NoError(t, os.Symlink("nowhere", filepath.Join(dir, tmpLinkPrefix+"tls.crt.1")))
	require.NoError(t, WriteDir(dir, issue(t, ca), ca))
	assertOneGeneration(t, dir, CAFile, CertFile, KeyFile)

	// Without a CA: no ca.crt any more (a link to nothing would be worse).
	require.NoError(t, WriteDir(dir, issue(t, ca), nil))
	assertOneGeneration(t, dir, CertFile, KeyFile)
}

// A directory written by an older fastover-certs holds regular files; the
// next write turns it into the layout of links.
func TestWriteDirConvertsRegularFiles(t *testing.T) {
	dir := t.TempDir()
	ca, err := NewCA("x", time.Hour)
	require.NoError(t, err)
	old := issue(t, ca)
	require.NoError(t, os.WriteFile(filepath.Join(dir, CertFile), old.CertPEM, 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, KeyFile), old.KeyPEM, 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, CAFile), ca.CertPEM, 0o644))

	kp := issue(t, ca)
	require.NoError(t, WriteDir(dir, kp, ca))
	assertOneGeneration(t, dir, CAFile, CertFile, KeyFile)
	pair, err := tls.LoadX509KeyPair(filepath.Join(dir, CertFile), filepath.Join(dir, KeyFile))
	require.NoError(t, err)
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	require.NoError(t, err)
	assert.Equal(t, kp.Serial, leaf.SerialNumber)

	// A regular ca.crt of the old layout stays when no CA is given.
	dir = t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, CAFile), ca.CertPEM, 0o644))
	require.NoError(t, WriteDir(dir, kp, nil))
	got, err := os.ReadFile(filepath.Join(dir, CAFile))
	require.NoError(t, err)
	assert.Equal(t, ca.CertPEM, got)
}

func TestWriteDirRefusesAMismatchedPair(t *testing.T) {
	dir := t.TempDir()
	ca, err := NewCA("x", time.Hour)
	require.NoError(t, err)
	a, b := issue(t, ca), issue(t, ca)
	require.NoError(t, WriteDir(dir, a, ca))
	err = WriteDir(dir, &KeyPair{CertPEM: a.CertPEM, KeyPEM: b.KeyPEM}, ca)
	assert.ErrorContains(t, err, "does not match")
	assert.Error(t, WriteDir(dir, &KeyPair{}, ca))
	assert.Error(t, WriteDir(dir, nil, ca))
	assertOneGeneration(t, dir, CAFile, CertFile, KeyFile)
	got, err := os.ReadFile(filepath.Join(dir, CertFile))
	require.NoError(t, err)
	assert.Equal(t, a.CertPEM, got, "a refused write changes nothing")
}

// A reader loads the pair the way the webhook's watcher does (the
// certificate, then the key, by path) while the writer rotates many times.
// A load that fails while ..data stayed the same would be a torn pair at
// rest: there must be none. A load that straddles a switch of ..data may
// fail (a certificate and a key of two generations; crypto/tls tells): it
// is counted, and the reader reads again, as the watcher does.
func TestWriteDirReaderNeverSeesAMismatch(t *testing.T) {
	rotations := 500
	if testing.Short() {
		rotations = 100
	}
	// What a reader sees does not depend on syncing to disk (the page cache
	// is the same for all processes); without it the writer rotates
	// faster, which tests more switches.
	real := fsync
	fsync = func(*os.File) error { return nil }
	defer func() { fsync = real }()
	dir := filepath.Join(t.TempDir(), "certs")
	ca, err := NewCA("x", time.Hour)
	require.NoError(t, err)
	require.NoError(t, WriteDir(dir, issue(t, ca), ca))

	certPath, keyPath := filepath.Join(dir, CertFile), filepath.Join(dir, KeyFile)
	generation := func() string {
		g, _ := os.Readlink(filepath.Join(dir, DataLink))
		return g
	}
	var (
		wg                        sync.WaitGroup
		done                      = make(chan struct{})
		loads, straddles, readers int
		torn                      []string
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			default:
			}
			before := generation()
			_, err := tls.LoadX509KeyPair(certPath, keyPath)
			after := generation()
			readers++
			switch {
			case err == nil:
				loads++
			case before != after:
				straddles++
			default:
				torn = append(torn, err.Error())
			}
		}
	}()
	start := time.Now()
	for range rotations {
		require.NoError(t, WriteDir(dir, issue(t, ca), ca))
	}
	elapsed := time.Since(start)
	close(done)
	wg.Wait()
	t.Logf("%d rotations in %v (%v each); %d loads, %d good, %d straddled a switch, %d torn",
		rotations, elapsed.Round(time.Millisecond), (elapsed / time.Duration(rotations)).Round(time.Microsecond),
		readers, loads, straddles, len(torn))
	if len(torn) > 0 {
		t.Errorf("%d loads found a certificate and a key of two generations while ..data stayed the same, e.g. %s", len(torn), torn[0])
	}
	assert.Greater(t, loads, 0)
	assertOneGeneration(t, dir, CAFile, CertFile, KeyFile)
}

// The webhook reads its pair with controller-runtime's certwatcher, polling
// only every 10 s. Each rotation reaches it through file events: with the
// poll set to an hour, every new certificate must still be served.
func TestWriteDirRotationReachesCertwatcher(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "certs")
	ca, err := NewCA("x", time.Hour)
	require.NoError(t, err)
	require.NoError(t, WriteDir(dir, issue(t, ca), ca))
	cw, err := certwatcher.New(filepath.Join(dir, CertFile), filepath.Join(dir, KeyFile))
	require.NoError(t, err)
	cw = cw.WithWatchInterval(time.Hour)
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- cw.Start(ctx) }()
	defer func() {
		cancel()
		assert.NoError(t, <-stopped)
	}()
	serving := func() string {
		c, err := cw.GetCertificate(nil)
		if err != nil || c == nil {
			return ""
		}
		leaf, err := x509.ParseCertificate(c.Certificate[0])
		if err != nil {
			return ""
		}
		return leaf.SerialNumber.String()
	}
	waitServing := func(serial string, within time.Duration) (time.Duration, bool) {
		start := time.Now()
		for time.Since(start) < within {
			if serving() == serial {
				return time.Since(start), true
			}
			time.Sleep(5 * time.Millisecond)
		}
		return within, false
	}

	// The watches are added once Start runs; until the first rotation is
	// seen, rotate again (only here).
	seen := false
	for try := 0; try < 10 && !seen; try++ {
		kp := issue(t, ca)
		require.NoError(t, WriteDir(dir, kp, ca))
		_, seen = waitServing(kp.Serial.String(), 2*time.Second)
	}
	require.True(t, seen, "the watcher never served a rotated certificate")

	var slowest time.Duration
	for i := range 10 {
		kp := issue(t, ca)
		require.NoError(t, WriteDir(dir, kp, ca))
		took, ok := waitServing(kp.Serial.String(), 20*time.Second)
		require.True(t, ok, "rotation %d not served after %v", i, took)
		slowest = max(slowest, took)
	}
	t.Logf("10 rotations picked up by certwatcher through file events, slowest after %v", slowest)
}

// Every file and directory entry is on disk before anything points to it:
// each file of a generation, and the generation directory, are synced
// before ..data names it, and the directory is synced after.
func TestWritesAreSynced(t *testing.T) {
	dir := t.TempDir()
	ca, err := NewCA("x", time.Hour)
	require.NoError(t, err)
	require.NoError(t, WriteDir(dir, issue(t, ca), ca))

	type syncEvent struct {
		path      string
		published string // ..data's target at the time
	}
	var events []syncEvent
	real := fsync
	fsync = func(f *os.File) error {
		g, _ := os.Readlink(filepath.Join(dir, DataLink))
		events = append(events, syncEvent{f.Name(), g})
		return real(f)
	}
	defer func() { fsync = real }()
	require.NoError(t, WriteDir(dir, issue(t, ca), ca))
	gen, err := os.Readlink(filepath.Join(dir, DataLink))
	require.NoError(t, err)

	syncedBefore := map[string]bool{}
	dirSyncedAfter := false
	for _, e := range events {
		if e.published != gen {
			syncedBefore[e.path] = true
		} else if e.path == dir {
			dirSyncedAfter = true
		}
	}
	for _, name := range []string{KeyFile, CertFile, CAFile, ""} {
		p := filepath.Join(dir, gen, name)
		if name == "" {
			p = filepath.Join(dir, gen)
		}
		assert.True(t, syncedBefore[p], "%s synced before ..data named it; synced: %v", p, events)
	}
	assert.True(t, dirSyncedAfter, "the directory synced after ..data was switched; synced: %v", events)

	// The CA's files, each written aside, synced, renamed, then the
	// directory synced.
	events = nil
	caDir := filepath.Join(t.TempDir(), "ca")
	require.NoError(t, SaveCA(caDir, ca))
	var order []string
	for _, e := range events {
		name := filepath.Base(e.path)
		switch {
		case e.path == caDir:
			order = append(order, "dir")
		case strings.HasPrefix(name, "."+CAKeyFile+"."):
			order = append(order, CAKeyFile)
		case strings.HasPrefix(name, "."+CAFile+"."):
			order = append(order, CAFile)
		}
	}
	assert.Equal(t, []string{CAKeyFile, "dir", CAFile, "dir"}, order)
	parentSynced := false
	for _, e := range events {
		parentSynced = parentSynced || e.path == filepath.Dir(caDir)
	}
	assert.True(t, parentSynced, "the new directory's parent synced")
	again, err := ReadCA(caDir)
	require.NoError(t, err)
	assert.Equal(t, ca.CertPEM, again.CertPEM)
}
