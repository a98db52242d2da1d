package bootstrap

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/edgeplane/edgeplane/pkg/config"
)

// TestAllowPrivilegedOption: --allow-privileged defaults to true, and the
// flag or its config-file key sets what the API server (chain config) and
// the nodes (node settings) get.
func TestAllowPrivilegedOption(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		file    string // config.yaml; "" for none
		want    bool
		wantErr string
	}{
		{name: "default", want: true},
		{name: "flag", args: []string{"--allow-privileged=false"}, want: false},
		{name: "config file", file: "allow-privileged: false\n", want: false},
		{name: "the command line wins", args: []string{"--allow-privileged=true"}, file: "allow-privileged: false\n", want: true},
		{name: "not a boolean in the file", file: "allow-privileged: sometimes\n", wantErr: `key "allow-privileged": want true or false`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := NewOptions()
			fs := pflag.NewFlagSet("server", pflag.ContinueOnError)
			o.AddFlags(fs)
			if err := fs.Parse(append([]string{"--data-dir", t.TempDir(), "--advertise-address", "192.0.2.1"}, tt.args...)); err != nil {
				t.Fatal(err)
			}
			if tt.file != "" {
				path := filepath.Join(t.TempDir(), "config.yaml")
				if err := os.WriteFile(path, []byte(tt.file), 0o600); err != nil {
					t.Fatal(err)
				}
				err := config.Load(fs, []string{path})
				if tt.wantErr != "" {
					if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
						t.Fatalf("config.Load: %v, want %q", err, tt.wantErr)
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			c, err := o.Complete()
			if err != nil {
				t.Fatal(err)
			}
			if errs := c.Validate(); len(errs) > 0 {
				t.Fatal(errs)
			}
			if got := c.AllowPrivileged; got != tt.want {
				t.Errorf("AllowPrivileged = %v, want %v", got, tt.want)
			}
			if got := c.nodeSettings().AllowPrivileged; got != tt.want {
				t.Errorf("node settings' AllowPrivileged = %v, want %v", got, tt.want)
			}
		})
	}
}
