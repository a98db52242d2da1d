// Package airgap imports image tarballs from a directory into containerd, so
// that a node with no registry can run pods: the sandbox ("pause") image and
// the workloads' images are there before the kubelet asks for them.
//
// Each file of the directory that ends in .tar, .tar.gz or .tgz is an OCI
// image layout tarball (what `docker save` of Docker 25 or newer, `ctr
// images export` and `skopeo copy ... oci-archive:` write), gzipped or not.
// Import talks to containerd through its own gRPC API: it writes the blobs
// into the content store under a lease (so containerd's garbage collector
// cannot take a half-imported image), labels manifests and indexes with the
// GC references to their children, then creates or updates one image record
// per name, normalized as CRI looks it up (busybox:1 is
// docker.io/library/busybox:1), labelled io.cri-containerd.image=managed,
// and io.cri-containerd.pinned=pinned for the names in Options.Pinned so the
// kubelet's image GC keeps them. Images are not unpacked: containerd's CRI
// plugin unpacks an image into the snapshotter the first time a container
// uses it (pkg/cri/opts.WithNewSnapshot in containerd 1.6).
//
// A record of what was imported (file name, size, modification time,
// SHA-256, and the image records made) is kept next to the directory, so a
// restart imports only new or changed files, and re-imports a file whose
// images are gone from containerd.
package airgap

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"k8s.io/klog/v2"
)

// DefaultNamespace is the containerd namespace of CRI (the kubelet's).
const DefaultNamespace = "k8s.io"

// Options says what to import into which containerd.
type Options struct {
	// Address is containerd's gRPC socket: a path or unix://path.
	Address string
	// Namespace is the containerd namespace; empty means DefaultNamespace.
	Namespace string
	// Dir holds the image tarballs. A missing Dir imports nothing.
	Dir string
	// Pinned lists image names to pin (e.g. the sandbox image), in any
	// form NormalizeName takes.
	Pinned []string
	// StateFile records what was imported; empty means
	// <parent of Dir>/<base of Dir>-imported.json.
	StateFile string
}

// File is one tarball and the image names it holds.
type File struct {
	Path   string
	Images []string
}

// Result says what Import did.
type Result struct {
	// Imported lists the files imported by this call.
	Imported []File
	// Skipped lists the files imported earlier, whose images are still in
	// containerd.
	Skipped []File
	// Failed lists the files that could not be imported; the error Import
	// returns names each with what is wrong.
	Failed []string
}

// Images returns every image name of Imported and Skipped.
func (r Result) Images() []string {
	var names []string
	for _, f := range append(append([]File(nil), r.Imported...), r.Skipped...) {
		names = append(names, f.Images...)
	}
	sort.Strings(names)
	return names
}

// IsImageFile reports whether Import reads the file of that name.
func IsImageFile(name string) bool {
	return strings.HasSuffix(name, ".tar") || strings.HasSuffix(name, ".tar.gz") || strings.HasSuffix(name, ".tgz")
}

// Import imports every image tarball of opts.Dir into containerd. A file
// that fails does not stop the others: the error joins one error per
// failed file, each naming the file and what is wrong with it.
func Import(ctx context.Context, opts Options) (Result, error) {
	logger := klog.FromContext(ctx)
	var res Result
	var errs []error
	if opts.Address == "" {
		errs = append(errs, errors.New("airgap: Options.Address is empty: set it to containerd's socket"))
	}
	if opts.Dir == "" {
		errs = append(errs, errors.New("airgap: Options.Dir is empty: set it to the directory of image tarballs"))
	}
	pinned := map[string]bool{}
	for _, p := range opts.Pinned {
		n, err := NormalizeName(p)
		if err != nil {
			errs = append(errs, fmt.Errorf("airgap: Options.Pinned: %w", err))
			continue
		}
		pinned[n] = true
	}
	if len(errs) > 0 {
		return res, errors.Join(errs...)
	}
	if opts.Namespace == "" {
		opts.Namespace = DefaultNamespace
	}
	if opts.StateFile == "" {
		dir := filepath.Clean(opts.Dir)
		opts.StateFile = filepath.Join(filepath.Dir(dir), filepath.Base(dir)+"-imported.json")
	}

	entries, err := os.ReadDir(opts.Dir)
	if errors.Is(err, os.ErrNotExist) {
		logger.V(2).Info("No airgap image directory", "dir", opts.Dir)
		return res, nil
	}
	if err != nil {
		return res, fmt.Errorf("airgap: read image directory: %w", err)
	}
	var files []string
	for _, e := range entries {
		if e.Type().IsRegular() && IsImageFile(e.Name()) {
			files = append(files, e.Name())
		}
	}
	if len(files) == 0 {
		return res, nil
	}

	c, err := dial(opts.Address, opts.Namespace)
	if err != nil {
		return res, err
	}
	defer c.close()
	st := loadState(ctx, opts.StateFile)
	lease, done, err := c.newLease(ctx)
	if err != nil {
		return res, fmt.Errorf("%w (is containerd running at %s?)", err, socketPath(opts.Address))
	}
	defer done()

	seen := map[string]bool{}
	for _, name := range files {
		seen[name] = true
		path := filepath.Join(opts.Dir, name)
		start := time.Now()
		images, skipped, err := c.importFile(ctx, lease, path, st, pinned)
		if err != nil {
			errs = append(errs, fmt.Errorf("airgap: %s: %w", path, err))
			res.Failed = append(res.Failed, path)
			logger.Error(err, "Importing image tarball", "file", path)
			continue
		}
		if skipped {
			res.Skipped = append(res.Skipped, File{Path: path, Images: images})
			continue
		}
		res.Imported = append(res.Imported, File{Path: path, Images: images})
		logger.Info("Imported images", "file", path, "images", images, "duration", time.Since(start).Round(time.Millisecond))
	}
	for name := range st.Files {
		if !seen[name] {
			delete(st.Files, name)
		}
	}
	if err := st.save(opts.StateFile); err != nil {
		errs = append(errs, err)
	}
	return res, errors.Join(errs...)
}

