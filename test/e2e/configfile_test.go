package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestConfigFile runs the server from a config file and drop-ins: a typo'd
// key or a wrong type is refused with file:line, values apply, and the
// command line wins.
func TestConfigFile(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the server")
	}
	parallel(t)
	t.Run("refused", func(t *testing.T) {
		tests := []struct {
			name    string
			main    string
			dropIn  string
			args    []string
			wantMsg string
		}{
			{name: "typo", main: "datastore: sqlite\ntls-sans:\n  - edge.example\n", wantMsg: "config.yaml:2: unknown key \"tls-sans\" (did you mean \"tls-san\"?)"},
			{name: "wrong type", main: "allocate-node-cidrs: maybe\n", wantMsg: "config.yaml:1: key \"allocate-node-cidrs\": want true or false, got \"maybe\""},
			{name: "typo in a drop-in", main: "datastore: sqlite\n", dropIn: "# extra SANs\ntls-sna: [a]\n", wantMsg: "10-extra.yaml:2: unknown key \"tls-sna\""},
			{name: "values still validated", main: "datastore: postgres\n", wantMsg: "--datastore \"postgres\" is not one of"},
			{name: "explicit file must exist", args: []string{"--config", "/nonexistent/edgeplane.yaml"}, wantMsg: "no such file"},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				dir := t.TempDir()
				path := filepath.Join(dir, "config.yaml")
				writeConfig(t, path, tc.main)
				if tc.dropIn != "" {
					writeConfig(t, filepath.Join(path+".d", "10-extra.yaml"), tc.dropIn)
				}
				args := tc.args
				if args == nil {
					args = []string{"--config", path}
				}
				out, code := runToExit(t, filepath.Join(dir, "data"), args...)
				wantExit(t, code, out)
				wantLine(t, out, tc.wantMsg)
				if _, err := os.Stat(filepath.Join(dir, "data")); !os.IsNotExist(err) {
					t.Errorf("a refused config touched the data dir: %v", err)
				}
			})
		}
	})

	t.Run("applied", func(t *testing.T) {
		dir := t.TempDir()
		path := filepath.Join(dir, "config.yaml")
		copied := filepath.Join(dir, "from-config.kubeconfig")
		// The harness passes --https-port 0 and --bind-address 127.0.0.1:
		// the port and address here must lose to them.
		writeConfig(t, path, "https-port: 1\nbind-address: 192.0.2.1\nwrite-kubeconfig: "+filepath.Join(dir, "overridden")+"\n")
		writeConfig(t, filepath.Join(path+".d", "50-kubeconfig.yaml"), "write-kubeconfig: "+copied+"\nwrite-kubeconfig-mode: 0640\n")
		s := startServer(t, filepath.Join(dir, "data"), "--config", path)
		if s.kubeconfig != copied {
			t.Fatalf("kubeconfig at %s, want the drop-in's %s", s.kubeconfig, copied)
		}
		info, err := os.Stat(copied)
		if err != nil || info.Mode().Perm() != 0o640 {
			t.Fatalf("stat %s: %v, mode %v; want 0640", copied, err, info)
		}
		if !strings.Contains(s.output.String(), "Read config") {
			t.Errorf("the log does not say which config files were read")
		}
	})
}

func writeConfig(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, path, content)
}
