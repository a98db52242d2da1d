package e2e

import (
	"context"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestCheck runs `edgeplane check`: one finding per line, a busy port is a
// blocker (from a flag or the config file), and a clean host exits 0.
func TestCheck(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binary")
	}
	parallel(t)
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	port := strconv.Itoa(busy.Addr().(*net.TCPAddr).Port)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.yaml")
	writeConfig(t, cfg, "bind-address: 127.0.0.1\nhttps-port: "+port+"\n")

	tests := []struct {
		name     string
		args     []string
		wantCode bool // non-zero
		want     []string
	}{
		{name: "free port", args: []string{"--bind-address", "127.0.0.1", "--https-port", "0"}, want: []string{"ok      clock:", "ok      port:", "data-dir:", "disk:", "memory:", "cgroup:", "kernel:", "limits:", "ip_forward:", "packet-filter:", "vxlan:", "mtu:"}},
		{name: "busy port flag", args: []string{"--bind-address", "127.0.0.1", "--https-port", port}, wantCode: true, want: []string{"BLOCKER port: 127.0.0.1:" + port + " is in use"}},
		{name: "busy port from config", args: []string{"--config", cfg}, wantCode: true, want: []string{"BLOCKER port: 127.0.0.1:" + port}},
		{name: "flag beats config", args: []string{"--config", cfg, "--https-port", "0"}, want: []string{"ok      port:"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			args := append([]string{"check", "--data-dir", filepath.Join(dir, "data")}, tc.args...)
			out, err := exec.CommandContext(ctx, binary, args...).CombinedOutput()
			if failed := err != nil; failed != tc.wantCode {
				t.Fatalf("err = %v, want failure %v:\n%s", err, tc.wantCode, out)
			}
			for _, want := range tc.want {
				if !strings.Contains(string(out), want) {
					t.Errorf("output lacks %q:\n%s", want, out)
				}
			}
			for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
				if !strings.HasPrefix(line, "ok ") && !strings.HasPrefix(line, "warn ") && !strings.HasPrefix(line, "BLOCKER ") &&
					!strings.Contains(line, " checks, ") && !strings.HasPrefix(line, "edgeplane: ") {
					t.Errorf("line is not a finding: %q", line)
				}
			}
		})
	}
}
