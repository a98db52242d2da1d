package app

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/edgeplane/edgeplane/pkg/bootstrap"
)

func TestDataDirDefault(t *testing.T) {
	for _, tc := range []struct {
		name   string
		env    string
		config string // config.yaml; "" = no file
		dropIn string // config.yaml.d/10-data.yaml; "" = none
		want   string // "<default>": bootstrap.DefaultDataDir()
	}{
		{name: "no config file", want: "<default>"},
		{name: "config file sets data-dir", config: "data-dir: /srv/edgeplane\n", want: "/srv/edgeplane"},
		{name: "a drop-in overrides the file", config: "data-dir: /srv/a\n", dropIn: "data-dir: /srv/b\n", want: "/srv/b"},
		{name: "config file without data-dir", config: "https-port: 7443\n", want: "<default>"},
		{name: "the environment wins", env: "/opt/ep", config: "data-dir: /srv/edgeplane\n", want: "/opt/ep"},
		{name: "a config file the server would refuse", config: "data-dirr: /srv/x\n", want: "<default>"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "config.yaml")
			if tc.config != "" {
				if err := os.WriteFile(path, []byte(tc.config), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			if tc.dropIn != "" {
				if err := os.MkdirAll(path+".d", 0o700); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(path+".d", "10-data.yaml"), []byte(tc.dropIn), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			getenv := func(k string) string {
				if k == dataDirEnv {
					return tc.env
				}
				return ""
			}
			want := tc.want
			if want == "<default>" {
				want = bootstrap.DefaultDataDir()
			}
			if got := dataDirDefault(getenv, path); got != want {
				t.Fatalf("dataDirDefault = %q, want %q", got, want)
			}
		})
	}
}

// TestOnDeviceCommandsDataDir runs commands through the real command tree:
// without --data-dir they work on serverDataDir's (here $EDGEPLANE_DATA_DIR),
// also under a parent's persistent flag (etcd); --data-dir still wins.
func TestOnDeviceCommandsDataDir(t *testing.T) {
	envDir, flagDir := t.TempDir(), t.TempDir()
	t.Setenv(dataDirEnv, envDir)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"token"}, "no join token in " + envDir},
		{[]string{"token", "--data-dir", flagDir}, "no join token in " + flagDir},
		{[]string{"etcd", "member", "list"}, "no running etcd server on " + envDir},
		{[]string{"etcd", "member", "list", "--data-dir", flagDir}, "no running etcd server on " + flagDir},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var out bytes.Buffer
			cmd := NewRootCommand(&out, &out)
			cmd.SetArgs(tc.args)
			err := cmd.Execute()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("edgeplane %v: %v; want an error naming %q", tc.args, err, tc.want)
			}
		})
	}
}
