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

// TestVersionFlags: --version prints what `edgeplane version` prints and
// exits 0, on the root and on every kind of command, and the command does
// nothing else: `edgeplane server --version` starts no server and writes
// nothing in its data dir. A link named kubectl is upstream's kubectl,
// which has no --version.
func TestVersionFlags(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the real binary")
	}
	parallel(t)
	want := cli(t, 0, "version")
	if !strings.HasPrefix(want, "edgeplane ") || !strings.Contains(want, "\nkubernetes v") {
		t.Fatalf("edgeplane version printed %q", want)
	}
	dataDir := filepath.Join(t.TempDir(), "data")
	for _, args := range [][]string{
		{"--version"},
		// Flags that would start a server here, not on /var/lib/edgeplane,
		// were --version ignored.
		{"server", "--version", "--data-dir", dataDir, "--bind-address", "127.0.0.1", "--https-port", "0", "--disable=kubelet"},
		{"agent", "--version"},
		{"certs", "rotate", "--version", "--data-dir", dataDir},
		{"kubectl", "--version"},
		{"help", "--version"},
	} {
		t.Run(args[0], func(t *testing.T) {
			// A server started by mistake is stopped: the test then
			// fails on the exit code and the output.
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			out, err := exec.CommandContext(ctx, binary, args...).CombinedOutput()
			if err != nil || string(out) != want {
				t.Fatalf("edgeplane %s: %v, printed:\n%s\nwant the version:\n%s", strings.Join(args, " "), err, tail(string(out)), want)
			}
			if _, err := os.Stat(dataDir); !os.IsNotExist(err) {
				t.Fatalf("edgeplane %s made its data dir %s (%v)", strings.Join(args, " "), dataDir, err)
			}
		})
	}

	t.Run("kubectl link", func(t *testing.T) {
		link := filepath.Join(t.TempDir(), "kubectl")
		if err := os.Symlink(binary, link); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(link, "--version").CombinedOutput()
		if err == nil || !strings.Contains(string(out), "unknown flag: --version") {
			t.Fatalf("kubectl --version through the link: %v, printed:\n%s\nwant kubectl's own refusal", err, tail(string(out)))
		}
	})
}
