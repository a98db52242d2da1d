// Package upstreamcopy checks edgeplane's copies of upstream functions
// against the module's source: each copy must be its original, printed
// without comments, with a listed set of replacements applied, each exactly
// once. A new upstream release that changes an original fails the check:
// carry the change over to the copy, or drop the copy if upstream now lets
// us do what it was made for.
package upstreamcopy

import (
	"bytes"
	"go/ast"
	"go/parser"
	"go/printer"
	"go/token"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// Copy is one copied function and every way it may differ from upstream's.
type Copy struct {
	// UpstreamFile is the original's file in the module, UpstreamFunc its name.
	UpstreamFile, UpstreamFunc string
	// CopyFunc is the copy's name.
	CopyFunc string
	// Replacements turn the original's body into the copy's.
	Replacements [][2]string
}

// Check compares every copy in copyFile (a file of the calling package) with
// its original in module (e.g. "k8s.io/kubernetes"), one subtest each.
func Check(t *testing.T, module, copyFile string, copies []Copy) {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", module).Output()
	if err != nil {
		t.Fatalf("go list -m %s: %v", module, err)
	}
	upstreamDir := strings.TrimSpace(string(out))
	ours := funcBodies(t, copyFile)
	for _, c := range copies {
		t.Run(c.UpstreamFunc, func(t *testing.T) {
			original, ok := funcBodies(t, filepath.Join(upstreamDir, c.UpstreamFile))[c.UpstreamFunc]
			if !ok {
				t.Fatalf("upstream %s has no func %s any more", c.UpstreamFile, c.UpstreamFunc)
			}
			want := original
			for _, r := range c.Replacements {
				if n := strings.Count(want, r[0]); n != 1 {
					t.Fatalf("upstream %s changed: %q appears %d times (want once); body now:\n%s", c.UpstreamFunc, r[0], n, original)
				}
				want = strings.Replace(want, r[0], r[1], 1)
			}
			got, ok := ours[c.CopyFunc]
			if !ok {
				t.Fatalf("%s has no func %s", copyFile, c.CopyFunc)
			}
			if got != want {
				t.Fatalf("%s is no longer upstream's %s with the listed changes; first difference:\n%s", c.CopyFunc, c.UpstreamFunc, firstDifference(want, got))
			}
		})
	}
}

// funcBodies prints the body of every top-level func in path, without
// comments, in gofmt's layout.
func funcBodies(t *testing.T, path string) map[string]string {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, nil, 0) // no comments
	if err != nil {
		t.Fatal(err)
	}
	bodies := map[string]string{}
	for _, d := range f.Decls {
		fn, ok := d.(*ast.FuncDecl)
		if !ok || fn.Recv != nil || fn.Body == nil {
			continue
		}
		var buf bytes.Buffer
		if err := printer.Fprint(&buf, fset, fn.Body); err != nil {
			t.Fatal(err)
		}
		bodies[fn.Name.Name] = buf.String()
	}
	return bodies
}

// firstDifference shows the first differing line of want and got.
func firstDifference(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := 0; i < len(w) || i < len(g); i++ {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl {
			return "line " + strconv.Itoa(i+1) + ":\n  upstream with the listed changes: " + wl + "\n  copy:                             " + gl
		}
	}
	return "(none)"
}
