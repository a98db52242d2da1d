package conformance

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/edgeplane/edgeplane/internal/testing/testimage"
)

// epoch is the time of every entry and image, so that a rebuild from the
// same inputs gives the same digests.
var epoch = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

// Image is an image to write: a name, one layer (a rootfs) and the config.
type Image struct {
	// Name is the full reference, e.g. registry.k8s.io/pause:3.10.2.
	Name string
	// Root is the layer's content.
	Root *Rootfs
	// Entrypoint, Cmd, Env, User and WorkingDir go into the image config
	// as in a Dockerfile.
	Entrypoint []string
	Cmd        []string
	Env        []string
	User       string
	WorkingDir string
}

// Rootfs is a layer being assembled: entries by path, written sorted.
type Rootfs struct {
	entries map[string]*rootEntry
}

type rootEntry struct {
	hdr  tar.Header
	body []byte
}

// NewRootfs is an empty layer.
func NewRootfs() *Rootfs { return &Rootfs{entries: map[string]*rootEntry{}} }

func clean(p string) string { return strings.TrimPrefix(path.Clean("/"+p), "/") }

// parents adds the missing directories above p.
func (r *Rootfs) parents(p string) {
	for d := path.Dir(p); d != "." && d != "/"; d = path.Dir(d) {
		if _, ok := r.entries[d]; !ok {
			r.entries[d] = &rootEntry{hdr: tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755}}
		}
	}
}

// File adds or replaces a regular file.
func (r *Rootfs) File(p string, mode int64, body []byte) {
	p = clean(p)
	r.parents(p)
	r.entries[p] = &rootEntry{hdr: tar.Header{Typeflag: tar.TypeReg, Name: p, Mode: mode, Size: int64(len(body))}, body: body}
}

// Dir adds a directory (mode kept if it exists).
func (r *Rootfs) Dir(p string, mode int64) {
	p = clean(p)
	r.parents(p)
	r.entries[p] = &rootEntry{hdr: tar.Header{Typeflag: tar.TypeDir, Name: p + "/", Mode: mode}}
}

// Symlink adds or replaces a symbolic link.
func (r *Rootfs) Symlink(p, target string) {
	p = clean(p)
	r.parents(p)
	r.entries[p] = &rootEntry{hdr: tar.Header{Typeflag: tar.TypeSymlink, Name: p, Linkname: target, Mode: 0o777}}
}

// Has reports whether p exists in the layer.
func (r *Rootfs) Has(p string) bool { _, ok := r.entries[clean(p)]; return ok }

// Copy adds every entry of another layer, replacing what is there.
func (r *Rootfs) Copy(o *Rootfs) {
	for k, v := range o.entries {
		e := *v
		r.entries[k] = &e
	}
}

// AddTar merges a tar stream (a Debian package's data, say) into the layer:
// regular files, directories, symbolic and hard links; skip tells the paths
// to leave out (documentation, say).
func (r *Rootfs) AddTar(rd io.Reader, skip func(p string) bool) error {
	tr := tar.NewReader(rd)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		p := clean(h.Name)
		if p == "" || p == "." || (skip != nil && skip(p)) {
			continue
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if _, ok := r.entries[p]; !ok {
				r.Dir(p, h.Mode&0o7777)
			}
		case tar.TypeReg:
			body, err := io.ReadAll(tr)
			if err != nil {
				return err
			}
			r.File(p, h.Mode&0o7777, body)
		case tar.TypeSymlink:
			r.Symlink(p, h.Linkname)
		case tar.TypeLink:
			target := r.entries[clean(h.Linkname)]
			if target == nil || target.hdr.Typeflag != tar.TypeReg {
				return fmt.Errorf("hard link %s to %s: no such file before it", p, h.Linkname)
			}
			r.File(p, target.hdr.Mode, target.body)
		}
	}
}