// importFile imports one tarball unless the state says it is imported and
// its images are still in containerd.
func (c *client) importFile(ctx context.Context, lease, path string, st *state, pinned map[string]bool) (images []string, skipped bool, err error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, false, err
	}
	name := filepath.Base(path)
	rec, ok := st.Files[name]
	if ok && (rec.Size != fi.Size() || !rec.ModTime.Equal(fi.ModTime())) {
		// Touched or replaced: the same content needs no import.
		sum, err := hashFile(path)
		if err != nil {
			return nil, false, err
		}
		ok = sum == rec.Digest
		if ok {
			rec.Size, rec.ModTime = fi.Size(), fi.ModTime()
		}
	}
	if ok {
		present, err := c.stillThere(ctx, lease, rec, pinned)
		if err != nil {
			return nil, false, err
		}
		if present {
			st.Files[name] = rec
			return sortedKeys(rec.Images), true, nil
		}
	}

	rec, err = c.importTarball(ctx, lease, path, pinned)
	if err != nil {
		delete(st.Files, name)
		return nil, false, err
	}
	st.Files[name] = rec
	return sortedKeys(rec.Images), false, nil
}

// stillThere reports whether every image record rec made still points at
// what it made, pinning those now in pinned.
func (c *client) stillThere(ctx context.Context, lease string, rec fileRecord, pinned map[string]bool) (bool, error) {
	for img, target := range rec.Images {
		got, labels, found, err := c.imageTarget(ctx, img)
		if err != nil {
			return false, err
		}
		if !found || got != target.Digest {
			return false, nil
		}
		if pinned[img] && labels[LabelCRIPinned] != "pinned" {
			if err := c.putImage(ctx, lease, img, target.proto(), true); err != nil {
				return false, err
			}
		}
	}
	return true, nil
}

func (c *client) importTarball(ctx context.Context, lease, path string, pinned map[string]bool) (fileRecord, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return fileRecord{}, err
	}
	a, err := c.scan(ctx, lease, path)
	if err != nil {
		return fileRecord{}, err
	}
	images, labels, errs := c.plan(ctx, lease, a)
	if len(errs) > 0 {
		return fileRecord{}, errors.Join(errs...)
	}
	digests := sortedKeys(labels)
	for _, d := range digests {
		if err := c.setLabels(ctx, d, labels[d]); err != nil {
			return fileRecord{}, err
		}
	}
	sum, err := hashFile(path)
	if err != nil {
		return fileRecord{}, err
	}
	rec := fileRecord{Size: fi.Size(), ModTime: fi.ModTime(), Digest: sum, Images: map[string]target{}}
	for _, img := range images {
		if err := c.putImage(ctx, lease, img.name, img.target, pinned[img.name]); err != nil {
			return fileRecord{}, err
		}
		rec.Images[img.name] = target{MediaType: img.target.MediaType, Digest: img.target.Digest, Size: img.target.Size}
	}
	return rec, nil
}

func hashFile(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("read: %w", err)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
