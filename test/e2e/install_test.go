package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/edgeplane/edgeplane/internal/testing/testenv"
)

const (
	installScript   = "../../scripts/install.sh"
	uninstallScript = "../../scripts/edgeplane-uninstall.sh"
)

// TestInstallScript runs scripts/install.sh rooted under a temp dir, for
// systemd and OpenRC: a dry run writes nothing, an install writes every file,
// a second install changes nothing, and the uninstall script removes it all
// (the data dir only when asked).
func TestInstallScript(t *testing.T) {
	if testing.Short() {
		t.Skip("uses the built binary")
	}
	parallel(t)
	tests := []struct {
		name        string
		init        string
		preKubectl  bool // a kubectl is already installed
		deleteData  bool
		wantFiles   []string
		wantMissing []string
	}{
		{
			name: "systemd", init: "systemd",
			wantFiles:   []string{"usr/local/bin/edgeplane", "usr/local/bin/edgeplane-uninstall.sh", "usr/local/bin/kubectl", "etc/edgeplane/edgeplane.env", "etc/edgeplane/config.yaml", "etc/systemd/system/edgeplane.service"},
			wantMissing: []string{"etc/init.d/edgeplane"},
		},
		{
			name: "openrc, existing kubectl, delete data", init: "openrc", preKubectl: true, deleteData: true,
			wantFiles:   []string{"usr/local/bin/edgeplane", "usr/local/bin/edgeplane-uninstall.sh", "etc/edgeplane/edgeplane.env", "etc/edgeplane/config.yaml", "etc/init.d/edgeplane"},
			wantMissing: []string{"usr/local/bin/kubectl", "etc/systemd/system/edgeplane.service"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			env := []string{"EDGEPLANE_ROOT=" + root, "EDGEPLANE_BINARY=" + binary, "EDGEPLANE_INIT=" + tc.init, "PATH=/usr/local/bin:/usr/bin:/bin"}
			if tc.preKubectl {
				writeConfig(t, filepath.Join(root, "usr/bin/kubectl"), "#!/bin/sh\n")
			}
			before := treeSnapshot(t, root)

			out := runScript(t, env, installScript, "--dry-run")
			if got := treeSnapshot(t, root); !sameTree(before, got) {
				t.Fatalf("--dry-run wrote files:\n%s\noutput:\n%s", diffTrees(before, got), out)
			}
			for _, f := range tc.wantFiles {
				if !strings.Contains(out, "would ") || !strings.Contains(out, "/"+f) {
					t.Errorf("--dry-run does not say it would write /%s:\n%s", f, out)
				}
			}

			runScript(t, env, installScript)
			first := treeSnapshot(t, root)
			for _, f := range tc.wantFiles {
				if _, ok := first[f]; !ok {
					t.Errorf("install did not write /%s", f)
				}
			}
			for _, f := range tc.wantMissing {
				if _, ok := first[f]; ok {
					t.Errorf("install wrote /%s", f)
				}
			}
			checkInstalled(t, root, tc.init, !tc.preKubectl)

			out = runScript(t, env, installScript)
			if second := treeSnapshot(t, root); !sameTree(first, second) {
				t.Fatalf("second install changed files:\n%s", diffTrees(first, second))
			}
			if strings.Contains(out, "wrote ") || strings.Contains(out, "linked ") {
				t.Errorf("second install says it wrote something:\n%s", out)
			}

			// A data dir the server would have made.
			writeConfig(t, filepath.Join(root, "var/lib/edgeplane/db/state.db"), "data")
			uninstallArgs := []string{}
			if tc.deleteData {
				uninstallArgs = append(uninstallArgs, "--delete-data")
			}
			out = runScript(t, env, filepath.Join(root, "usr/local/bin/edgeplane-uninstall.sh"), append([]string{"--dry-run"}, uninstallArgs...)...)
			if !strings.Contains(out, "would remove /usr/local/bin/edgeplane") {
				t.Errorf("uninstall --dry-run does not list the binary:\n%s", out)
			}
			runScript(t, env, filepath.Join(root, "usr/local/bin/edgeplane-uninstall.sh"), uninstallArgs...)
			left := treeSnapshot(t, root)
			for path, what := range left {
				if strings.HasPrefix(what, "dir") {
					continue
				}
				switch {
				case path == "usr/bin/kubectl" && tc.preKubectl:
				case path == "var/lib/edgeplane/db/state.db" && !tc.deleteData:
				default:
					t.Errorf("uninstall left /%s", path)
				}
			}
			if _, ok := left["var/lib/edgeplane/db/state.db"]; ok == tc.deleteData {
				t.Errorf("data dir present = %v after uninstall (--delete-data %v)", ok, tc.deleteData)
			}
		})
	}
}

