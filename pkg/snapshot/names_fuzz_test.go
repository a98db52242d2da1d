package snapshot

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/edgeplane/edgeplane/pkg/rawstore"
)

// FuzzSnapshotName checks `edgeplane snapshot save --name` values: an
// accepted name, once in a file name, is listed back with the same name,
// kind and time, so that pruning only ever touches its own snapshots.
func FuzzSnapshotName(f *testing.F) {
	for _, s := range []string{"scheduled", "on-demand", "a", "a-etcd", "x-sqlite-20260301t120000z", "-a", "a-", "A", "a_b", strings.Repeat("a", 64), ""} {
		f.Add(s, true, int64(1772366400))
	}
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, name string, etcd bool, unix int64) {
		if err := ValidateName(name); err != nil {
			if !strings.Contains(err.Error(), "snapshot name") {
				t.Fatalf("unclear error: %v", err)
			}
			return
		}
		kind := rawstore.SQLite
		if etcd {
			kind = rawstore.Etcd
		}
		at := time.Unix(unix%(1<<34), 0).UTC() // years 1970 to 2514: four-digit years
		sub, err := os.MkdirTemp(dir, "list")
		if err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(sub)
		if err := os.WriteFile(filepath.Join(sub, fileName(name, kind, at)), nil, 0o600); err != nil {
			t.Fatal(err)
		}
		files, err := List(sub)
		if err != nil || len(files) != 1 {
			t.Fatalf("List: %v, %v", files, err)
		}
		if got := files[0]; got.Name != name || got.Kind != kind || !got.Time.Equal(at) {
			t.Fatalf("%s listed as name %q kind %q time %s, want %q %q %s", fileName(name, kind, at), got.Name, got.Kind, got.Time, name, kind, at)
		}
	})
}

// FuzzDetectKind feeds arbitrary file contents to DetectKind (`edgeplane
// snapshot restore`): it names a kind or fails with an error naming the file.
func FuzzDetectKind(f *testing.F) {
	f.Add([]byte("SQLite format 3\x00" + strings.Repeat("\x00", 32)))
	f.Add(append(make([]byte, 16), 0xED, 0xDA, 0x0C, 0xED, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0))
	f.Add([]byte("short"))
	f.Add([]byte{})
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(dir, "snap.db")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		kind, err := DetectKind(path)
		if err != nil {
			if !strings.Contains(err.Error(), path) {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		if kind != rawstore.SQLite && kind != rawstore.Etcd {
			t.Fatalf("kind %q", kind)
		}
	})
}
