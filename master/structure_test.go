package master

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestStructure keeps the master readable (issue 12's targets): no function
// or method of the master package or its scheduler over 60 lines (tests
// aside), and no
// function of the scheduler over cyclomatic complexity 15, tests included
// (counted as gocyclo does: 1 + if, for, range, non-default case and
// select case, && and ||, closures counted in their function).
func TestStructure(t *testing.T) {
	check := func(glob string, tests bool, what string, limit int, measure func(*token.FileSet, *ast.FuncDecl) int) {
		files, _ := filepath.Glob(glob)
		if len(files) == 0 {
			t.Fatalf("no files match %s: the check would pass vacuously", glob)
		}
		fset := token.NewFileSet()
		for _, f := range files {
			if !tests && strings.HasSuffix(f, "_test.go") {
				continue
			}
			af, err := parser.ParseFile(fset, f, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range af.Decls {
				if fn, ok := d.(*ast.FuncDecl); ok && fn.Body != nil {
					if n := measure(fset, fn); n > limit {
						t.Errorf("%s: %s has %s %d (limit %d)", fset.Position(fn.Pos()), fn.Name.Name, what, n, limit)
					}
				}
			}
		}
	}
	lines := func(fset *token.FileSet, fn *ast.FuncDecl) int {
		return fset.Position(fn.End()).Line - fset.Position(fn.Pos()).Line + 1
	}
	check("*.go", false, "lines", 60, lines)
	check("scheduler/*.go", false, "lines", 60, lines)
	check("scheduler/*.go", true, "complexity", 15, func(_ *token.FileSet, fn *ast.FuncDecl) int {
		n := 1
		ast.Inspect(fn.Body, func(x ast.Node) bool {
			switch x := x.(type) {
			case *ast.IfStmt, *ast.ForStmt, *ast.RangeStmt:
				n++
			case *ast.CaseClause:
				if x.List != nil {
					n++
				}
			case *ast.CommClause:
				if x.Comm != nil {
					n++
				}
			case *ast.BinaryExpr:
				if x.Op == token.LAND || x.Op == token.LOR {
					n++
				}
			}
			return true
		})
		return n
	})
}

// TestLayout keeps internal/ the ground floor (issue 12): its packages,
// tests included, import only other internal packages and the generated
// protobuf code, never a role (master, partitionserver, frontend, the
// cluster composition root, ...). It lives here because internal/ has no
// package of its own to hold it.
func TestLayout(t *testing.T) {
	files := 0
	err := filepath.WalkDir("../internal", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") {
			return err
		}
		files++
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		for _, im := range f.Imports {
			p, _ := strconv.Unquote(im.Path.Value)
			if groundFloorViolation(p) {
				t.Errorf("%s imports %s: internal/ must import no role", path, p)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 10 {
		t.Fatalf("found %d Go files under ../internal: the check would pass vacuously", files)
	}
}

// groundFloorViolation reports whether an internal package may not import
// path: a package of this module outside internal/ and proto/.
func groundFloorViolation(path string) bool {
	if !strings.HasPrefix(path, "tablestore/") {
		return false
	}
	return !strings.HasPrefix(path, "tablestore/internal/") && !strings.HasPrefix(path, "tablestore/proto/")
}

func TestGroundFloorViolation(t *testing.T) {
	for _, c := range []struct {
		path string
		want bool
	}{
		{"tablestore/internal/keys", false},
		{"tablestore/proto/tablestorepb", false},
		{"tablestore/master", true},
		{"tablestore/partitionserver/admission", true},
		{"tablestore/cluster", true},
		{"github.com/hashicorp/raft", false},
		{"fmt", false},
	} {
		if got := groundFloorViolation(c.path); got != c.want {
			t.Errorf("groundFloorViolation(%q) = %v, want %v", c.path, got, c.want)
		}
	}
}
