package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/edgeplane/edgeplane/internal/testing/testenv"
)

const (
	agentEnvFile    = "etc/edgeplane/edgeplane-agent.env"
	agentConfigFile = "etc/edgeplane/agent.yaml"
	agentUnit       = "etc/systemd/system/edgeplane-agent.service"
	agentOpenRC     = "etc/init.d/edgeplane-agent"
)

// nodeToken makes a well-formed node token, K10<sha256 hex>::<id>.<secret>.
func nodeToken(seed string) string {
	sum := sha256.Sum256([]byte(seed))
	return "K10" + hex.EncodeToString(sum[:]) + "::abcdef.0123456789abcdef"
}

// TestInstallAgent runs scripts/install.sh with EDGEPLANE_SERVER and
// EDGEPLANE_TOKEN, rooted under a temp dir, for systemd and OpenRC, on a host
// with and without a container runtime and CNI plugins: a dry run writes
// nothing, an install writes the agent's service, env file and agent.yaml
// (none of the server's), a second install changes nothing, nor does one
// without the variables (an upgrade), a new token rewrites only the env file, and the uninstall script removes it all but the
// data dir.
func TestInstallAgent(t *testing.T) {
	if testing.Short() {
		t.Skip("uses the built binary")
	}
	parallel(t, 25*time.Second)
	const server = "https://192.0.2.10:6443"
	tests := []struct {
		name string
		init string
		// host files present before the install (paths under the root); an
		// executable file for each.
		host        []string
		wantService string
		// wantWarn are parts of the runtime and CNI warnings; none when empty.
		wantWarn  []string
		wantAfter string // containerd's unit or service in the dependencies, or ""
	}{
		{
			name: "systemd, bare host", init: "systemd",
			wantService: agentUnit,
			wantWarn:    []string{"no container runtime", "apt-get install containerd containernetworking-plugins", "CNI plugins missing"},
		},
		{
			name: "systemd, containerd and CNI plugins in /opt/cni/bin", init: "systemd",
			host:        []string{"usr/bin/containerd", "lib/systemd/system/containerd.service", "opt/cni/bin/bridge", "opt/cni/bin/host-local", "opt/cni/bin/portmap", "opt/cni/bin/loopback"},
			wantService: agentUnit, wantAfter: "After=network-online.target containerd.service",
		},
		{
			name: "systemd, CNI plugins missing some", init: "systemd",
			host:        []string{"usr/bin/containerd", "usr/lib/cni/bridge", "usr/lib/cni/loopback"},
			wantService: agentUnit,
			wantWarn:    []string{"/usr/lib/cni lacks host-local, portmap", "apt-get install containernetworking-plugins"},
		},
		{
			name: "openrc, bare host", init: "openrc",
			wantService: agentOpenRC,
			wantWarn:    []string{"no container runtime", "CNI plugins missing"},
		},
		{
			name: "openrc, containerd and CNI plugins in /usr/lib/cni", init: "openrc",
			host:        []string{"usr/local/bin/containerd", "etc/init.d/containerd", "usr/lib/cni/bridge", "usr/lib/cni/host-local", "usr/lib/cni/portmap", "usr/lib/cni/loopback"},
			wantService: agentOpenRC, wantAfter: "after firewall containerd",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			token := nodeToken(tc.name)
			env := []string{"EDGEPLANE_ROOT=" + root, "EDGEPLANE_BINARY=" + binary, "EDGEPLANE_INIT=" + tc.init,
				"PATH=/usr/local/bin:/usr/bin:/bin", "EDGEPLANE_SERVER=" + server + "/", "EDGEPLANE_TOKEN=" + token}
			for _, f := range tc.host {
				writeConfig(t, filepath.Join(root, f), "#!/bin/sh\n")
				if err := os.Chmod(filepath.Join(root, f), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			wantFiles := []string{"usr/local/bin/edgeplane", "usr/local/bin/edgeplane-uninstall.sh", agentEnvFile, agentConfigFile, tc.wantService}
			before := treeSnapshot(t, root)

			out := runScript(t, env, installScript, "--dry-run")
			if got := treeSnapshot(t, root); !sameTree(before, got) {
				t.Fatalf("--dry-run wrote files:\n%s\noutput:\n%s", diffTrees(before, got), out)
			}
			for _, f := range wantFiles {
				if !strings.Contains(out, "would write /"+f) {
					t.Errorf("--dry-run does not say it would write /%s:\n%s", f, out)
				}
			}

			out = runScript(t, env, installScript)
			if strings.Contains(out, token) {
				t.Errorf("install printed the token:\n%s", out)
			}
			checkAgentWarnings(t, out, tc.wantWarn)
			first := treeSnapshot(t, root)
			for _, f := range wantFiles {
				if _, ok := first[f]; !ok {
					t.Errorf("install did not write /%s", f)
				}
			}
			for _, f := range []string{"etc/systemd/system/edgeplane.service", "etc/init.d/edgeplane", "etc/edgeplane/edgeplane.env", "etc/edgeplane/config.yaml", "usr/local/bin/kubectl"} {
				if _, ok := first[f]; ok {
					t.Errorf("an agent install wrote the server's /%s", f)
				}
			}
			checkAgentEnvFile(t, root, server, token)
			checkAgentService(t, root, tc.init, tc.wantAfter, server, token)

			out = runScript(t, env, installScript)
			if second := treeSnapshot(t, root); !sameTree(first, second) {
				t.Fatalf("second install changed files:\n%s", diffTrees(first, second))
			}
			if strings.Contains(out, "wrote ") || strings.Contains(out, "linked ") {
				t.Errorf("second install says it wrote something:\n%s", out)
			}

			// An upgrade without the variables keeps the agent's.
			out = runScript(t, env[:len(env)-2], installScript)
			if got := treeSnapshot(t, root); !sameTree(first, got) {
				t.Fatalf("an install without EDGEPLANE_SERVER and EDGEPLANE_TOKEN on an agent changed files:\n%s\noutput:\n%s", diffTrees(first, got), out)
			}
			if !strings.Contains(out, "keeping the server and token of /"+agentEnvFile) {
				t.Errorf("an install without the variables does not say it keeps the agent's:\n%s", out)
			}

			// A new token rewrites the env file and nothing else.
			newToken := nodeToken(tc.name + " again")
			env[len(env)-1] = "EDGEPLANE_TOKEN=" + newToken
			runScript(t, env, installScript)
			if diff := diffTrees(first, treeSnapshot(t, root)); !strings.HasPrefix(diff, "~ "+agentEnvFile+" ") || strings.Contains(diff, "\n") {
				t.Errorf("a new token changed, want only /%s:\n%s", agentEnvFile, diff)
			}
			checkAgentEnvFile(t, root, server, newToken)

			// What the node would have made in the data dir: kept.
			writeConfig(t, filepath.Join(root, "var/lib/edgeplane/agent/images/pause.tar"), "image")
			uninstall := filepath.Join(root, "usr/local/bin/edgeplane-uninstall.sh")
			out = runScript(t, env, uninstall, "--dry-run")
			for _, f := range []string{tc.wantService, "etc/edgeplane", "usr/local/bin/edgeplane"} {
				if !strings.Contains(out, "would remove /"+f+"\n") {
					t.Errorf("uninstall --dry-run does not list /%s:\n%s", f, out)
				}
			}
			runScript(t, env, uninstall)
			for path, what := range treeSnapshot(t, root) {
				if strings.HasPrefix(what, "dir") || path == "var/lib/edgeplane/agent/images/pause.tar" || contains(tc.host, path) {
					continue
				}
				t.Errorf("uninstall left /%s", path)
			}
			if _, err := os.Stat(filepath.Join(root, "var/lib/edgeplane/agent/images/pause.tar")); err != nil {
				t.Errorf("uninstall without --delete-data removed the node's images: %v", err)
			}
		})
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// checkAgentWarnings wants each of want in the install's output, or, with
// want empty, no warning at all.
func checkAgentWarnings(t *testing.T, out string, want []string) {
	t.Helper()
	if len(want) == 0 && strings.Contains(out, "warning:") {
		t.Errorf("install warns on a host with a container runtime and CNI plugins:\n%s", out)
	}
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Errorf("install output lacks the warning %q:\n%s", w, out)
		}
	}
}

// checkAgentEnvFile wants the env file secret (0600) with the server, its
// trailing slash dropped, and the token.
func checkAgentEnvFile(t *testing.T, root, server, token string) {
	t.Helper()
	for _, f := range []string{agentEnvFile, agentConfigFile} {
		if fi, err := os.Stat(filepath.Join(root, f)); err != nil {
			t.Error(err)
		} else if fi.Mode().Perm() != 0o600 {
			t.Errorf("/%s has mode %v, want 0600", f, fi.Mode().Perm())
		}
	}
	env := readFile(t, filepath.Join(root, agentEnvFile))
	for _, want := range []string{"\nEDGEPLANE_SERVER=" + server + "\n", "\nEDGEPLANE_TOKEN=" + token + "\n"} {
		if !strings.Contains(env, want) {
			t.Errorf("/%s lacks the line %q:\n%s", agentEnvFile, strings.TrimSpace(want), env)
		}
	}
	if cfg := readFile(t, filepath.Join(root, agentConfigFile)); !strings.Contains(cfg, "edgeplane agent --help") || strings.Contains(cfg, token) {
		t.Errorf("/%s does not describe the agent's settings, or holds the token:\n%s", agentConfigFile, cfg)
	}
}

// checkAgentService reads the unit or OpenRC script: it runs `edgeplane
// agent` with the server and token of the env file, and holds no token. The
// OpenRC script is run through sh as openrc-run would, to read the command
// line it would start.
func checkAgentService(t *testing.T, root, init, wantAfter, server, token string) {
	t.Helper()
	if init == "systemd" {
		unit := readFile(t, filepath.Join(root, agentUnit))
		for _, want := range []string{"Type=notify", "Restart=on-failure", "KillMode=process", "Delegate=yes", "TimeoutStartSec=15min",
			"\nEnvironmentFile=/etc/edgeplane/edgeplane-agent.env\n",
			"\nExecStart=/usr/local/bin/edgeplane agent --server ${EDGEPLANE_SERVER}\n"} {
			if !strings.Contains(unit, want) {
				t.Errorf("unit lacks %q:\n%s", want, unit)
			}
		}
		if got := strings.Contains(unit, "containerd.service"); got != (wantAfter != "") || !strings.Contains(unit, wantAfter) {
			t.Errorf("unit names containerd.service = %v, want %q:\n%s", got, wantAfter, unit)
		}
		if strings.Contains(unit, token) {
			t.Errorf("unit holds the token:\n%s", unit)
		}
		return
	}
	script := filepath.Join(root, agentOpenRC)
	text := readFile(t, script)
	if strings.Contains(text, token) {
		t.Errorf("OpenRC script holds the token:\n%s", text)
	}
	if got := strings.Contains(text, "containerd"); got != (wantAfter != "") || !strings.Contains(text, wantAfter) {
		t.Errorf("OpenRC script names containerd = %v, want %q:\n%s", got, wantAfter, text)
	}
	// openrc-run sources the script, runs start_pre (here the env file
	// under the root), then evals command_args.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", "-euc", `. "$1"; set -a; . "$2"; set +a; eval "set -- $command" $command_args; printf '%s\n' "$@"`,
		"sh", script, filepath.Join(root, agentEnvFile))
	cmd.Env = envWithout("EDGEPLANE_SERVER", "EDGEPLANE_TOKEN")
	out, err := cmd.CombinedOutput()
	want := strings.Join([]string{"/usr/local/bin/edgeplane", "agent", "--server", server}, "\n") + "\n"
	if err != nil || string(out) != want {
		t.Errorf("OpenRC would run (err %v):\n%s\nwant:\n%s", err, out, want)
	}
}

