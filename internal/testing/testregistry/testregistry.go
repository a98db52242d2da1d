// Package testregistry is a read-only OCI distribution registry for tests
// (the pull side of the distribution spec), serving the images of OCI
// layout tarballs such as internal/testing/testimage writes, optionally
// behind HTTP basic authentication. Containerd reaches it as a mirror
// (hosts.toml): a mirror request carries the upstream registry in ?ns=, so
// every image keeps its upstream name.
package testregistry

import (
	"archive/tar"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/edgeplane/edgeplane/internal/testing/testimage"
)

// Registry serves the images of OCI layout tarballs. A mirror request
// carries the upstream host in ?ns=:
// /v2/e2e-test-images/agnhost/manifests/2.66.1?ns=registry.k8s.io is
// registry.k8s.io/e2e-test-images/agnhost:2.66.1; without ?ns= the name is
// docker.io's.
type Registry struct {
	// Username and Password, when Username is set, are the only
	// credentials the registry accepts (HTTP basic authentication); other
	// requests get 401 with a Basic challenge, as a private registry
	// answers. Set them before serving.
	Username, Password string

	// manifests maps an image name to its manifest descriptor.
	manifests map[string]testimage.Descriptor
	// blobs maps a digest to where its bytes are.
	blobs map[string]blobAt
}

type blobAt struct {
	file   string
	offset int64
	size   int64
}

// New indexes the OCI layout tarballs (*.tar) of dir; every blob's digest
// is checked.
func New(dir string) (*Registry, error) {
	r := &Registry{manifests: map[string]testimage.Descriptor{}, blobs: map[string]blobAt{}}
	files, err := filepath.Glob(filepath.Join(dir, "*.tar"))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("registry: no image tarball in %s", dir)
	}
	for _, f := range files {
		if err := r.index(f); err != nil {
			return nil, fmt.Errorf("registry: %s: %w", f, err)
		}
	}
	return r, nil
}

// countingReader tells how far a reader has read.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

func (r *Registry) index(file string) error {
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	cr := &countingReader{r: f}
	tr := tar.NewReader(cr)
	var index []byte
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		offset := cr.n
		switch {
		case h.Name == "index.json":
			if index, err = io.ReadAll(tr); err != nil {
				return err
			}
		case strings.HasPrefix(h.Name, "blobs/sha256/"):
			sum := sha256.New()
			if _, err := io.Copy(sum, tr); err != nil {
				return err
			}
			want := strings.TrimPrefix(h.Name, "blobs/sha256/")
			if got := hex.EncodeToString(sum.Sum(nil)); got != want {
				return fmt.Errorf("blob %s has digest %s", want, got)
			}
			r.blobs["sha256:"+want] = blobAt{file: file, offset: offset, size: h.Size}
		}
	}
	var idx struct {
		Manifests []testimage.Descriptor `json:"manifests"`
	}
	if err := json.Unmarshal(index, &idx); err != nil {
		return fmt.Errorf("index.json: %w", err)
	}
	for _, m := range idx.Manifests {
		name := m.Annotations[testimage.AnnotationContainerName]
		if name == "" {
			return fmt.Errorf("index.json: a manifest without %s", testimage.AnnotationContainerName)
		}
		r.manifests[name] = testimage.Descriptor{MediaType: m.MediaType, Digest: m.Digest, Size: m.Size}
	}
	return nil
}

// Images are the image names r serves.
func (r *Registry) Images() []string {
	var out []string
	for n := range r.manifests {
		out = append(out, n)
	}
	return out
}

// ServeHTTP answers the pull side of the distribution API.
func (r *Registry) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodGet && req.Method != http.MethodHead {
		http.Error(w, "read-only registry", http.StatusMethodNotAllowed)
		return
	}
	w.Header().Set("Docker-Distribution-API-Version", "registry/2.0")
	if r.Username != "" {
		user, pass, ok := req.BasicAuth()
		if !ok || subtle.ConstantTimeCompare([]byte(user), []byte(r.Username)) != 1 || subtle.ConstantTimeCompare([]byte(pass), []byte(r.Password)) != 1 {
			w.Header().Set("WWW-Authenticate", `Basic realm="testregistry"`)
			errorJSON(w, http.StatusUnauthorized, "UNAUTHORIZED", "authentication required")
			return
		}
	}
	p := req.URL.Path
	if p == "/v2/" || p == "/v2" {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, "{}")
		return
	}
	rest, ok := strings.CutPrefix(p, "/v2/")
	if !ok {
		http.NotFound(w, req)
		return
	}
	var repo, ref, kind string
	for _, k := range []string{"/manifests/", "/blobs/"} {
		if i := strings.LastIndex(rest, k); i > 0 {
			repo, ref, kind = rest[:i], rest[i+len(k):], strings.Trim(k, "/")
			break
		}
	}
	if kind == "" {
		http.NotFound(w, req)
		return
	}
	var desc testimage.Descriptor
	if strings.HasPrefix(ref, "sha256:") {
		b, ok := r.blobs[ref]
		if !ok {
			errorJSON(w, http.StatusNotFound, "BLOB_UNKNOWN", ref)
			return
		}
		desc = testimage.Descriptor{Digest: ref, Size: b.size, MediaType: "application/octet-stream"}
		if kind == "manifests" {
			desc.MediaType = testimage.MediaTypeManifest
		}
	} else {
		ns := req.URL.Query().Get("ns")
		if ns == "" {
			ns = "docker.io"
		}
		name := ns + "/" + repo + ":" + ref
		m, ok := r.manifests[name]
		if !ok || kind != "manifests" {
			errorJSON(w, http.StatusNotFound, "MANIFEST_UNKNOWN", name)
			return
		}
		desc = m
	}
	b := r.blobs[desc.Digest]
	f, err := os.Open(b.file)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	defer f.Close()
	w.Header().Set("Content-Type", desc.MediaType)
	w.Header().Set("Docker-Content-Digest", desc.Digest)
	w.Header().Set("Content-Length", strconv.FormatInt(b.size, 10))
	w.WriteHeader(http.StatusOK)
	if req.Method == http.MethodGet {
		_, _ = io.Copy(w, io.NewSectionReader(f, b.offset, b.size))
	}
}

func errorJSON(w http.ResponseWriter, code int, what, detail string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]any{"errors": []map[string]string{{"code": what, "message": detail}}})
}

// Serve serves r on addr (host:port; port 0 picks one) until the listener
// is closed; it returns the listener.
func (r *Registry) Serve(addr string) (net.Listener, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	go func() { _ = http.Serve(l, r) }()
	return l, nil
}
