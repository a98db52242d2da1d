package containerd

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/BurntSushi/toml"
)

func testData() TemplateData {
	return TemplateData{
		Root:               "/var/lib/edgeplane/agent/containerd/root",
		State:              "/var/lib/edgeplane/agent/containerd/state",
		Socket:             "/var/lib/edgeplane/agent/containerd/containerd.sock",
		SandboxImage:       "registry.k8s.io/pause:3.6",
		Snapshotter:        SnapshotterOverlay,
		CNIBinDir:          "/usr/lib/cni",
		CNIConfDir:         "/etc/cni/net.d",
		RegistryConfigPath: "/var/lib/edgeplane/agent/containerd/certs.d",
	}
}

// TestRender checks the generated configuration and user templates:
// fragments of what is rendered, or the error (naming the file and line).
func TestRender(t *testing.T) {
	tests := []struct {
		name     string
		data     func(*TemplateData)
		template string // "" : no config.toml.tmpl
		want     []string
		wantErr  []string
	}{
		{
			name: "generated, cgroupfs",
			want: []string{
				"version = 2\n",
				`root = "/var/lib/edgeplane/agent/containerd/root"`,
				`state = "/var/lib/edgeplane/agent/containerd/state"`,
				"[grpc]\n  address = \"/var/lib/edgeplane/agent/containerd/containerd.sock\"\n",
				`path = "/var/lib/edgeplane/agent/containerd/root/opt"`,
				`sandbox_image = "registry.k8s.io/pause:3.6"`,
				`snapshotter = "overlayfs"`,
				"runtime_type = \"io.containerd.runc.v2\"\n      [plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc.options]\n        SystemdCgroup = false\n",
				"[plugins.\"io.containerd.grpc.v1.cri\".cni]\n    bin_dir = \"/usr/lib/cni\"\n    conf_dir = \"/etc/cni/net.d\"\n",
				"[plugins.\"io.containerd.grpc.v1.cri\".registry]\n    config_path = \"/var/lib/edgeplane/agent/containerd/certs.d\"\n",
			},
		},
		{
			name: "systemd cgroups, native snapshotter",
			data: func(d *TemplateData) { d.SystemdCgroup, d.Snapshotter = true, SnapshotterNative },
			want: []string{"SystemdCgroup = true\n", `snapshotter = "native"`},
		},
		{
			name: "registry credentials, quoted",
			data: func(d *TemplateData) {
				d.RegistryAuths = []RegistryAuth{
					{Host: "registry.example:5000", Username: "bob", Password: `p"a\ss`},
					{Host: "ghcr.io", IdentityToken: "tok"},
				}
			},
			want: []string{
				"[plugins.\"io.containerd.grpc.v1.cri\".registry.configs.\"registry.example:5000\".auth]\n    username = \"bob\"\n    password = \"p\\\"a\\\\ss\"\n",
				"[plugins.\"io.containerd.grpc.v1.cri\".registry.configs.\"ghcr.io\".auth]\n    identitytoken = \"tok\"\n",
			},
		},
		{
			name:     "template adding a runtime after the base",
			template: "{{ template \"base\" . }}\n      [plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.crun]\n        runtime_type = \"io.containerd.runc.v2\"\n",
			want: []string{
				`sandbox_image = "registry.k8s.io/pause:3.6"`,
				"[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.crun]\n",
			},
		},
		{
			name:     "template of its own, with the variables",
			template: "version = 2\nroot = {{ toml .Root }}\n# {{ .Snapshotter }} {{ .SystemdCgroup }} {{ .Socket }}\n",
			want:     []string{"version = 2\nroot = \"/var/lib/edgeplane/agent/containerd/root\"\n# overlayfs false /var/lib/edgeplane/agent/containerd/containerd.sock\n"},
		},
		{
			name:     "template that does not parse",
			template: "version = 2\n\n{{ .Root \n",
			wantErr:  []string{"config.toml.tmpl:3", "containerd template"},
		},
		{
			name:     "template naming an unknown value",
			template: "version = 2\nroot = {{ .Rooot }}\n",
			wantErr:  []string{"config.toml.tmpl:2", "Rooot"},
		},
		{
			name:     "template rendering a table twice",
			template: "{{ template \"base\" . }}\n[grpc]\n  address = \"/x\"\n",
			wantErr:  []string{"config.toml.tmpl", "not TOML", "line "},
		},
		{
			name:     "template for containerd 2",
			template: "version = 3\n",
			wantErr:  []string{"config.toml.tmpl", "version = 3", "containerd 1.6 and 1.7 need version = 2"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := testData()
			if tt.data != nil {
				tt.data(&d)
			}
			tmpl := filepath.Join(t.TempDir(), TemplateFile)
			if tt.template != "" {
				if err := os.WriteFile(tmpl, []byte(tt.template), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			out, err := Render(d, tmpl)
			if len(tt.wantErr) > 0 {
				if err == nil {
					t.Fatalf("Render = nil error, want one naming %q; rendered:\n%s", tt.wantErr, out)
				}
				for _, w := range tt.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q does not contain %q", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("Render: %v", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(string(out), w) {
					t.Errorf("rendered config lacks %q:\n%s", w, out)
				}
			}
			var parsed map[string]any
			if _, err := toml.Decode(string(out), &parsed); err != nil {
				t.Fatalf("rendered config is not TOML: %v\n%s", err, out)
			}
		})
	}
}

// TestRenderAuthValues decodes the rendered credentials: quoting keeps
// every character of a password.
func TestRenderAuthValues(t *testing.T) {
	d := testData()
	pw := "p\"a\\ss\tw\x01rd ü"
	d.RegistryAuths = []RegistryAuth{{Host: "reg:5000", Username: "bob", Password: pw, Auth: "Ym9iOnB3"}}
	out, err := Render(d, "")
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		Plugins map[string]struct {
			Registry struct {
				Configs map[string]struct{ Auth map[string]string }
			}
		}
	}
	if _, err := toml.Decode(string(out), &cfg); err != nil {
		t.Fatal(err)
	}
	auth := cfg.Plugins["io.containerd.grpc.v1.cri"].Registry.Configs["reg:5000"].Auth
	if auth["username"] != "bob" || auth["password"] != pw || auth["auth"] != "Ym9iOnB3" {
		t.Errorf("decoded auth = %q, want username bob, password %q, auth Ym9iOnB3", auth, pw)
	}
}

