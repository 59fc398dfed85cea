package toleration

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/utils/ptr"
)

func TestParseRuleData(t *testing.T) {
	for _, tc := range []struct {
		name string
		data map[string]string
		want Rule
	}{
		{"empty: the defaults", nil, DefaultRule()},
		{"every key", map[string]string{"tolerationSeconds": "5", "notReadyTolerationSeconds": "30", "defaultTolerationSeconds": "200"},
			Rule{TolerationSeconds: 5, NotReadyTolerationSeconds: ptr.To[int64](30), DefaultTolerationSeconds: 200}},
		{"leading zeros", map[string]string{"tolerationSeconds": "007"}, Rule{TolerationSeconds: 7, DefaultTolerationSeconds: 300}},
		{"15 digits", map[string]string{"tolerationSeconds": "999999999999999"},
			Rule{TolerationSeconds: 999999999999999, DefaultTolerationSeconds: 300}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseRuleData(tc.data)
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestParseRuleDataErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		data map[string]string
		want []string
	}{
		{"negative", map[string]string{"tolerationSeconds": "-1"}, []string{`tolerationSeconds: want a whole number of seconds, decimal digits only (at most 15), got "-1"`}},
		{"unit", map[string]string{"defaultTolerationSeconds": "300s"}, []string{`defaultTolerationSeconds: `, `got "300s"`}},
		{"space", map[string]string{"tolerationSeconds": " 5"}, []string{`got " 5"`}},
		{"newline", map[string]string{"tolerationSeconds": "5\n"}, []string{`got "5\n"`}},
		{"empty", map[string]string{"notReadyTolerationSeconds": ""}, []string{`notReadyTolerationSeconds: `, `got ""`}},
		{"16 digits", map[string]string{"tolerationSeconds": "1000000000000000"}, []string{`at most 15`}},
		{"unknown key", map[string]string{"tolerationseconds": "5"}, []string{`unknown key "tolerationseconds": want tolerationSeconds, notReadyTolerationSeconds, defaultTolerationSeconds`}},
		{"the former format", map[string]string{"rule.yaml": "apiVersion: fastover.io/v1alpha1\n"}, []string{"key rule.yaml: the rule is no longer one YAML document"}},
		{"all at once", map[string]string{"x": "1", "tolerationSeconds": "a", "defaultTolerationSeconds": "b"},
			[]string{`unknown key "x"`, `tolerationSeconds: `, `defaultTolerationSeconds: `}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseRuleData(tc.data)
			require.Error(t, err)
			for _, w := range tc.want {
				assert.Contains(t, err.Error(), w)
			}
		})
	}
}

func TestMarshalRuleData(t *testing.T) {
	for _, r := range []Rule{DefaultRule(), {TolerationSeconds: 5, NotReadyTolerationSeconds: ptr.To[int64](30), DefaultTolerationSeconds: 200}} {
		data, err := MarshalRuleData(r)
		require.NoError(t, err)
		got, err := ParseRuleData(data)
		require.NoError(t, err)
		assert.Equal(t, r, got)
	}
	data, _ := MarshalRuleData(DefaultRule())
	assert.Equal(t, map[string]string{"tolerationSeconds": "0", "defaultTolerationSeconds": "300"}, data)
	_, err := MarshalRuleData(Rule{TolerationSeconds: -1})
	assert.Error(t, err)
}

// TestLoadRuleFileDirectory: a directory is the ConfigMap as the kubelet
// mounts it; a file is a rule file; errors name the path.
func TestLoadRuleFileDirectory(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "rule")
	kubeletWrite(t, dir, map[string]string{"tolerationSeconds": "4", "notReadyTolerationSeconds": "9"})
	r, err := LoadRuleFile(dir)
	require.NoError(t, err)
	assert.Equal(t, Rule{TolerationSeconds: 4, NotReadyTolerationSeconds: ptr.To[int64](9), DefaultTolerationSeconds: 300}, r)

	kubeletWrite(t, dir, map[string]string{"rule.yaml": header + "tolerationSeconds: 4\n"})
	_, err = LoadRuleFile(dir)
	require.Error(t, err)
	assert.Contains(t, err.Error(), dir)
	assert.Contains(t, err.Error(), "key rule.yaml")

	// A plain directory (no ..data) is read as it is.
	plain := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(plain, "defaultTolerationSeconds"), []byte("200"), 0o600))
	r, err = LoadRuleFile(plain)
	require.NoError(t, err)
	assert.Equal(t, Rule{DefaultTolerationSeconds: 200}, r)

	file := filepath.Join(t.TempDir(), "rule.yaml")
	require.NoError(t, os.WriteFile(file, []byte(header+"tolerationSeconds: 3\n"), 0o600))
	r, err = LoadRuleFile(file)
	require.NoError(t, err)
	assert.Equal(t, int64(3), r.TolerationSeconds)
}

// TestReadKubeletDirWhileSwapped: the kubelet swaps versions under a
// reader; each read sees one whole version (both keys of the same
// version), and never fails because the version it began with was removed.
func TestReadKubeletDirWhileSwapped(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "rule")
	kubeletWrite(t, dir, map[string]string{"tolerationSeconds": "0", "defaultTolerationSeconds": "0"})
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 1; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			v := strconv.Itoa(i)
			kubeletWrite(t, dir, map[string]string{"tolerationSeconds": v, "defaultTolerationSeconds": v})
			time.Sleep(200 * time.Microsecond)
		}
	}()
	defer func() {
		close(stop)
		<-done
	}()
	for range 3000 {
		r, err := LoadRuleFile(dir)
		require.NoError(t, err)
		require.Equal(t, r.TolerationSeconds, r.DefaultTolerationSeconds, "a mix of two versions")
	}
}
