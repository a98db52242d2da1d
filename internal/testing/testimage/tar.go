package testimage

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"sort"
	"strings"
)

// rootfs is the image's one layer, uncompressed: bin/busybox, its applet
// links, the few files and directories a shell and a pod expect, and the
// image's extra files.
func rootfs(busybox []byte, extra []File) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := []struct {
		name string
		mode int64
	}{
		{"bin/", 0o755}, {"dev/", 0o755}, {"etc/", 0o755}, {"proc/", 0o555}, {"root/", 0o700},
		{"sys/", 0o555}, {"tmp/", 0o1777}, {"var/", 0o755}, {"var/www/", 0o755},
	}
	for _, d := range dirs {
		if err := tw.WriteHeader(header(tar.TypeDir, d.name, d.mode, 0, "")); err != nil {
			return nil, err
		}
	}
	if err := writeFile(tw, "bin/busybox", 0o755, busybox); err != nil {
		return nil, err
	}
	applets := append([]string(nil), Applets...)
	sort.Strings(applets)
	for _, a := range applets {
		if err := tw.WriteHeader(header(tar.TypeSymlink, "bin/"+a, 0o777, 0, "busybox")); err != nil {
			return nil, err
		}
	}
	files := []struct{ name, body string }{
		{"etc/group", "root:x:0:\nnogroup:x:65534:\n"},
		{"etc/hosts", "127.0.0.1 localhost\n::1 localhost\n"},
		{"etc/passwd", "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n"},
		{"var/www/index.html", "edgeplane test image\n"},
	}
	for _, f := range files {
		if err := writeFile(tw, f.name, 0o644, []byte(f.body)); err != nil {
			return nil, err
		}
	}
	for _, f := range extra {
		if err := writeFile(tw, strings.TrimPrefix(f.Path, "/"), f.Mode, f.Body); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func header(typ byte, name string, mode, size int64, link string) *tar.Header {
	return &tar.Header{
		Typeflag: typ, Name: name, Mode: mode, Size: size, Linkname: link,
		ModTime: epoch, Uname: "root", Gname: "root", Format: tar.FormatPAX,
	}
}

func writeFile(tw *tar.Writer, name string, mode int64, body []byte) error {
	if err := tw.WriteHeader(header(tar.TypeReg, name, mode, int64(len(body)), "")); err != nil {
		return err
	}
	_, err := tw.Write(body)
	return err
}

// WriteTar writes the layout as an OCI image-layout tarball: oci-layout,
// index.json and blobs/sha256/*, in a fixed order.
func (l *Layout) WriteTar(w io.Writer) error {
	tw := tar.NewWriter(w)
	if err := writeFile(tw, "oci-layout", 0o644, []byte(`{"imageLayoutVersion":"1.0.0"}`)); err != nil {
		return err
	}
	if err := writeFile(tw, "index.json", 0o644, l.Index); err != nil {
		return err
	}
	for _, d := range []string{"blobs/", "blobs/sha256/"} {
		if err := tw.WriteHeader(header(tar.TypeDir, d, 0o755, 0, "")); err != nil {
			return err
		}
	}
	digests := make([]string, 0, len(l.Blobs))
	for d := range l.Blobs {
		digests = append(digests, d)
	}
	sort.Strings(digests)
	for _, d := range digests {
		hex, ok := strings.CutPrefix(d, "sha256:")
		if !ok {
			return fmt.Errorf("testimage: digest %q is not sha256", d)
		}
		if err := writeFile(tw, "blobs/sha256/"+hex, 0o644, l.Blobs[d]); err != nil {
			return err
		}
	}
	return tw.Close()
}