// TestWriteConfig: 0600 in a 0700 directory, written only when it
// changes, narrowed when an earlier file was wider.
func TestWriteConfig(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "containerd")
	path := filepath.Join(dir, ConfigFile)
	changed, err := writeConfig(path, []byte("a"))
	if err != nil || !changed {
		t.Fatalf("first write: changed %v, %v; want true, nil", changed, err)
	}
	for p, want := range map[string]os.FileMode{dir: 0o700, path: 0o600} {
		if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != want {
			t.Errorf("%s: mode %v (%v), want %v", p, fi.Mode().Perm(), err, want)
		}
	}
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(path, old, old); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	changed, err = writeConfig(path, []byte("a"))
	if err != nil || changed {
		t.Fatalf("same content: changed %v, %v; want false, nil", changed, err)
	}
	fi, _ := os.Stat(path)
	if !fi.ModTime().Equal(old) {
		t.Errorf("same content rewrote the file (mtime %v, want %v)", fi.ModTime(), old)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v after rewrite, want 0600", fi.Mode().Perm())
	}
	if changed, err = writeConfig(path, []byte("b")); err != nil || !changed {
		t.Fatalf("new content: changed %v, %v; want true, nil", changed, err)
	}
}

func TestCheckVersion(t *testing.T) {
	tests := []struct {
		version string
		wantErr string
	}{
		{version: "1.6.20~ds1"},
		{version: "1.7.27"},
		{version: "2.1.4", wantErr: "version 2.1.4: edgeplane configures containerd 1.6 and 1.7"},
		{version: "1.5.9", wantErr: "version 1.5.9"},
		{version: "dev", wantErr: `"dev", which cannot be read`},
	}
	for _, tt := range tests {
		err := checkVersion("/usr/bin/containerd", tt.version)
		if tt.wantErr == "" && err != nil {
			t.Errorf("checkVersion(%s) = %v, want nil", tt.version, err)
		}
		if tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
			t.Errorf("checkVersion(%s) = %v, want an error with %q", tt.version, err, tt.wantErr)
		}
	}
}

