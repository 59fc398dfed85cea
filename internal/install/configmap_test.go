package install

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

func TestWriteKubeletDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "rule")
	require.NoError(t, WriteKubeletDir(dir, map[string][]byte{"a": []byte("1"), "b": []byte("2")}))
	first, err := os.Readlink(filepath.Join(dir, "..data"))
	require.NoError(t, err)
	read := func(k string) string {
		b, err := os.ReadFile(filepath.Join(dir, k))
		require.NoError(t, err)
		return string(b)
	}
	assert.Equal(t, "1", read("a"))
	link, err := os.Readlink(filepath.Join(dir, "a"))
	require.NoError(t, err)
	assert.Equal(t, "..data/a", link, "each key is a symlink through ..data")

	require.NoError(t, WriteKubeletDir(dir, map[string][]byte{"a": []byte("3")}))
	assert.Equal(t, "3", read("a"))
	_, err = os.Lstat(filepath.Join(dir, "b"))
	assert.ErrorIs(t, err, os.ErrNotExist, "a key gone from the ConfigMap is gone from the directory")
	_, err = os.Stat(filepath.Join(dir, first))
	assert.ErrorIs(t, err, os.ErrNotExist, "the previous version is removed")
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Len(t, entries, 3, "a, ..data and one timestamped directory")

	assert.Error(t, WriteKubeletDir(dir, map[string][]byte{"../x": nil}))
	assert.Error(t, WriteKubeletDir(dir, map[string][]byte{"..data": nil}))
}

func TestMirrorConfigMap(t *testing.T) {
	client := fake.NewClientset()
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		time.Sleep(50 * time.Millisecond)
		_, _ = client.CoreV1().ConfigMaps("ns").Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "cm", ResourceVersion: "1"},
			Data:       map[string]string{"rule.yaml": "one"},
		}, metav1.CreateOptions{})
	}()
	require.NoError(t, MirrorConfigMap(ctx, client, "ns", "cm", dir, 10*time.Millisecond), "waits for the ConfigMap")
	b, err := os.ReadFile(filepath.Join(dir, "rule.yaml"))
	require.NoError(t, err)
	assert.Equal(t, "one", string(b))

	_, err = client.CoreV1().ConfigMaps("ns").Update(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "cm", ResourceVersion: "2"},
		Data:       map[string]string{"rule.yaml": "two"},
		BinaryData: map[string][]byte{"bin": {0, 1}},
	}, metav1.UpdateOptions{})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		b, _ := os.ReadFile(filepath.Join(dir, "rule.yaml"))
		return string(b) == "two"
	}, 10*time.Second, 10*time.Millisecond)
	b, err = os.ReadFile(filepath.Join(dir, "bin"))
	require.NoError(t, err)
	assert.Equal(t, []byte{0, 1}, b)

	shortCtx, shortCancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer shortCancel()
	err = MirrorConfigMap(shortCtx, client, "ns", "none", t.TempDir(), 10*time.Millisecond)
	assert.ErrorContains(t, err, "wait for ConfigMap ns/none")
}