// tar is the layer, uncompressed, entries sorted, owned by root.
func (r *Rootfs) tar() ([]byte, error) {
	names := make([]string, 0, len(r.entries))
	for k := range r.entries {
		names = append(names, k)
	}
	sort.Strings(names)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, n := range names {
		e := r.entries[n]
		h := e.hdr
		h.ModTime, h.Uname, h.Gname, h.Format = epoch, "root", "root", tar.FormatPAX
		if err := tw.WriteHeader(&h); err != nil {
			return nil, err
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write(e.body); err != nil {
				return nil, err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Write writes img as an OCI image-layout tarball into dir (named as
// testimage names them) and returns its path.
func Write(dir string, img Image) (string, error) {
	layerTar, err := img.Root.tar()
	if err != nil {
		return "", fmt.Errorf("image %s: %w", img.Name, err)
	}
	var gz bytes.Buffer
	zw, err := gzip.NewWriterLevel(&gz, gzip.DefaultCompression)
	if err != nil {
		return "", err
	}
	if _, err := zw.Write(layerTar); err != nil {
		return "", err
	}
	if err := zw.Close(); err != nil {
		return "", err
	}
	blobs := map[string][]byte{}
	add := func(mediaType string, b []byte) testimage.Descriptor {
		d := digest(b)
		blobs[d] = b
		return testimage.Descriptor{MediaType: mediaType, Digest: d, Size: int64(len(b))}
	}
	layer := add(testimage.MediaTypeLayerGz, gz.Bytes())
	env := img.Env
	if len(env) == 0 {
		env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	}
	wd := img.WorkingDir
	if wd == "" {
		wd = "/"
	}
	cfg, err := json.Marshal(map[string]any{
		"created":      epoch.Format(time.RFC3339),
		"architecture": runtime.GOARCH,
		"os":           "linux",
		"config": map[string]any{
			"Env": env, "Entrypoint": img.Entrypoint, "Cmd": img.Cmd, "User": img.User, "WorkingDir": wd,
		},
		"rootfs":  map[string]any{"type": "layers", "diff_ids": []string{digest(layerTar)}},
		"history": []map[string]any{{"created": epoch.Format(time.RFC3339), "created_by": "edgeplane test/conformance"}},
	})
	if err != nil {
		return "", err
	}
	config := add(testimage.MediaTypeConfig, cfg)
	man, err := json.Marshal(map[string]any{
		"schemaVersion": 2, "mediaType": testimage.MediaTypeManifest,
		"config": config, "layers": []testimage.Descriptor{layer},
	})
	if err != nil {
		return "", err
	}
	manifest := add(testimage.MediaTypeManifest, man)
	manifest.Annotations = map[string]string{
		testimage.AnnotationContainerName: img.Name,
		testimage.AnnotationRefName:       refName(img.Name),
	}
	manifest.Platform = &testimage.Platform{Architecture: runtime.GOARCH, OS: "linux"}
	index, err := json.Marshal(map[string]any{
		"schemaVersion": 2, "mediaType": testimage.MediaTypeIndex,
		"manifests": []testimage.Descriptor{manifest},
	})
	if err != nil {
		return "", err
	}

	out := filepath.Join(dir, testimage.FileName(img.Name))
	f, err := os.CreateTemp(dir, ".image-*")
	if err != nil {
		return "", err
	}
	defer os.Remove(f.Name())
	tw := tar.NewWriter(f)
	put := func(name string, body []byte) error {
		h := &tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(body)), ModTime: epoch, Format: tar.FormatPAX}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		_, err := tw.Write(body)
		return err
	}
	if err := put("oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)); err != nil {
		return "", err
	}
	if err := put("index.json", index); err != nil {
		return "", err
	}
	digests := make([]string, 0, len(blobs))
	for d := range blobs {
		digests = append(digests, d)
	}
	sort.Strings(digests)
	for _, d := range digests {
		if err := put("blobs/sha256/"+strings.TrimPrefix(d, "sha256:"), blobs[d]); err != nil {
			return "", err
		}
	}
	if err := tw.Close(); err != nil {
		return "", err
	}
	if err := f.Close(); err != nil {
		return "", err
	}
	if err := os.Chmod(f.Name(), 0o644); err != nil {
		return "", err
	}
	return out, os.Rename(f.Name(), out)
}

// refName is the OCI ref.name annotation: the tag of a tagged name.
func refName(name string) string {
	if i := strings.LastIndex(name, ":"); i > strings.LastIndex(name, "/") {
		return name[i+1:]
	}
	return name
}

func digest(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}
