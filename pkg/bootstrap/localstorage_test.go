package bootstrap

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestLocalStoragePath: the storage path defaults under the data dir, a
// relative one is made absolute, "/" is refused, and nodes are told none
// when local storage is disabled.
func TestLocalStoragePath(t *testing.T) {
	cwd, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		args      []string
		want      string // "<data-dir>/...": under the test's data dir
		published string // what nodes are told; "=": want
		wantErr   string
	}{
		{name: "default", want: "<data-dir>/storage", published: "="},
		{name: "absolute", args: []string{"--default-local-storage-path", "/mnt/ssd/volumes/"}, want: "/mnt/ssd/volumes", published: "="},
		{name: "relative", args: []string{"--default-local-storage-path", "volumes"}, want: filepath.Join(cwd, "volumes"), published: "="},
		{name: "disabled", args: []string{"--disable", "local-storage"}, want: "<data-dir>/storage", published: ""},
		{name: "root", args: []string{"--default-local-storage-path", "/"}, wantErr: `--default-local-storage-path "/": give a directory of its own`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, errs := validateArgs(t, tt.args)
			if tt.wantErr != "" {
				wantOneProblem(t, errs, tt.wantErr)
				return
			}
			if len(errs) > 0 {
				t.Fatal(errs)
			}
			want := tt.want
			if rest, ok := strings.CutPrefix(want, "<data-dir>"); ok {
				want = c.DataDir + rest
			}
			if c.LocalStoragePath != want {
				t.Errorf("LocalStoragePath = %q, want %q", c.LocalStoragePath, want)
			}
			published := tt.published
			if published == "=" {
				published = want
			}
			if got := c.nodeSettings().LocalStoragePath; got != published {
				t.Errorf("nodes are told %q, want %q", got, published)
			}
		})
	}
}
