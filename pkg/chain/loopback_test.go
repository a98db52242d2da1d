package chain

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"go/ast"
	"go/parser"
	"go/printer"
	"go/token"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// upstreamLoopbackApplyTo is the SHA-256 of upstream's
// (*SecureServingOptionsWithLoopback).applyTo body (k8s.io/apiserver
// v0.37.2, printed without comments), which applyLoopbackServing follows
// with an ECDSA certificate in place of upstream's RSA ones.
const upstreamLoopbackApplyTo = "3b33c5d9f37e6845bbf6364fc4d7baebc214a2e768e5551aaf22a0eaf98be3dd"

// TestLoopbackServingFollowsUpstream fails when upstream's applyTo changes:
// carry the change into applyLoopbackServing (loopback.go), then update the
// hash above.
func TestLoopbackServingFollowsUpstream(t *testing.T) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "k8s.io/apiserver").Output()
	if err != nil {
		t.Fatalf("go list -m k8s.io/apiserver: %v", err)
	}
	path := filepath.Join(strings.TrimSpace(string(out)), "pkg/server/options/serving_with_loopback.go")
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range f.Decls {
		fn, ok := d.(*ast.FuncDecl)
		if !ok || fn.Recv == nil || fn.Name.Name != "applyTo" || fn.Body == nil {
			continue
		}
		var buf bytes.Buffer
		if err := printer.Fprint(&buf, fset, fn.Body); err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(buf.Bytes())
		if got := hex.EncodeToString(sum[:]); got != upstreamLoopbackApplyTo {
			t.Fatalf("upstream's SecureServingOptionsWithLoopback.applyTo changed (hash %s): carry the change into applyLoopbackServing, then update upstreamLoopbackApplyTo; body now:\n%s", got, buf.String())
		}
		return
	}
	t.Fatalf("%s has no applyTo method any more: re-check applyLoopbackServing against upstream", path)
}
