package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestBuiltinKubectl drives a running server with `edgeplane kubectl` and a
// kubectl link to the binary, with KUBECONFIG unset: the admin kubeconfig of
// the data dir is the default, and KUBECONFIG or --kubeconfig still win.
func TestBuiltinKubectl(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the server")
	}
	parallel(t)
	dir := t.TempDir()
	dataDir := filepath.Join(dir, "data")
	s := startServer(t, dataDir)
	link := filepath.Join(dir, "bin", "kubectl")
	if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(binary, link); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name    string
		argv    []string
		env     []string
		want    string
		wantErr bool
	}{
		{name: "get ns from the data dir", argv: []string{binary, "kubectl", "get", "ns"}, env: []string{"EDGEPLANE_DATA_DIR=" + dataDir}, want: "kube-system"},
		{name: "kubectl flags pass through", argv: []string{binary, "kubectl", "get", "ns", "default", "-o", "jsonpath={.metadata.name}"}, env: []string{"EDGEPLANE_DATA_DIR=" + dataDir}, want: "default"},
		{name: "raw readyz", argv: []string{binary, "kubectl", "get", "--raw", "/readyz"}, env: []string{"EDGEPLANE_DATA_DIR=" + dataDir}, want: "ok"},
		{name: "link named kubectl", argv: []string{link, "get", "ns", "kube-system", "-o", "name"}, env: []string{"EDGEPLANE_DATA_DIR=" + dataDir}, want: "namespace/kube-system"},
		{name: "--kubeconfig wins", argv: []string{binary, "kubectl", "--kubeconfig", s.kubeconfig, "get", "ns", "default", "-o", "name"}, env: []string{"EDGEPLANE_DATA_DIR=" + filepath.Join(dir, "none")}, want: "namespace/default"},
		{name: "KUBECONFIG wins", argv: []string{binary, "kubectl", "get", "ns", "--request-timeout=5s"}, env: []string{"EDGEPLANE_DATA_DIR=" + dataDir, "KUBECONFIG=" + filepath.Join(dir, "none.kubeconfig")}, wantErr: true},
		{name: "client version needs no server", argv: []string{binary, "kubectl", "version", "--client"}, want: "Client Version: v1.37"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, tc.argv[0], tc.argv[1:]...)
			cmd.Env = append(envWithout("KUBECONFIG", "EDGEPLANE_DATA_DIR"), tc.env...)
			out, err := cmd.CombinedOutput()
			if tc.wantErr {
				if err == nil {
					t.Fatalf("succeeded, want a failure:\n%s", out)
				}
				return
			}
			if err != nil || !strings.Contains(string(out), tc.want) {
				t.Fatalf("err %v, output does not contain %q:\n%s", err, tc.want, out)
			}
		})
	}
}

// envWithout is the test's environment less the named variables.
func envWithout(names ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		keep := true
		for _, n := range names {
			if name == n {
				keep = false
			}
		}
		if keep {
			env = append(env, kv)
		}
	}
	return env
}