// TestInstallAgentRefuses covers the agent inputs install.sh must refuse:
// each says what is wrong, never prints the token, and writes nothing.
func TestInstallAgentRefuses(t *testing.T) {
	if testing.Short() {
		t.Skip("uses the built binary")
	}
	parallel(t)
	good := nodeToken("refuses")
	tests := []struct {
		name   string
		server string
		token  string
		want   []string
	}{
		{name: "server without token", server: "https://192.0.2.10:6443", want: []string{"EDGEPLANE_SERVER is set but EDGEPLANE_TOKEN is not"}},
		{name: "token without server", token: good, want: []string{"EDGEPLANE_TOKEN is set but EDGEPLANE_SERVER is not"}},
		{name: "http", server: "http://192.0.2.10:6443", token: good, want: []string{"HTTPS only"}},
		{name: "no scheme", server: "192.0.2.10:6443", token: good, want: []string{"is not a server URL: want https://HOST[:PORT]"}},
		{name: "path", server: "https://192.0.2.10:6443/api", token: good, want: []string{"is not a server URL"}},
		{name: "port out of range", server: "https://edge.example:65536", token: good, want: []string{"is not a server URL"}},
		{name: "two lines", server: "https://a:6443\nhttps://b:6443", token: good, want: []string{"EDGEPLANE_SERVER spans several lines"}},
		{name: "short hash", server: "https://192.0.2.10:6443", token: "K10abc::abcdef.0123456789abcdef", want: []string{"EDGEPLANE_TOKEN is not a node token: want K10<64 hex digits"}},
		{name: "upper-case secret", server: "https://192.0.2.10:6443", token: strings.ToUpper(good), want: []string{"EDGEPLANE_TOKEN is not a node token"}},
		{name: "server join token", server: "https://192.0.2.10:6443", token: good[:67] + "::server:0123456789abcdef0123", want: []string{"server join token"}},
		{name: "bare bootstrap token", server: "https://192.0.2.10:6443", token: "abcdef.0123456789abcdef", want: []string{"bare bootstrap token"}},
		{name: "bad URL and bad token: both said", server: "ftp://x", token: "nope", want: []string{"EDGEPLANE_SERVER=ftp://x is not a server URL", "EDGEPLANE_TOKEN is not a node token"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, "sh", installScript)
			cmd.Env = append(envWithout("EDGEPLANE_ROOT", "EDGEPLANE_BINARY", "EDGEPLANE_SERVER", "EDGEPLANE_TOKEN"),
				"EDGEPLANE_ROOT="+root, "EDGEPLANE_BINARY="+binary, "EDGEPLANE_SERVER="+tc.server, "EDGEPLANE_TOKEN="+tc.token)
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("install succeeded:\n%s", out)
			}
			for _, w := range tc.want {
				if !strings.Contains(string(out), w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
			if tc.token != "" && strings.Contains(string(out), tc.token) {
				t.Errorf("output shows the token:\n%s", out)
			}
			if entries, _ := os.ReadDir(root); len(entries) != 0 {
				t.Errorf("a refused install wrote %v", entries)
			}
		})
	}
}

