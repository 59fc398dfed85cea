package testtime

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Tests reads the _test.go files of the package in dir and returns the
// names of its top-level tests, sorted, in two sets: parallel, those whose
// first statement is a call of their *testing.T's Parallel method (tests/e2e's
// convention for a test that times nothing, its doc.go), and serial, the
// rest. make test runs the two sets of tests/e2e beside different work, with
// `go test -run` and Pattern.
func Tests(dir string) (serial, parallel []string, err error) {
	files, err := filepath.Glob(filepath.Join(dir, "*_test.go"))
	if err != nil {
		return nil, nil, err
	}
	if len(files) == 0 {
		return nil, nil, fmt.Errorf("%s holds no _test.go file", dir)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		src, err := os.ReadFile(name)
		if err != nil {
			return nil, nil, err
		}
		f, err := parser.ParseFile(fset, name, src, parser.SkipObjectResolution)
		if err != nil {
			return nil, nil, err
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || !isTest(fn) {
				continue
			}
			if callsParallelFirst(fn) {
				parallel = append(parallel, fn.Name.Name)
			} else {
				serial = append(serial, fn.Name.Name)
			}
		}
	}
	sort.Strings(serial)
	sort.Strings(parallel)
	return serial, parallel, nil
}

// isTest says whether fn is a test go test runs: func TestXxx(t *testing.T),
// Xxx not beginning with a lower-case letter.
func isTest(fn *ast.FuncDecl) bool {
	rest, ok := strings.CutPrefix(fn.Name.Name, "Test")
	if !ok || fn.Recv != nil || fn.Body == nil {
		return false
	}
	if r, _ := utf8.DecodeRuneInString(rest); rest != "" && unicode.IsLower(r) {
		return false
	}
	params := fn.Type.Params.List
	if len(params) != 1 || len(params[0].Names) > 1 {
		return false
	}
	star, ok := params[0].Type.(*ast.StarExpr)
	if !ok {
		return false
	}
	sel, ok := star.X.(*ast.SelectorExpr)
	if !ok || sel.Sel.Name != "T" {
		return false
	}
	pkg, ok := sel.X.(*ast.Ident)
	return ok && pkg.Name == "testing"
}

// callsParallelFirst says whether the test fn's first statement is
// t.Parallel(), t being its parameter.
func callsParallelFirst(fn *ast.FuncDecl) bool {
	params := fn.Type.Params.List[0].Names
	if len(params) == 0 || len(fn.Body.List) == 0 {
		return false
	}
	stmt, ok := fn.Body.List[0].(*ast.ExprStmt)
	if !ok {
		return false
	}
	call, ok := stmt.X.(*ast.CallExpr)
	if !ok || len(call.Args) != 0 {
		return false
	}
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok || sel.Sel.Name != "Parallel" {
		return false
	}
	recv, ok := sel.X.(*ast.Ident)
	return ok && recv.Name == params[0].Name
}

// Pattern is a `go test -run` pattern that matches the top-level tests
// named and no other; with no names it matches none.
func Pattern(names []string) string {
	if len(names) == 0 {
		return "^$"
	}
	quoted := make([]string, len(names))
	for i, n := range names {
		quoted[i] = regexp.QuoteMeta(n)
	}
	return "^(" + strings.Join(quoted, "|") + ")$"
}
