package main

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

func TestDropPageCache(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "binary")
	const size = 1 << 20
	if err := os.WriteFile(path, make([]byte, size), 0o644); err != nil {
		t.Fatal(err)
	}
	// A file just written is in the page cache, dirty.
	cached, err := cachedBytes(path)
	if err != nil {
		t.Fatal(err)
	}
	if cached != size {
		t.Fatalf("cached after the write: %d bytes, want %d", cached, size)
	}
	dropped, err := dropPageCache([]string{path})
	if err != nil {
		t.Fatal(err)
	}
	if dropped != size {
		t.Errorf("dropPageCache reported %d bytes cached, want %d", dropped, size)
	}
	after, err := cachedBytes(path)
	if err != nil {
		t.Fatal(err)
	}
	var fs unix.Statfs_t
	if err := unix.Statfs(dir, &fs); err != nil {
		t.Fatal(err)
	}
	if fs.Type == unix.TMPFS_MAGIC {
		// tmpfs pages are the file: they cannot be dropped.
		if after != size {
			t.Errorf("tmpfs: cached after the drop %d bytes, want %d", after, size)
		}
		return
	}
	if after != 0 {
		t.Errorf("cached after the drop: %d bytes, want 0", after)
	}
	if _, err := dropPageCache([]string{filepath.Join(dir, "missing")}); err == nil {
		t.Error("dropPageCache of a missing file: no error")
	}
}

// cachedBytes is how much of the file at path is in the page cache.
func cachedBytes(path string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	return residentBytes(f)
}