// TestFindBinary: beside edgeplane first, then the PATH, else
// ErrNoBinary; the version is read from the binary and checked.
func TestFindBinary(t *testing.T) {
	fake := func(t *testing.T, dir, version string) string {
		t.Helper()
		p := filepath.Join(dir, "containerd")
		script := "#!/bin/sh\necho containerd github.com/containerd/containerd " + version + " abcdef\n"
		if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	release, other := t.TempDir(), t.TempDir()
	exe := filepath.Join(release, "edgeplane")
	if err := os.WriteFile(exe, nil, 0o755); err != nil {
		t.Fatal(err)
	}
	onPath := fake(t, other, "v1.7.2")
	lookPath := func(string) (string, error) { return onPath, nil }
	noPath := func(string) (string, error) { return "", errors.New("not found") }
	ctx := context.Background()

	b, err := findBinary(ctx, exe, lookPath)
	if err != nil || b.Path != onPath || b.Version != "1.7.2" || b.Where != "on the PATH" {
		t.Errorf("only on the PATH: %+v, %v; want %s 1.7.2 on the PATH", b, err, onPath)
	}
	beside := fake(t, release, "1.6.20~ds1")
	b, err = findBinary(ctx, exe, lookPath)
	if err != nil || b.Path != beside || b.Version != "1.6.20~ds1" || b.Where != "beside edgeplane" {
		t.Errorf("beside edgeplane and on the PATH: %+v, %v; want %s beside edgeplane", b, err, beside)
	}
	fake(t, release, "2.0.0")
	if _, err = findBinary(ctx, exe, lookPath); err == nil || !strings.Contains(err.Error(), "version 2.0.0") {
		t.Errorf("containerd 2.0.0 beside edgeplane: %v, want a refusal naming the version", err)
	}
	if _, err = findBinary(ctx, filepath.Join(t.TempDir(), "edgeplane"), noPath); !errors.Is(err, ErrNoBinary) {
		t.Errorf("none anywhere: %v, want ErrNoBinary", err)
	}
}

func TestSocketPath(t *testing.T) {
	long := "/" + strings.Repeat("d", 120)
	_, err := New(context.Background(), Config{Dir: long, CgroupDriver: "cgroupfs", SandboxImage: "p", CNIBinDir: "/b", CNIConfDir: "/c",
		Binary: &Binary{Path: "/usr/bin/containerd", Version: "1.6.20"}})
	if err == nil || !strings.Contains(err.Error(), "use a shorter --data-dir") {
		t.Errorf("New with a %d-byte directory = %v, want the socket path refused", len(long), err)
	}
}

// TestLogFile: the log is rotated at its cap, one old file kept; the tail
// holds the last lines.
func TestLogFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), LogFile)
	l, err := openLog(path, 100)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	line := strings.Repeat("x", 39) + "\n"
	for i := range 10 {
		_, _ = l.Write([]byte(strings.Replace(line, "x", string(rune('a'+i)), 1)))
	}
	for _, p := range []string{path, path + ".1"} {
		fi, err := os.Stat(p)
		if err != nil || fi.Size() > 100 || fi.Size() == 0 {
			t.Errorf("%s: %v, size %d; want 1..100 bytes", p, err, fi.Size())
		}
	}
	if _, err := os.Stat(path + ".2"); err == nil {
		t.Errorf("%s.2 exists: one old file only", path)
	}
	if tail := l.Tail(); !strings.HasSuffix(tail, "j"+strings.Repeat("x", 38)) {
		t.Errorf("tail %q does not end with the last line", tail)
	}
}

func TestChildEnv(t *testing.T) {
	got := childEnv([]string{"HOME=/root", "NOTIFY_SOCKET=/run/systemd/notify", "PATH=/usr/bin:/bin"}, "/opt/edgeplane")
	want := []string{"HOME=/root", "PATH=/opt/edgeplane:/usr/bin:/bin"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("childEnv = %q, want %q (no NOTIFY_SOCKET, the binary's directory first on the PATH)", got, want)
	}
	if got := childEnv(nil, "/opt/edgeplane"); strings.Join(got, " ") != "PATH=/opt/edgeplane" {
		t.Errorf("childEnv with no PATH = %q, want PATH=/opt/edgeplane", got)
	}
}
