package wear

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/testutil"
)

func TestProcIOField(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "io")
	content := "rchar: 10\nwchar: 20\nread_bytes: 4096\nwrite_bytes: 8192\ncancelled_write_bytes: 0\n"
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		field string
		want  uint64
		err   bool
	}{
		{"write_bytes", 8192, false},
		{"read_bytes", 4096, false},
		{"nope", 0, true},
	} {
		got, err := procIOField(path, tc.field)
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("procIOField(%s) = %d, %v; want %d, error %v", tc.field, got, err, tc.want, tc.err)
		}
	}
}

func TestDirSize(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "sub"), 0o700); err != nil {
		t.Fatal(err)
	}
	for name, size := range map[string]int{"a": 10000, "sub/b": 50000} {
		if err := os.WriteFile(filepath.Join(dir, name), make([]byte, size), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	got, err := DirSize(dir)
	if err != nil {
		t.Fatal(err)
	}
	// Allocation rounds up to blocks; zero-filled files written with write(2) are not sparse.
	if got < 60000 || got > 60000+2*64*1024 {
		t.Fatalf("DirSize = %d, want about 60000", got)
	}
	if _, err := DirSize(filepath.Join(dir, "missing")); err == nil {
		t.Fatal("DirSize of a missing directory did not fail")
	}
}

func TestCollector(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "state.db"), make([]byte, 4096), 0o600); err != nil {
		t.Fatal(err)
	}
	c := newCollector(dir)
	reg := metrics.NewKubeRegistry()
	reg.CustomMustRegister(c)
	const name = "edgeplane_process_disk_written_bytes_total"
	written := func() float64 {
		t.Helper()
		families, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range families {
			if f.GetName() == name && len(f.GetMetric()) == 1 {
				return f.GetMetric()[0].GetCounter().GetValue()
			}
		}
		t.Fatalf("%s missing from %d metric families", name, len(families))
		return 0
	}
	// A synced 1 MiB write by this process moves the counter by at least
	// that much (write_bytes counts pages dirtied for storage; a tmpfs has
	// none, so the test directory must be on a disk filesystem).
	before := written()
	const size = 1 << 20
	f, err := os.Create(filepath.Join(dir, "written"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(make([]byte, size)); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	after := written()
	if after-before < size {
		t.Errorf("%s moved from %.0f to %.0f after a synced %d-byte write, want at least %d more (is %s on tmpfs? set TMPDIR to a disk)",
			name, before, after, size, size, dir)
	}
	if err := os.Remove(filepath.Join(dir, "written")); err != nil {
		t.Fatal(err)
	}
	want := `# HELP edgeplane_datastore_size_bytes [ALPHA] Size on disk of the datastore's files (database, WAL, etcd member directory).
# TYPE edgeplane_datastore_size_bytes gauge
edgeplane_datastore_size_bytes 4096
`
	if err := testutil.CustomCollectAndCompare(newCollector(dir), strings.NewReader(want), "edgeplane_datastore_size_bytes"); err != nil {
		t.Fatal(err)
	}
}