// TestInstallAgentUninstallUnmounts mounts a tmpfs where a node's pod volume
// would be and runs the uninstall script with --delete-data: it unmounts the
// volume before removing the data dir, so removing it never reaches into
// another file system, and without --delete-data leaves both alone.
func TestInstallAgentUninstallUnmounts(t *testing.T) {
	if testing.Short() {
		t.Skip("uses the built binary")
	}
	parallel(t)
	var notRoot error
	if os.Geteuid() != 0 {
		notRoot = errors.New("not root")
	}
	testenv.Require(t, "root, to mount a tmpfs", notRoot)
	root := t.TempDir()
	env := []string{"EDGEPLANE_ROOT=" + root, "EDGEPLANE_BINARY=" + binary, "EDGEPLANE_INIT=systemd", "PATH=/usr/local/bin:/usr/bin:/bin",
		"EDGEPLANE_SERVER=https://192.0.2.10:6443", "EDGEPLANE_TOKEN=" + nodeToken("unmounts")}
	runScript(t, env, installScript)
	volume := filepath.Join(root, "var/lib/edgeplane/agent/kubelet/pods/0f0e/volumes/kubernetes.io~secret/token")
	if err := os.MkdirAll(volume, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", volume, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatalf("mount a tmpfs at %s: %v", volume, err)
	}
	t.Cleanup(func() { _ = unix.Unmount(volume, unix.MNT_DETACH) })
	writeConfig(t, filepath.Join(volume, "token"), "secret")
	uninstall := filepath.Join(root, "usr/local/bin/edgeplane-uninstall.sh")

	// Without --delete-data (the checkout's script: the installed one
	// removes itself): the volume stays mounted, its file there.
	out := runScript(t, env, uninstallScript)
	if !mounted(t, volume) || !strings.Contains(out, "kept the data dir /var/lib/edgeplane") {
		t.Fatalf("uninstall without --delete-data unmounted %s or did not keep the data dir:\n%s", volume, out)
	}
	if got := readFile(t, filepath.Join(volume, "token")); got != "secret" {
		t.Fatalf("uninstall without --delete-data changed the volume's file: %q", got)
	}
	runScript(t, env, installScript)

	out = runScript(t, env, uninstall, "--dry-run", "--delete-data")
	if !strings.Contains(out, "would unmount /var/lib/edgeplane/agent/kubelet/pods/0f0e/volumes/kubernetes.io~secret/token\n") {
		t.Errorf("uninstall --dry-run --delete-data does not say it would unmount the volume:\n%s", out)
	}
	if !mounted(t, volume) {
		t.Fatalf("uninstall --dry-run unmounted %s:\n%s", volume, out)
	}

	out = runScript(t, env, uninstall, "--delete-data")
	if mounted(t, volume) {
		t.Errorf("uninstall --delete-data left %s mounted:\n%s", volume, out)
	}
	if _, err := os.Stat(filepath.Join(root, "var/lib/edgeplane")); !os.IsNotExist(err) {
		t.Errorf("uninstall --delete-data left the data dir (%v):\n%s", err, out)
	}
}