// checkInstalled looks at what the files say.
func checkInstalled(t *testing.T, root, init string, link bool) {
	t.Helper()
	if init == "systemd" {
		unit := readFile(t, filepath.Join(root, "etc/systemd/system/edgeplane.service"))
		for _, want := range []string{"Type=notify", "Restart=on-failure", "LimitNOFILE=", "KillMode=process", "EnvironmentFile=-/etc/edgeplane/edgeplane.env", "ExecStart=/usr/local/bin/edgeplane server"} {
			if !strings.Contains(unit, want) {
				t.Errorf("unit lacks %q:\n%s", want, unit)
			}
		}
	}
	if link {
		if target, err := os.Readlink(filepath.Join(root, "usr/local/bin/kubectl")); err != nil || target != "edgeplane" {
			t.Errorf("kubectl link -> %q (%v), want edgeplane", target, err)
		}
	}
	// The installed binary runs, and the default config file is valid.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// The data dir is a short one of the run, not the root's: the test's
	// root path is long enough to put the node's containerd socket past
	// the 107 bytes of a unix socket path, which check rightly calls a
	// blocker.
	dataDir, err := os.MkdirTemp(runDir, "d")
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.CommandContext(ctx, filepath.Join(root, "usr/local/bin/edgeplane"), "check",
		"--config", filepath.Join(root, "etc/edgeplane/config.yaml"), "--data-dir", dataDir,
		"--bind-address", "127.0.0.1", "--https-port", "0").CombinedOutput()
	if err != nil {
		t.Errorf("installed edgeplane check with the default config: %v\n%s", err, out)
	}
}

func runScript(t *testing.T, env []string, script string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", append([]string{script}, args...)...)
	cmd.Env = append(envWithout("EDGEPLANE_ROOT", "EDGEPLANE_BINARY", "EDGEPLANE_INIT", "EDGEPLANE_DATA_DIR", "PATH"), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("sh %s %s: %v\n%s", script, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// treeSnapshot records every path under root with its type, mode, size,
// modification time and content hash or link target, so that any rewrite
// shows, even of identical content.
func treeSnapshot(t *testing.T, root string) map[string]string {
	t.Helper()
	tree := map[string]string{}
	err := filepath.Walk(root, func(path string, info os.FileInfo, err error) error {
		if err != nil || path == root {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		switch {
		case info.IsDir():
			tree[rel] = fmt.Sprintf("dir %v", info.Mode())
		case info.Mode()&os.ModeSymlink != 0:
			target, _ := os.Readlink(path)
			tree[rel] = fmt.Sprintf("link -> %s %d", target, info.ModTime().UnixNano())
		default:
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			tree[rel] = fmt.Sprintf("file %v %d %d %x", info.Mode(), info.Size(), info.ModTime().UnixNano(), fnv(data))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return tree
}

func fnv(data []byte) uint64 {
	h := uint64(14695981039346656037)
	for _, b := range data {
		h ^= uint64(b)
		h *= 1099511628211
	}
	return h
}

func sameTree(a, b map[string]string) bool { return diffTrees(a, b) == "" }

func diffTrees(a, b map[string]string) string {
	var lines []string
	for p, v := range a {
		if w, ok := b[p]; !ok {
			lines = append(lines, "- "+p+" "+v)
		} else if w != v {
			lines = append(lines, "~ "+p+" "+v+" => "+w)
		}
	}
	for p, v := range b {
		if _, ok := a[p]; !ok {
			lines = append(lines, "+ "+p+" "+v)
		}
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// TestInstallScriptsShellcheck keeps the scripts shellcheck-clean.
func TestInstallScriptsShellcheck(t *testing.T) {
	parallel(t)
	path := testenv.Tool(t, "apt-get install -y shellcheck", "shellcheck")
	out, err := exec.Command(path, "--shell=sh", installScript, uninstallScript, "../../hack/dist.sh", "../../hack/dist-runtime.sh").CombinedOutput()
	if err != nil {
		t.Fatalf("shellcheck: %v\n%s", err, out)
	}
}

// TestInstallScriptRefuses covers the inputs install.sh must refuse, each
// with a message and nothing written.
func TestInstallScriptRefuses(t *testing.T) {
	if testing.Short() {
		t.Skip("uses the built binary")
	}
	parallel(t)
	dir := t.TempDir()
	notRunnable := filepath.Join(dir, "edgeplane-other-arch")
	writeConfig(t, notRunnable, "\x7fELF not really")
	tests := []struct {
		name   string
		binary string
		args   []string
		want   string
	}{
		{name: "missing binary", binary: filepath.Join(dir, "nope"), want: "is not a file"},
		{name: "binary that does not run here", binary: notRunnable, want: "does not run on this host"},
		{name: "unknown argument", binary: binary, args: []string{"--frobnicate"}, want: "unknown argument --frobnicate"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			cmd := exec.Command("sh", append([]string{installScript}, tc.args...)...)
			cmd.Env = append(envWithout("EDGEPLANE_ROOT", "EDGEPLANE_BINARY"), "EDGEPLANE_ROOT="+root, "EDGEPLANE_BINARY="+tc.binary)
			out, err := cmd.CombinedOutput()
			if err == nil || !strings.Contains(string(out), tc.want) {
				t.Fatalf("err %v, output lacks %q:\n%s", err, tc.want, out)
			}
			if entries, _ := os.ReadDir(root); len(entries) != 0 {
				t.Fatalf("a refused install wrote %v", entries)
			}
		})
	}
}
