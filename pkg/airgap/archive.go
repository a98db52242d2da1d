package airgap

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"

	"github.com/containerd/containerd/api/types"
)

// maxJSON is the largest index.json, manifest or config read into memory.
const maxJSON = 4 << 20

// Media types of manifests and indexes (OCI and Docker schema 2).
const (
	mediaTypeOCIManifest    = "application/vnd.oci.image.manifest.v1+json"
	mediaTypeOCIIndex       = "application/vnd.oci.image.index.v1+json"
	mediaTypeDockerManifest = "application/vnd.docker.distribution.manifest.v2+json"
	mediaTypeDockerList     = "application/vnd.docker.distribution.manifest.list.v2+json"
)

// Annotations naming an image in index.json.
const (
	annotationContainerName = "io.containerd.image.name"
	annotationRefName       = "org.opencontainers.image.ref.name"
)

type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// manifestOrIndex holds the fields of a manifest and of an index.
type manifestOrIndex struct {
	MediaType string       `json:"mediaType"`
	Config    *descriptor  `json:"config"`
	Layers    []descriptor `json:"layers"`
	Manifests []descriptor `json:"manifests"`
}

// archive is what one pass over a tarball found; every blob in it is in
// containerd's content store (under the import's lease) afterwards.
type archive struct {
	index []byte
	// blobs holds the size of every blob of the tarball.
	blobs map[string]int64
	// small holds the content of the blobs small enough to be a manifest,
	// an index or a config.
	small map[string][]byte
}

// open returns the tar stream of file, gunzipping it when it starts with
// gzip's magic number (whatever its name).
func open(f *os.File) (*tar.Reader, error) {
	br := bufio.NewReaderSize(f, 64<<10)
	magic, err := br.Peek(2)
	if err != nil {
		return nil, fmt.Errorf("read: %w (empty or truncated file)", err)
	}
	if magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("gunzip: %w", err)
		}
		return tar.NewReader(zr), nil
	}
	return tar.NewReader(br), nil
}

// scan reads the tarball once, writing each blob into containerd that it
// lacks.
func (c *client) scan(ctx context.Context, lease, file string) (*archive, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	tr, err := open(f)
	if err != nil {
		return nil, err
	}
	a := &archive{blobs: map[string]int64{}, small: map[string][]byte{}}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("read tar: %w (not a tar file, or truncated)", err)
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		name := strings.TrimPrefix(path.Clean(h.Name), "./")
		switch {
		case name == "index.json":
			if a.index, err = readSmall(tr, h); err != nil {
				return nil, fmt.Errorf("index.json: %w", err)
			}
		case strings.HasPrefix(name, "blobs/"):
			if err := c.scanBlob(ctx, lease, a, name, h, tr); err != nil {
				return nil, err
			}
		}
	}
	if a.index == nil {
		return nil, errors.New("no index.json: not an OCI image layout (docker save of Docker 25 or newer, " +
			"skopeo copy to oci-archive:, or ctr images export make one)")
	}
	return a, nil
}

