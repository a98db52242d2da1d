package powercut

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/edgeplane/edgeplane/internal/atomicfile"
	"github.com/edgeplane/edgeplane/internal/testing/testenv"
)

// mountForTest mounts a fresh backing directory; the mount is undone at cleanup.
func mountForTest(t *testing.T, backing string) *FS {
	t.Helper()
	testenv.Require(t, "root and /dev/fuse (the power-cut filesystem mounts FUSE directly)", Available())
	mnt := t.TempDir()
	p, err := Mount(backing, mnt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Unmount() })
	return p
}

func writeFile(t *testing.T, path string, data []byte, sync bool) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	if sync {
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

func syncDir(t *testing.T, dir string) {
	t.Helper()
	d, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		t.Fatalf("fsync of directory %s: %v", dir, err)
	}
}

// TestCut writes files in the ways edgeplane, SQLite and etcd do, cuts the
// power, and checks what the backing directory and a fresh mount hold.
func TestCut(t *testing.T) {
	seq := func(n int, c byte) []byte { return bytes.Repeat([]byte{c}, n) }
	cases := []struct {
		name string
		do   func(t *testing.T, dir string)
		want map[string][]byte // file -> content after the cut; nil: absent
	}{{
		name: "written and fsynced survives",
		do:   func(t *testing.T, dir string) { writeFile(t, filepath.Join(dir, "f"), []byte("durable"), true) },
		want: map[string][]byte{"f": []byte("durable")},
	}, {
		name: "written without fsync is lost (the create is kept)",
		do:   func(t *testing.T, dir string) { writeFile(t, filepath.Join(dir, "f"), []byte("volatile"), false) },
		want: map[string][]byte{"f": {}},
	}, {
		name: "rename of an unsynced temp file leaves an empty file, not the new content",
		do: func(t *testing.T, dir string) {
			writeFile(t, filepath.Join(dir, "f"), []byte("old"), true)
			syncDir(t, dir)
			writeFile(t, filepath.Join(dir, "f.tmp"), []byte("new content"), false)
			if err := os.Rename(filepath.Join(dir, "f.tmp"), filepath.Join(dir, "f")); err != nil {
				t.Fatal(err)
			}
		},
		want: map[string][]byte{"f": {}, "f.tmp": nil},
	}, {
		name: "atomicfile.Write survives",
		do: func(t *testing.T, dir string) {
			writeFile(t, filepath.Join(dir, "f"), []byte("old"), true)
			if _, err := atomicfile.Write(filepath.Join(dir, "f"), []byte("new content"), 0o600); err != nil {
				t.Fatal(err)
			}
		},
		want: map[string][]byte{"f": []byte("new content")},
	}, {
		name: "overwrite and append after a sync go back to the synced bytes",
		do: func(t *testing.T, dir string) {
			p := filepath.Join(dir, "f")
			writeFile(t, p, seq(10000, 'a'), true)
			f, err := os.OpenFile(p, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if _, err := f.WriteAt(seq(5000, 'b'), 3000); err != nil {
				t.Fatal(err)
			}
		},
		want: map[string][]byte{"f": seq(10000, 'a')},
	}, {
		name: "a synced overwrite survives, a later unsynced one does not",
		do: func(t *testing.T, dir string) {
			p := filepath.Join(dir, "f")
			writeFile(t, p, seq(6000, 'a'), true)
			f, err := os.OpenFile(p, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if _, err := f.WriteAt(seq(100, 'b'), 0); err != nil {
				t.Fatal(err)
			}
			if err := unix.Fdatasync(int(f.Fd())); err != nil {
				t.Fatal(err)
			}
			if _, err := f.WriteAt(seq(100, 'c'), 50); err != nil {
				t.Fatal(err)
			}
		},
		want: map[string][]byte{"f": append(seq(100, 'b'), seq(5900, 'a')...)},
	}, {
		name: "truncate without sync is undone",
		do: func(t *testing.T, dir string) {
			p := filepath.Join(dir, "f")
			writeFile(t, p, seq(9000, 'a'), true)
			if err := os.Truncate(p, 10); err != nil {
				t.Fatal(err)
			}
		},
		want: map[string][]byte{"f": seq(9000, 'a')},
	}, {
		name: "fallocate and writes into the preallocated space are undone, as etcd's WAL",
		do: func(t *testing.T, dir string) {
			p := filepath.Join(dir, "f")
			writeFile(t, p, []byte("head"), true)
			f, err := os.OpenFile(p, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if err := unix.Fallocate(int(f.Fd()), 0, 0, 1<<20); err != nil {
				t.Fatal(err)
			}
			if _, err := f.WriteAt([]byte("record"), 4); err != nil {
				t.Fatal(err)
			}
		},
		want: map[string][]byte{"f": []byte("head")},
	}, {
		name: "shared mmap writes survive msync, later ones do not",
		do: func(t *testing.T, dir string) {
			p := filepath.Join(dir, "f")
			writeFile(t, p, seq(8192, 'a'), true)
			f, err := os.OpenFile(p, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			m, err := unix.Mmap(int(f.Fd()), 0, 8192, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = unix.Munmap(m) }()
			copy(m[:10], seq(10, 'm'))
			if err := unix.Msync(m, unix.MS_SYNC); err != nil {
				t.Fatal(err)
			}
			copy(m[4096:4106], seq(10, 'z'))
		},
		want: map[string][]byte{"f": append(append(seq(10, 'm'), seq(4086, 'a')...), seq(4096, 'a')...)},
	}}

	backing := t.TempDir()
	p := mountForTest(t, backing)
	for _, c := range cases {
		dir := filepath.Join(p.Mountpoint(), c.name)
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		c.do(t, dir)
	}
	open, err := os.OpenFile(filepath.Join(p.Mountpoint(), "open-at-the-cut"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer open.Close()
	st, err := p.Cut()
	if err != nil {
		t.Fatal(err)
	}
	if st.DroppedFiles == 0 || st.Writes == 0 || st.Syncs == 0 || len(st.DroppedPaths) != st.DroppedFiles {
		t.Errorf("stats after the cut: %+v; want writes, syncs and dropped files", st)
	}
	if _, err := open.Write([]byte("x")); !errors.Is(err, syscall.EIO) {
		t.Errorf("write after the cut: %v, want EIO", err)
	}
	_ = open.Close()
	if err := p.Unmount(); err != nil {
		t.Fatal(err)
	}
	again := mountForTest(t, backing)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for name, want := range c.want {
				for _, root := range []string{backing, again.Mountpoint()} {
					got, err := os.ReadFile(filepath.Join(root, c.name, name))
					switch {
					case want == nil && !errors.Is(err, os.ErrNotExist):
						t.Errorf("%s under %s: %d bytes, %v; want absent", name, root, len(got), err)
					case want != nil && err != nil:
						t.Errorf("%s under %s: %v", name, root, err)
					case want != nil && !bytes.Equal(got, want):
						t.Errorf("%s under %s: %d bytes %.40q...; want %d bytes %.40q...", name, root, len(got), got, len(want), want)
					}
				}
			}
		})
	}
}
