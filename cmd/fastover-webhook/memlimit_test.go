package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestCgroupMemoryLimit(t *testing.T) {
	write := func(t *testing.T, root, path, content string) {
		t.Helper()
		p := filepath.Join(root, path)
		assert.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		assert.NoError(t, os.WriteFile(p, []byte(content), 0o600))
	}
	tests := []struct {
		name  string
		files map[string]string
		want  int64 // 0: none
	}{
		{"v2 in a container (cgroup namespace)", map[string]string{
			"proc/self/cgroup": "0::/\n", "sys/fs/cgroup/memory.max": "134217728\n"}, 134217728},
		{"v2 on a host path", map[string]string{
			"proc/self/cgroup":                          "0::/kubepods/pod1/c1\n",
			"sys/fs/cgroup/kubepods/pod1/c1/memory.max": "268435456\n"}, 268435456},
		{"v2 without a limit", map[string]string{
			"proc/self/cgroup": "0::/\n", "sys/fs/cgroup/memory.max": "max\n"}, 0},
		{"v1 in a container", map[string]string{
			"proc/self/cgroup":                           "4:memory:/docker/abc\n1:cpu:/\n0::/\n",
			"sys/fs/cgroup/memory/memory.limit_in_bytes": "134217728\n"}, 134217728},
		{"v1 without a limit", map[string]string{
			"proc/self/cgroup":                           "4:cpuacct,memory:/\n",
			"sys/fs/cgroup/memory/memory.limit_in_bytes": "9223372036854771712\n"}, 0},
		{"no cgroup file system", map[string]string{}, 0},
		{"garbage", map[string]string{"proc/self/cgroup": "0::/\n", "sys/fs/cgroup/memory.max": "lots\n"}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			for p, c := range tt.files {
				write(t, root, p, c)
			}
			got, ok := cgroupMemoryLimit(root)
			assert.Equal(t, tt.want != 0, ok)
			assert.Equal(t, tt.want, got)
		})
	}
}