func (c *client) scanBlob(ctx context.Context, lease string, a *archive, name string, h *tar.Header, tr io.Reader) error {
	parts := strings.Split(name, "/")
	if len(parts) != 3 || parts[1] != "sha256" || len(parts[2]) != 64 {
		return fmt.Errorf("%s: not a blobs/sha256/<64 hex digits> path", name)
	}
	if _, err := hex.DecodeString(parts[2]); err != nil {
		return fmt.Errorf("%s: the blob's name is not hex", name)
	}
	digest := "sha256:" + parts[2]
	a.blobs[digest] = h.Size
	var body io.Reader = tr
	if h.Size <= maxJSON {
		b, err := readSmall(tr, h)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		sum := sha256.Sum256(b)
		if got := hex.EncodeToString(sum[:]); got != parts[2] {
			return fmt.Errorf("%s: content has digest sha256:%s, not the one of its name (corrupt file)", name, got)
		}
		a.small[digest] = b
		body = bytes.NewReader(b)
	}
	has, err := c.hasBlob(ctx, lease, digest)
	if err != nil {
		return err
	}
	if has {
		return nil
	}
	if err := c.writeBlob(ctx, lease, digest, h.Size, body); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

func readSmall(r io.Reader, h *tar.Header) ([]byte, error) {
	if h.Size > maxJSON {
		return nil, fmt.Errorf("%d bytes, more than the %d this importer reads", h.Size, maxJSON)
	}
	b, err := io.ReadAll(io.LimitReader(r, h.Size))
	if err != nil {
		return nil, fmt.Errorf("read: %w (truncated or corrupt file)", err)
	}
	if int64(len(b)) != h.Size {
		return nil, fmt.Errorf("truncated: %d of %d bytes", len(b), h.Size)
	}
	return b, nil
}

// namedImage is one image record to create.
type namedImage struct {
	name   string
	target *types.Descriptor
}

// plan works out, from index.json, the image records to create and the GC
// labels to set on manifests and indexes, and checks that every blob they
// need is there (in the tarball, or already in containerd).
func (c *client) plan(ctx context.Context, lease string, a *archive) (images []namedImage, labels map[string]map[string]string, errs []error) {
	var index manifestOrIndex
	if err := json.Unmarshal(a.index, &index); err != nil {
		return nil, nil, []error{fmt.Errorf("index.json: %w", err)}
	}
	labels = map[string]map[string]string{}
	for i, d := range index.Manifests {
		name, err := imageName(d.Annotations)
		if err != nil {
			errs = append(errs, fmt.Errorf("index.json manifests[%d]: %w", i, err))
			continue
		}
		if name == "" {
			continue
		}
		if err := c.walk(ctx, lease, a, d, labels); err != nil {
			errs = append(errs, fmt.Errorf("image %s: %w", name, err))
			continue
		}
		images = append(images, namedImage{name: name, target: &types.Descriptor{
			MediaType: d.MediaType, Digest: d.Digest, Size: d.Size, Annotations: d.Annotations,
		}})
	}
	if len(images) == 0 && len(errs) == 0 {
		errs = append(errs, fmt.Errorf("index.json names no image (no %s or %s annotation on its manifests)",
			annotationContainerName, annotationRefName))
	}
	return images, labels, errs
}

// walk checks that d and what it references are present, and collects the
// GC labels of d's children.
func (c *client) walk(ctx context.Context, lease string, a *archive, d descriptor, labels map[string]map[string]string) error {
	if d.MediaType != mediaTypeOCIManifest && d.MediaType != mediaTypeDockerManifest &&
		d.MediaType != mediaTypeOCIIndex && d.MediaType != mediaTypeDockerList {
		return fmt.Errorf("%s has media type %q, not an image manifest or index", d.Digest, d.MediaType)
	}
	b, ok := a.small[d.Digest]
	if !ok {
		return fmt.Errorf("manifest %s is not in the file", d.Digest)
	}
	var m manifestOrIndex
	if err := json.Unmarshal(b, &m); err != nil {
		return fmt.Errorf("manifest %s: %w", d.Digest, err)
	}
	l := map[string]string{}
	if d.MediaType == mediaTypeOCIIndex || d.MediaType == mediaTypeDockerList {
		complete := 0
		var firstErr error
		for i, child := range m.Manifests {
			l[fmt.Sprintf("%sm.%d", labelGCRefContent, i)] = child.Digest
			// An index may list platforms the file does not carry.
			if err := c.walk(ctx, lease, a, child, labels); err != nil {
				if firstErr == nil {
					firstErr = err
				}
				continue
			}
			complete++
		}
		if complete == 0 {
			return fmt.Errorf("index %s: none of its %d manifests is complete in the file: %v", d.Digest, len(m.Manifests), firstErr)
		}
		labels[d.Digest] = l
		return nil
	}
	if m.Config == nil {
		return fmt.Errorf("manifest %s has no config", d.Digest)
	}
	var missing []string
	need := append([]descriptor{*m.Config}, m.Layers...)
	for i, n := range need {
		if i == 0 {
			l[labelGCRefContent+"config"] = n.Digest
		} else {
			l[fmt.Sprintf("%sl.%d", labelGCRefContent, i-1)] = n.Digest
		}
		if _, ok := a.blobs[n.Digest]; ok {
			continue
		}
		has, err := c.hasBlob(ctx, lease, n.Digest)
		if err != nil {
			return err
		}
		if !has {
			missing = append(missing, n.Digest)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("manifest %s needs blobs that are neither in the file nor in containerd: %s", d.Digest, strings.Join(missing, ", "))
	}
	if _, ok := a.small[m.Config.Digest]; ok {
		var cfg struct {
			RootFS struct {
				DiffIDs []string `json:"diff_ids"`
			} `json:"rootfs"`
		}
		if err := json.Unmarshal(a.small[m.Config.Digest], &cfg); err != nil {
			return fmt.Errorf("config %s: %w", m.Config.Digest, err)
		}
		if len(cfg.RootFS.DiffIDs) != len(m.Layers) {
			return fmt.Errorf("config %s lists %d diff_ids for the %d layers of manifest %s",
				m.Config.Digest, len(cfg.RootFS.DiffIDs), len(m.Layers), d.Digest)
		}
	}
	labels[d.Digest] = l
	return nil
}
