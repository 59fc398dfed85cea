package docs

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"
)

// MaxTrackedSize is the largest file the repository tracks without a
// declaration: a larger one must carry the fastover-testdata attribute in
// .gitattributes (a path, then "fastover-testdata").
const MaxTrackedSize = 1 << 20

// TestDataAttribute is the .gitattributes attribute that declares a large
// tracked file test data.
const TestDataAttribute = "fastover-testdata"

// executableMagics are the first bytes of the executables a Go build
// writes: ELF, Mach-O (32 and 64 bits, both byte orders, universal) and PE.
var executableMagics = [][]byte{
	[]byte("\x7fELF"),
	{0xfe, 0xed, 0xfa, 0xce}, {0xce, 0xfa, 0xed, 0xfe},
	{0xfe, 0xed, 0xfa, 0xcf}, {0xcf, 0xfa, 0xed, 0xfe},
	{0xca, 0xfe, 0xba, 0xbe},
	[]byte("MZ"),
}

// CheckTree reports what the repository at root should not track: a built
// executable (whatever its name or size), a file over MaxTrackedSize that
// .gitattributes does not declare test data, and a binary that go build
// writes at the root (one per main package) that .gitignore does not cover. It reads the index, so it checks what a
// commit would hold, not the work tree's stray files.
func CheckTree(root string) ([]string, error) {
	out, err := git(root, nil, "ls-files", "-z")
	if err != nil {
		return nil, err
	}
	var problems, large []string
	for _, rel := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		if rel == "" {
			continue
		}
		p := filepath.Join(root, filepath.FromSlash(rel))
		fi, err := os.Lstat(p)
		if errors.Is(err, os.ErrNotExist) {
			continue // deleted in the work tree; the index still names it
		}
		if err != nil {
			return nil, err
		}
		if !fi.Mode().IsRegular() {
			continue
		}
		if exe, err := isExecutable(p); err != nil {
			return nil, err
		} else if exe {
			problems = append(problems, fmt.Sprintf("%s: a built executable (%d bytes) is tracked; build outputs belong in bin/ or .gitignore", rel, fi.Size()))
			continue
		}
		if fi.Size() > MaxTrackedSize {
			large = append(large, rel)
		}
	}
	declared, err := declaredTestData(root, large)
	if err != nil {
		return nil, err
	}
	for _, rel := range large {
		if !declared[rel] {
			fi, _ := os.Stat(filepath.Join(root, filepath.FromSlash(rel)))
			problems = append(problems, fmt.Sprintf("%s: %d bytes, over the %d a tracked file may hold; declare test data in .gitattributes (%q %s) or keep it out of the tree",
				rel, fi.Size(), MaxTrackedSize, rel, TestDataAttribute))
		}
	}
	outputs, err := rootBuildOutputs(root)
	if err != nil {
		return nil, err
	}
	for _, name := range outputs {
		ignored, err := isIgnored(root, name)
		if err != nil {
			return nil, err
		}
		if !ignored {
			problems = append(problems, fmt.Sprintf("/%s: go build writes it at the root and .gitignore does not cover it", name))
		}
	}
	sort.Strings(problems)
	return problems, nil
}

// isExecutable says whether the file at p starts as a built executable does.
func isExecutable(p string) (bool, error) {
	f, err := os.Open(p)
	if err != nil {
		return false, err
	}
	defer func() { _ = f.Close() }()
	head := make([]byte, 4096)
	n, err := io.ReadFull(f, head)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return false, err
	}
	head = head[:n]
	for _, m := range executableMagics {
		if bytes.HasPrefix(head, m) {
			if string(m) == "MZ" {
				return isPE(head), nil
			}
			return true, nil
		}
	}
	return false, nil
}

// isPE says whether head, which starts with "MZ" (as some text does too),
// is a PE file's: the DOS stub holds the offset of the "PE\0\0" signature
// at 0x3c.
func isPE(head []byte) bool {
	if len(head) < 0x40 {
		return false
	}
	at := int(head[0x3c]) | int(head[0x3d])<<8 | int(head[0x3e])<<16 | int(head[0x3f])<<24
	return at >= 0 && at+4 <= len(head) && string(head[at:at+4]) == "PE\x00\x00"
}

// declaredTestData returns which of files carry TestDataAttribute.
func declaredTestData(root string, files []string) (map[string]bool, error) {
	declared := map[string]bool{}
	if len(files) == 0 {
		return declared, nil
	}
	in := strings.Join(files, "\x00") + "\x00"
	out, err := git(root, strings.NewReader(in), "check-attr", "-z", "--stdin", TestDataAttribute)
	if err != nil {
		return nil, err
	}
	// -z output: path NUL attribute NUL value NUL, for each path.
	f := strings.Split(strings.TrimRight(string(out), "\x00"), "\x00")
	for i := 0; i+2 < len(f); i += 3 {
		if v := f[i+2]; v == "set" || v == "true" {
			declared[f[i]] = true
		}
	}
	return declared, nil
}

// rootBuildOutputs names the binaries `go build ./DIR` writes in the
// directory it runs in: one per tracked main package (outside testdata),
// named after its directory.
func rootBuildOutputs(root string) ([]string, error) {
	out, err := git(root, nil, "grep", "-l", "-z", "^package main$", "--", "*.go", ":!*_test.go")
	var exit *exec.ExitError
	if errors.As(err, &exit) && exit.ExitCode() == 1 {
		return nil, nil // no main package
	}
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var names []string
	for _, rel := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		dir := path.Dir(rel)
		if rel == "" || dir == "." || strings.Contains("/"+dir+"/", "/testdata/") {
			continue
		}
		if name := path.Base(dir); !seen[name] {
			seen[name] = true
			names = append(names, name)
		}
	}
	sort.Strings(names)
	return names, nil
}

// isIgnored says whether .gitignore covers name, a path relative to root,
// tracked or not.
func isIgnored(root, name string) (bool, error) {
	_, err := git(root, nil, "check-ignore", "-q", "--no-index", name)
	var exit *exec.ExitError
	if errors.As(err, &exit) && exit.ExitCode() == 1 {
		return false, nil
	}
	return err == nil, err
}

// git runs git in root with stdin and returns its standard output.
func git(root string, stdin io.Reader, args ...string) ([]byte, error) {
	cmd := exec.Command("git", append([]string{"-C", root}, args...)...)
	cmd.Stdin = stdin
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}