// mounted tells whether dir is a mount point in this mount namespace.
func mounted(t *testing.T, dir string) bool {
	t.Helper()
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if fields := strings.Fields(line); len(fields) > 4 && fields[4] == dir {
			return true
		}
	}
	return false
}

// TestInstallAgentConfigFile checks the agent.yaml install.sh writes against
// the installed binary's `edgeplane agent`: the file as written, and with
// every example uncommented, is read without a config error (unknown key,
// wrong type); the agent then stops at the missing --server.
func TestInstallAgentConfigFile(t *testing.T) {
	if testing.Short() {
		t.Skip("uses the built binary")
	}
	parallel(t)
	root := t.TempDir()
	env := []string{"EDGEPLANE_ROOT=" + root, "EDGEPLANE_BINARY=" + binary, "EDGEPLANE_INIT=systemd", "PATH=/usr/local/bin:/usr/bin:/bin",
		"EDGEPLANE_SERVER=https://192.0.2.10:6443", "EDGEPLANE_TOKEN=" + nodeToken("config")}
	runScript(t, env, installScript)
	written := filepath.Join(root, agentConfigFile)
	// The examples run from the first commented key to the end.
	text := readFile(t, written)
	start := strings.Index(text, "\n#data-dir:")
	if start < 0 {
		t.Fatalf("agent.yaml has no data-dir example:\n%s", text)
	}
	var examples []string
	for _, line := range strings.Split(strings.TrimSpace(text[start:]), "\n") {
		examples = append(examples, strings.TrimPrefix(line, "#"))
	}
	uncommented := filepath.Join(t.TempDir(), "examples", "agent.yaml")
	writeConfig(t, uncommented, strings.Join(examples, "\n")+"\n")

	for name, file := range map[string]string{"as written": written, "examples uncommented": uncommented} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, filepath.Join(root, "usr/local/bin/edgeplane"), "agent", "--config", file)
			cmd.Env = envWithout("EDGEPLANE_SERVER", "EDGEPLANE_TOKEN")
			out, err := cmd.CombinedOutput()
			if err == nil || strings.Contains(string(out), file+":") || !strings.Contains(string(out), "--server") {
				t.Errorf("edgeplane agent --config %s: %v, want it to read the file and stop at the missing --server:\n%s", file, err, out)
			}
		})
	}
}
