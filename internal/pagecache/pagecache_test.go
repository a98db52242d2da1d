package pagecache

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestDrop(t *testing.T) {
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
	var fs unix.Statfs_t
	if err := unix.Statfs(dir, &fs); err != nil {
		t.Fatal(err)
	}
	dropped, err := Drop([]string{path})
	if fs.Type == unix.TMPFS_MAGIC {
		// tmpfs pages are the file: they cannot be dropped, which is an error.
		if err == nil || !strings.Contains(err.Error(), "still in the page cache") {
			t.Errorf("tmpfs: Drop = %v, want an error saying the pages stayed", err)
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	if dropped != size {
		t.Errorf("Drop reported %d bytes cached, want %d", dropped, size)
	}
	after, err := cachedBytes(path)
	if err != nil {
		t.Fatal(err)
	}
	if after != 0 {
		t.Errorf("cached after the drop: %d bytes, want 0", after)
	}
	if _, err := Drop([]string{filepath.Join(dir, "missing")}); err == nil {
		t.Error("Drop of a missing file: no error")
	}
}

// cachedBytes is how much of the file at path is in the page cache.
func cachedBytes(path string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	return Resident(f)
}

// TestDropRefusesPinnedPages: pages a process maps and has touched
// stay cached after the drop, and the drop says so instead of reporting a
// cold start that is not one.
func TestDropRefusesPinnedPages(t *testing.T) {
	path := filepath.Join(t.TempDir(), "binary")
	const size = 1 << 20
	if err := os.WriteFile(path, make([]byte, size), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	data, err := unix.Mmap(int(f.Fd()), 0, size, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(data)
	var sum byte
	for i := 0; i < size; i += os.Getpagesize() {
		sum += data[i] // fault every page in: mapped pages are not dropped
	}
	_, err = Drop([]string{path})
	if err == nil || !strings.Contains(err.Error(), "still in the page cache") {
		t.Errorf("Drop of a mapped file = %v (sum %d), want an error saying the pages stayed", err, sum)
	}
}
