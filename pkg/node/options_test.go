package node

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/edgeplane/edgeplane/pkg/nodeconfig"
)

// TestPodLogsDir: --pod-logs-dir reaches the kubelet's options; a relative
// path is refused with the flag's name.
func TestPodLogsDir(t *testing.T) {
	for _, tc := range []struct {
		name, dir, want, wantErr string
	}{
		{name: "default", dir: "", want: ""},
		{name: "absolute", dir: "/var/lib/edgeplane/pod-logs/", want: "/var/lib/edgeplane/pod-logs"},
		{name: "relative", dir: "logs", wantErr: `--pod-logs-dir "logs" must be an absolute path`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := NewOptions()
			o.PodLogsDir = tc.dir
			c, errs := o.Complete("host")
			if tc.wantErr != "" {
				if len(errs) != 1 || !strings.Contains(errs[0].Error(), tc.wantErr) {
					t.Fatalf("errors %v, want %q", errs, tc.wantErr)
				}
				return
			}
			if len(errs) > 0 {
				t.Fatal(errs)
			}
			if got := (Config{Settings: c}).KubeletOptions(PathsIn("/d"), Cluster{Config: nodeconfig.Config{ClusterDomain: "cluster.local"}}).PodLogsDir; got != tc.want {
				t.Fatalf("kubelet PodLogsDir = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestRegistriesFile: --registries-file is read at Complete; a missing file
// is none; a bad one is refused with the flag, the file, the line and the
// key.
func TestRegistriesFile(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(good, []byte("mirrors:\n  docker.io:\n    endpoint: [\"http://127.0.0.1:5000\"]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad, []byte("mirrors:\n  docker.io:\n    endpoints: [\"http://127.0.0.1:5000\"]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, file, wantErr string
		mirrors             int
	}{
		{name: "missing", file: filepath.Join(dir, "none.yaml")},
		{name: "good", file: good, mirrors: 1},
		{name: "bad", file: bad, wantErr: `--registries-file: ` + bad + `:3: key mirrors."docker.io".endpoints: unknown key`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := NewOptions()
			o.RegistriesFile = tc.file
			c, errs := o.Complete("host")
			if tc.wantErr != "" {
				if len(errs) != 1 || !strings.Contains(errs[0].Error(), tc.wantErr) {
					t.Fatalf("errors %v, want %q", errs, tc.wantErr)
				}
				return
			}
			if len(errs) > 0 {
				t.Fatal(errs)
			}
			if c.Registries == nil || len(c.Registries.Mirrors) != tc.mirrors {
				t.Fatalf("Registries %+v, want %d mirrors", c.Registries, tc.mirrors)
			}
		})
	}
	if o := NewOptions(); o.RegistriesFile != "/etc/edgeplane/registries.yaml" || o.PauseImage != "edgeplane.invalid/pause:1" {
		t.Errorf("defaults: --registries-file %q, --pause-image %q", o.RegistriesFile, o.PauseImage)
	}
}
