package conformance

import (
	"archive/tar"
	"bytes"
	"io"
	"testing"
)

func tarOf(t *testing.T, entries []tar.Header, bodies map[string]string) io.Reader {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, h := range entries {
		h := h
		if b, ok := bodies[h.Name]; ok {
			h.Size = int64(len(b))
		}
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		if b, ok := bodies[h.Name]; ok {
			if _, err := tw.Write([]byte(b)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return &buf
}

// TestAddTar: a Debian package's data merges into a layer with its
// directories, files (setuid kept), links and hard links as copies, less
// what skip leaves out; a hard link to nothing is an error.
func TestAddTar(t *testing.T) {
	r := NewRootfs()
	err := r.AddTar(tarOf(t, []tar.Header{
		{Typeflag: tar.TypeDir, Name: "./usr/bin/", Mode: 0o755},
		{Typeflag: tar.TypeReg, Name: "./usr/bin/tool", Mode: 0o4755},
		{Typeflag: tar.TypeLink, Name: "./usr/bin/tool2", Linkname: "./usr/bin/tool"},
		{Typeflag: tar.TypeSymlink, Name: "./bin/t", Linkname: "../usr/bin/tool"},
		{Typeflag: tar.TypeReg, Name: "./usr/share/doc/tool/README", Mode: 0o644},
	}, map[string]string{"./usr/bin/tool": "#!tool", "./usr/share/doc/tool/README": "docs"}), skipDocs)
	if err != nil {
		t.Fatal(err)
	}
	if e := r.entries["usr/bin/tool"]; e == nil || e.hdr.Mode != 0o4755 || string(e.body) != "#!tool" {
		t.Errorf("usr/bin/tool: %+v", e)
	}
	if e := r.entries["usr/bin/tool2"]; e == nil || e.hdr.Typeflag != tar.TypeReg || string(e.body) != "#!tool" {
		t.Errorf("hard link usr/bin/tool2 not a copy: %+v", e)
	}
	if e := r.entries["bin/t"]; e == nil || e.hdr.Linkname != "../usr/bin/tool" {
		t.Errorf("symlink bin/t: %+v", e)
	}
	if r.Has("usr/share/doc/tool/README") {
		t.Error("documentation kept")
	}
	if !r.Has("bin") {
		t.Error("the symlink's parent directory was not made")
	}

	bad := NewRootfs()
	if err := bad.AddTar(tarOf(t, []tar.Header{{Typeflag: tar.TypeLink, Name: "a", Linkname: "missing"}}, nil), nil); err == nil {
		t.Error("a hard link to nothing was accepted")
	}
}

// TestRootfsDeterministic: the same content gives the same layer bytes,
// whatever order it was added in (so a rebuild gives the same digests).
func TestRootfsDeterministic(t *testing.T) {
	a, b := NewRootfs(), NewRootfs()
	a.File("etc/x", 0o644, []byte("x"))
	a.Symlink("bin/sh", "busybox")
	b.Symlink("bin/sh", "busybox")
	b.File("etc/x", 0o644, []byte("x"))
	ta, err := a.tar()
	if err != nil {
		t.Fatal(err)
	}
	tb, err := b.tar()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(ta, tb) {
		t.Error("the same content in another order gave another layer")
	}
}

func TestDeb822HasSuite(t *testing.T) {
	stanza := "Types: deb\nURIs: http://mirror.invalid/debian\nSuites: bookworm bookworm-updates\nComponents: main"
	for _, tc := range []struct {
		suite string
		want  bool
	}{{"bookworm", true}, {"bookworm-updates", true}, {"trixie", false}, {"book", false}} {
		if got := deb822HasSuite(stanza, tc.suite); got != tc.want {
			t.Errorf("deb822HasSuite(%q) = %v, want %v", tc.suite, got, tc.want)
		}
	}
}
