package docs

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
)

// packageDirs maps the names of fastover's library packages to their
// directories: what a document may write as pkg.Name.
func (c *Checker) packageDirs() map[string]string {
	dirs := map[string]string{}
	for _, pattern := range []string{"*", "internal/*"} {
		matches, _ := filepath.Glob(filepath.Join(c.Root, pattern))
		for _, m := range matches {
			if fi, err := os.Stat(m); err != nil || !fi.IsDir() {
				continue
			}
			rel, _ := filepath.Rel(c.Root, m)
			dirs[filepath.Base(m)] = filepath.ToSlash(rel)
		}
	}
	return dirs
}

// declarations returns the names a package declares: top-level names,
// and Type.Method and Type.Field for its types.
func (c *Checker) declarations(dir string) map[string]bool {
	if d, ok := c.decls[dir]; ok {
		return d
	}
	names := map[string]bool{}
	c.decls[dir] = names
	fset := token.NewFileSet()
	files, _ := filepath.Glob(filepath.Join(c.Root, filepath.FromSlash(dir), "*.go"))
	for _, file := range files {
		if strings.HasSuffix(file, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, file, nil, parser.SkipObjectResolution)
		if err != nil || f.Name.Name == "main" {
			continue
		}
		for _, decl := range f.Decls {
			switch d := decl.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil || len(d.Recv.List) == 0 {
					names[d.Name.Name] = true
					continue
				}
				if recv := receiverType(d.Recv.List[0].Type); recv != "" {
					names[recv+"."+d.Name.Name] = true
				}
			case *ast.GenDecl:
				for _, spec := range d.Specs {
					switch s := spec.(type) {
					case *ast.TypeSpec:
						names[s.Name.Name] = true
						if st, ok := s.Type.(*ast.StructType); ok {
							for _, field := range st.Fields.List {
								for _, n := range field.Names {
									names[s.Name.Name+"."+n.Name] = true
								}
							}
						}
					case *ast.ValueSpec:
						for _, n := range s.Names {
							names[n.Name] = true
						}
					}
				}
			}
		}
	}
	return names
}

// receiverType is the type name of a method's receiver.
func receiverType(e ast.Expr) string {
	switch t := e.(type) {
	case *ast.StarExpr:
		return receiverType(t.X)
	case *ast.Ident:
		return t.Name
	case *ast.IndexExpr:
		return receiverType(t.X)
	case *ast.IndexListExpr:
		return receiverType(t.X)
	}
	return ""
}

// checkIdentifier checks pkg.Name (and pkg.Name.Member) against the
// package pkg of fastover's, if there is one of that name.
func (c *Checker) checkIdentifier(pkg, name, member string) []string {
	dir, ok := c.packageDirs()[pkg]
	if !ok {
		return nil
	}
	decls := c.declarations(dir)
	if len(decls) == 0 {
		return nil // not a Go package
	}
	if !decls[name] {
		return []string{fmt.Sprintf("package %s (%s) declares no %s", pkg, dir, name)}
	}
	if member != "" && !decls[name+"."+member] {
		return []string{fmt.Sprintf("%s.%s has no method or field %s", pkg, name, member)}
	}
	return nil
}
