package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/edgeplane/edgeplane/internal/testing/testenv"
)

// shippedRuntime is what a runtime-linux-<arch>.tar.gz holds and where
// install.sh puts it (paths under the root).
var shippedRuntime = map[string]string{
	"bin/containerd":              "usr/local/bin/containerd",
	"bin/containerd-shim-runc-v2": "usr/local/bin/containerd-shim-runc-v2",
	"bin/ctr":                     "usr/local/bin/ctr",
	"bin/runc":                    "usr/local/bin/runc",
	"bin/crictl":                  "usr/local/bin/crictl",
	"cni/bridge":                  "opt/cni/bin/bridge",
	"cni/host-local":              "opt/cni/bin/host-local",
	"cni/loopback":                "opt/cni/bin/loopback",
	"cni/portmap":                 "opt/cni/bin/portmap",
}

// TestInstallShippedRuntime makes a release folder as make dist does, with
// the runtime tarball of hack/dist-runtime.sh (packed from the host's
// Debian packages, DIST_RUNTIME_HOST=1, so that nothing is downloaded), and
// installs from it: on a root with no container runtime an agent and a
// server get containerd, its shim, ctr, runc and crictl beside the binary and
// the CNI plugins in /opt/cni/bin, bit for bit, and they run; no warning
// about a missing runtime; a second install changes nothing; uninstall
// removes them. A host with containerd gets none of it; a file install.sh
// did not write is kept; a tarball that does not match SHA256SUMS is
// refused.
func TestInstallShippedRuntime(t *testing.T) {
	if testing.Short() {
		t.Skip("uses the built binary")
	}
	for _, p := range []string{"containerd", "runc", "containernetworking-plugins"} {
		err := exec.Command("dpkg-query", "-W", p).Run()
		testenv.Require(t, p+" installed from Debian's package (apt-get install "+p+")", err)
	}
	release := t.TempDir()
	for _, s := range []string{installScript, uninstallScript} {
		data, err := os.ReadFile(s)
		if err != nil {
			t.Fatal(err)
		}
		writeFileMode(t, filepath.Join(release, filepath.Base(s)), data, 0o755)
	}
	binName := "edgeplane-linux-" + runtime.GOARCH
	binData, err := os.ReadFile(binary)
	if err != nil {
		t.Fatal(err)
	}
	writeFileMode(t, filepath.Join(release, binName), binData, 0o755)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	pack := exec.CommandContext(ctx, "../../hack/dist-runtime.sh", release, runtime.GOARCH)
	pack.Env = append(os.Environ(), "DIST_RUNTIME_HOST=1")
	if out, err := pack.CombinedOutput(); err != nil {
		t.Fatalf("hack/dist-runtime.sh: %v\n%s", err, out)
	}
	tarName := "runtime-linux-" + runtime.GOARCH + ".tar.gz"
	unpacked := t.TempDir()
	if out, err := exec.Command("tar", "-xzf", filepath.Join(release, tarName), "-C", unpacked).CombinedOutput(); err != nil {
		t.Fatalf("untar: %v\n%s", err, out)
	}
	unpacked = filepath.Join(unpacked, strings.TrimSuffix(tarName, ".tar.gz"))
	writeSums := func(tarSum string) {
		t.Helper()
		if tarSum == "" {
			tarSum = fileSHA256(t, filepath.Join(release, tarName))
		}
		sums := fmt.Sprintf("%s  %s\n%s  %s\n", fileSHA256(t, filepath.Join(release, binName)), binName, tarSum, tarName)
		writeFileMode(t, filepath.Join(release, "SHA256SUMS"), []byte(sums), 0o644)
	}
	writeSums("")
	install := filepath.Join(release, "install.sh")
	const server = "https://192.0.2.10:6443"

	tests := []struct {
		name  string
		agent bool
		host  []string // executables on the host before the install
		// want: the shipped files install.sh writes (keys of shippedRuntime); kept: host files it keeps.
		want     []string
		kept     []string
		wantSays []string
	}{
		{name: "agent, no runtime", agent: true, want: keys(shippedRuntime),
			wantSays: []string{"installing the container runtime of runtime-linux-", "containerd 1.", "container runtime and CNI plugins: the release's"}},
		{name: "server, no runtime", want: keys(shippedRuntime), wantSays: []string{"installing the container runtime of runtime-linux-"}},
		{name: "agent, host containerd", agent: true, host: []string{"usr/bin/containerd"},
			wantSays: []string{"container runtime of the host: /usr/bin/containerd; not installing runtime-linux-"}},
		{name: "agent, a runc of the host's own", agent: true, host: []string{"usr/local/bin/runc"},
			want: without(keys(shippedRuntime), "bin/runc"), kept: []string{"usr/local/bin/runc"},
			wantSays: []string{"kept /usr/local/bin/runc, which install.sh did not write"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			env := []string{"EDGEPLANE_ROOT=" + root, "EDGEPLANE_INIT=systemd", "PATH=/usr/local/bin:/usr/bin:/bin"}
			if tc.agent {
				env = append(env, "EDGEPLANE_SERVER="+server, "EDGEPLANE_TOKEN="+nodeToken(tc.name))
			}
			for _, f := range tc.host {
				if err := os.MkdirAll(filepath.Dir(filepath.Join(root, f)), 0o755); err != nil {
					t.Fatal(err)
				}
				writeFileMode(t, filepath.Join(root, f), []byte("#!/bin/sh\n"), 0o755)
			}
			out := runScript(t, env, install)
			for _, s := range tc.wantSays {
				if !strings.Contains(out, s) {
					t.Errorf("install does not say %q:\n%s", s, out)
				}
			}
			if len(tc.want) > 0 && (strings.Contains(out, "no container runtime") || strings.Contains(out, "CNI plugins missing")) {
				t.Errorf("install with the shipped runtime warns of a missing runtime or CNI plugins:\n%s", out)
			}
			for src, dest := range shippedRuntime {
				got, err := os.ReadFile(filepath.Join(root, dest))
				switch {
				case contains(tc.kept, dest):
					if string(got) != "#!/bin/sh\n" {
						t.Errorf("install replaced the host's /%s", dest)
					}
				case !contains(tc.want, src):
					if err == nil {
						t.Errorf("install wrote /%s", dest)
					}
				default:
					want, rerr := os.ReadFile(filepath.Join(unpacked, src))
					if rerr != nil {
						t.Fatal(rerr)
					}
					if err != nil || !bytes.Equal(got, want) {
						t.Errorf("/%s is not the release's %s (%v)", dest, src, err)
						continue
					}
					if fi, _ := os.Stat(filepath.Join(root, dest)); fi.Mode().Perm() != 0o755 {
						t.Errorf("/%s has mode %v, want 0755", dest, fi.Mode().Perm())
					}
				}
			}
			if len(tc.want) == 0 {
				return
			}
			// The shipped runtime is in place and runs on this host.
			for _, c := range [][]string{{"usr/local/bin/containerd", "--version"}, {"usr/local/bin/runc", "--version"}, {"usr/local/bin/crictl", "--version"}} {
				if contains(tc.kept, c[0]) {
					continue
				}
				if out, err := exec.Command(filepath.Join(root, c[0]), c[1:]...).CombinedOutput(); err != nil {
					t.Errorf("installed /%s %s: %v\n%s", c[0], c[1], err, out)
				}
			}
			versions, err := os.ReadFile(filepath.Join(root, "usr/local/lib/edgeplane/VERSIONS"))
			if err != nil || !strings.Contains(string(versions), "containerd ") || !strings.Contains(string(versions), "cri-tools ") {
				t.Errorf("/usr/local/lib/edgeplane/VERSIONS = %q, %v; want each part's version", versions, err)
			}

			first := treeSnapshot(t, root)
			out = runScript(t, env, install)
			if second := treeSnapshot(t, root); !sameTree(first, second) {
				t.Fatalf("second install changed files:\n%s\n%s", diffTrees(first, second), out)
			}

			runScript(t, env, filepath.Join(root, "usr/local/bin/edgeplane-uninstall.sh"))
			for path, what := range treeSnapshot(t, root) {
				if strings.HasPrefix(what, "dir") || contains(tc.host, path) {
					continue
				}
				t.Errorf("uninstall left /%s", path)
			}
		})
	}

	t.Run("tarball does not match SHA256SUMS", func(t *testing.T) {
		writeSums(strings.Repeat("0", 64))
		defer writeSums("")
		root := t.TempDir()
		cmd := exec.Command("sh", install)
		cmd.Env = append(envWithout("EDGEPLANE_ROOT", "EDGEPLANE_BINARY", "EDGEPLANE_INIT", "EDGEPLANE_DATA_DIR", "PATH"),
			"EDGEPLANE_ROOT="+root, "EDGEPLANE_INIT=systemd", "PATH=/usr/local/bin:/usr/bin:/bin",
			"EDGEPLANE_SERVER="+server, "EDGEPLANE_TOKEN="+nodeToken("mismatch"))
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), tarName+" does not match") {
			t.Fatalf("err %v, want a refusal naming %s:\n%s", err, tarName, out)
		}
		if _, err := os.Stat(filepath.Join(root, "usr/local/bin/containerd")); err == nil {
			t.Errorf("a refused runtime tarball was installed")
		}
	})
}

func fileSHA256(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

func keys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func without(list []string, drop string) []string {
	var out []string
	for _, s := range list {
		if s != drop {
			out = append(out, s)
		}
	}
	return out
}
