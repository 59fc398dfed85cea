package docs

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestTree keeps built things out of the repository: no tracked
// executable, no tracked file over MaxTrackedSize that is not declared test
// data, and every binary `go build` writes at the root ignored.
func TestTree(t *testing.T) {
	root := repoRoot(t)
	problems, err := CheckTree(root)
	require.NoError(t, err, "the tree check needs a git checkout of the repository")
	for _, p := range problems {
		t.Error(p)
	}
	outputs, err := rootBuildOutputs(root)
	require.NoError(t, err)
	assert.Contains(t, outputs, "fastover-example", "the main packages are found")
	t.Logf("checked the tracked files and %d root build outputs", len(outputs))
}

// TestCheckerFindsBuiltFiles runs CheckTree on a repository made for the
// test that holds one of each thing it must report, and the things it
// must let pass.
func TestCheckerFindsBuiltFiles(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatalf("git is needed: %v", err)
	}
	root := t.TempDir()
	write := func(rel string, b []byte) {
		p := filepath.Join(root, filepath.FromSlash(rel))
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, b, 0o644))
	}
	big := make([]byte, MaxTrackedSize+1)
	pe := make([]byte, 0x80)
	copy(pe, "MZ")
	pe[0x3c] = 0x40
	copy(pe[0x40:], "PE\x00\x00")

	write("tool", append([]byte("\x7fELF\x02\x01\x01"), make([]byte, 64)...)) // a Linux build output
	write("sub/tool.exe", pe)                                                 // a Windows one
	write("macos/tool", []byte{0xcf, 0xfa, 0xed, 0xfe, 7, 0, 0, 1})           // a Mach-O one
	write("notes.txt", []byte("MZ is how this text starts, and it is no executable\n"))
	write("data/big.bin", big)
	write("testdata/golden.bin", big)
	write("cmd/served/main.go", []byte("package main\n\nfunc main() {}\n"))
	write("cmd/ignored/main.go", []byte("package main\n\nfunc main() {}\n"))
	write("lib/testdata/helper/main.go", []byte("package main\n\nfunc main() {}\n"))
	write("lib/lib.go", []byte("package lib\n"))
	write(".gitignore", []byte("/ignored\n"))
	write(".gitattributes", []byte("testdata/golden.bin "+TestDataAttribute+"\n"))
	for _, args := range [][]string{
		{"init", "-q"},
		{"add", "-A"},
	} {
		out, err := exec.Command("git", append([]string{"-C", root}, args...)...).CombinedOutput()
		require.NoError(t, err, "git %s: %s", strings.Join(args, " "), out)
	}

	problems, err := CheckTree(root)
	require.NoError(t, err)
	text := strings.Join(problems, "\n")
	for _, want := range []string{
		"tool: a built executable",
		"sub/tool.exe: a built executable",
		"macos/tool: a built executable",
		"data/big.bin: 1048577 bytes",
		"/served: go build writes it at the root",
	} {
		assert.Contains(t, text, want)
	}
	assert.Len(t, problems, 5, "only those:\n%s", text)
	for _, never := range []string{"notes.txt", "golden.bin", "/ignored", "/helper", "lib"} {
		assert.NotContains(t, text, never+":")
	}
}
