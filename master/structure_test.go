package master

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// TestStructure keeps the master readable (issue 12's targets): no function
// or method of the master package over 60 lines (tests aside), and no
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
	check("*.go", false, "lines", 60, func(fset *token.FileSet, fn *ast.FuncDecl) int {
		return fset.Position(fn.End()).Line - fset.Position(fn.Pos()).Line + 1
	})
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
