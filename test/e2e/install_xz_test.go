package e2e

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/edgeplane/edgeplane/internal/testing/testenv"
)

// TestInstallScriptXZ installs from a release folder as hack/dist.sh lays
// it out, with only the xz-compressed binary: install.sh checks it against
// SHA256SUMS, unpacks it and installs the binary bit for bit; a compressed
// binary that does not match its checksum is refused and nothing written.
func TestInstallScriptXZ(t *testing.T) {
	if testing.Short() {
		t.Skip("uses the built binary")
	}
	parallel(t)
	_, err := exec.LookPath("xz")
	testenv.Require(t, "xz (apt-get install xz-utils)", err)
	release := t.TempDir()
	for _, s := range []string{installScript, uninstallScript} {
		data, err := os.ReadFile(s)
		if err != nil {
			t.Fatal(err)
		}
		writeFileMode(t, filepath.Join(release, filepath.Base(s)), data, 0o755)
	}
	name := "edgeplane-linux-" + runtime.GOARCH + ".xz"
	packed, err := exec.Command("xz", "-1", "-T0", "-c", binary).Output()
	if err != nil {
		t.Fatalf("xz %s: %v", binary, err)
	}
	writeFileMode(t, filepath.Join(release, name), packed, 0o644)
	sum := sha256.Sum256(packed)

	for _, tc := range []struct {
		name    string
		sum     string
		wantErr string
	}{
		{name: "matching checksum", sum: hex.EncodeToString(sum[:])},
		{name: "mismatched checksum", sum: strings.Repeat("0", 64), wantErr: "does not match"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			writeFileMode(t, filepath.Join(release, "SHA256SUMS"), []byte(fmt.Sprintf("%s  %s\n", tc.sum, name)), 0o644)
			root := t.TempDir()
			cmd := exec.Command("sh", filepath.Join(release, "install.sh"))
			cmd.Env = append(envWithout("EDGEPLANE_ROOT", "EDGEPLANE_BINARY", "EDGEPLANE_INIT", "EDGEPLANE_DATA_DIR", "PATH"),
				"EDGEPLANE_ROOT="+root, "EDGEPLANE_INIT=systemd", "PATH=/usr/local/bin:/usr/bin:/bin")
			out, err := cmd.CombinedOutput()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(string(out), tc.wantErr) {
					t.Fatalf("err %v, output lacks %q:\n%s", err, tc.wantErr, out)
				}
				if entries, _ := os.ReadDir(root); len(entries) != 0 {
					t.Fatalf("a refused install wrote %v", entries)
				}
				return
			}
			if err != nil {
				t.Fatalf("install from %s: %v\n%s", name, err, out)
			}
			want, err := os.ReadFile(binary)
			if err != nil {
				t.Fatal(err)
			}
			got, err := os.ReadFile(filepath.Join(root, "usr/local/bin/edgeplane"))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("the installed binary (%d bytes) is not the one compressed (%d bytes)", len(got), len(want))
			}
		})
	}
}

func writeFileMode(t *testing.T, path string, data []byte, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, data, mode); err != nil {
		t.Fatal(err)
	}
}
