package chain

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

// upstreamCopies are the functions upstreamcopy.go copies, and every way a
// copy may differ from its original: each replacement must apply exactly
// once to upstream's body (printed without comments), and the result must be
// the copy's body. A new upstream release that changes one of these functions
// fails this test: carry the change over to the copy, or drop the copy if
// upstream now lets us set what it was made for.
var upstreamCopies = []struct {
	upstreamFile, upstreamFunc string
	copyFunc                   string
	replacements               [][2]string
}{
	{
		upstreamFile: "cmd/kube-apiserver/app/config.go", upstreamFunc: "NewConfig",
		copyFunc: "upstreamNewConfig",
		replacements: [][2]string{
			{"c := &Config{", "c := &app.Config{"},
			{"controlplaneapiserver.BuildGenericConfig(", "upstreamBuildGenericConfig("},
			{"\topts.InformerName,\n", "\topts.InformerName,\n\t\tresync,\n"},
			{"\tkubeAPIs, serviceResolver, pluginInitializer, err := CreateKubeAPIServerConfig(", "\tadjust(genericConfig)\n\n\tkubeAPIs, serviceResolver, pluginInitializer, err := app.CreateKubeAPIServerConfig("},
		},
	},
	{
		upstreamFile: "pkg/controlplane/apiserver/config.go", upstreamFunc: "BuildGenericConfig",
		copyFunc: "upstreamBuildGenericConfig",
		replacements: [][2]string{
			{"\t\t10*time.Minute,\n", "\t\tresync,\n"},
			{"= BuildAuthorizer(", "= controlplaneapiserver.BuildAuthorizer("},
			{"s.SecureServing.ApplyToConfig(genericConfig)", "applyLoopbackServing(s.SecureServing, genericConfig)"},
		},
	},
}

func TestUpstreamCopies(t *testing.T) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "k8s.io/kubernetes").Output()
	if err != nil {
		t.Fatalf("go list -m k8s.io/kubernetes: %v", err)
	}
	upstreamDir := strings.TrimSpace(string(out))
	ours := funcBodies(t, "upstreamcopy.go")
	for _, c := range upstreamCopies {
		t.Run(c.upstreamFunc, func(t *testing.T) {
			original, ok := funcBodies(t, filepath.Join(upstreamDir, c.upstreamFile))[c.upstreamFunc]
			if !ok {
				t.Fatalf("upstream %s has no func %s any more", c.upstreamFile, c.upstreamFunc)
			}
			want := original
			for _, r := range c.replacements {
				if n := strings.Count(want, r[0]); n != 1 {
					t.Fatalf("upstream %s changed: %q appears %d times (want once); body now:\n%s", c.upstreamFunc, r[0], n, original)
				}
				want = strings.Replace(want, r[0], r[1], 1)
			}
			got, ok := ours[c.copyFunc]
			if !ok {
				t.Fatalf("upstreamcopy.go has no func %s", c.copyFunc)
			}
			if got != want {
				t.Fatalf("%s is no longer upstream's %s with the listed changes; first difference:\n%s", c.copyFunc, c.upstreamFunc, firstDifference(want, got))
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
