package conformance

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/edgeplane/edgeplane/internal/testing/testimage"
)

// writeTestImage writes a one-file image named name into dir.
func writeTestImage(t *testing.T, dir, name, body string) {
	t.Helper()
	r := NewRootfs()
	r.File("hello", 0o644, []byte(body))
	if _, err := Write(dir, Image{Name: name, Root: r, Cmd: []string{"/hello"}}); err != nil {
		t.Fatal(err)
	}
}

func get(t *testing.T, method, url string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:])
}

// TestRegistry pulls an image the way containerd pulls from a mirror: the
// manifest by tag with the upstream host in ?ns=, then its config and
// layer by digest, each as the digest says.
func TestRegistry(t *testing.T) {
	dir := t.TempDir()
	writeTestImage(t, dir, "registry.k8s.io/e2e-test-images/hello:1.0", "k8s")
	writeTestImage(t, dir, "docker.io/library/hello:1.0", "hub")
	reg, err := NewRegistry(dir)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(reg)
	defer srv.Close()

	if resp, _ := get(t, "GET", srv.URL+"/v2/"); resp.StatusCode != 200 || resp.Header.Get("Docker-Distribution-API-Version") != "registry/2.0" {
		t.Fatalf("/v2/: %s %v", resp.Status, resp.Header)
	}
	for _, tc := range []struct{ ns, repo, want string }{
		{"registry.k8s.io", "e2e-test-images/hello", "k8s"},
		{"docker.io", "library/hello", "hub"},
		{"", "library/hello", "hub"}, // no ns: docker.io, as a client of docker.io itself asks
	} {
		url := srv.URL + "/v2/" + tc.repo + "/manifests/1.0"
		if tc.ns != "" {
			url += "?ns=" + tc.ns
		}
		head, _ := get(t, "HEAD", url)
		resp, body := get(t, "GET", url)
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != testimage.MediaTypeManifest {
			t.Fatalf("%s: %s %q", url, resp.Status, resp.Header.Get("Content-Type"))
		}
		if d := resp.Header.Get("Docker-Content-Digest"); d != sha(body) || head.Header.Get("Docker-Content-Digest") != d {
			t.Fatalf("%s: digest header %q (HEAD %q), body %s", url, d, head.Header.Get("Docker-Content-Digest"), sha(body))
		}
		var m struct {
			Config testimage.Descriptor
			Layers []testimage.Descriptor
		}
		if err := json.Unmarshal(body, &m); err != nil {
			t.Fatal(err)
		}
		for _, d := range append(m.Layers, m.Config) {
			resp, blob := get(t, "GET", srv.URL+"/v2/"+tc.repo+"/blobs/"+d.Digest+"?ns="+tc.ns)
			if resp.StatusCode != 200 || sha(blob) != d.Digest || int64(len(blob)) != d.Size {
				t.Fatalf("blob %s: %s, %d bytes with digest %s", d.Digest, resp.Status, len(blob), sha(blob))
			}
		}
		// By digest too, as containerd asks once it has resolved the tag.
		if resp, b := get(t, "GET", srv.URL+"/v2/"+tc.repo+"/manifests/"+sha(body)); resp.StatusCode != 200 || sha(b) != sha(body) {
			t.Fatalf("manifest by digest: %s", resp.Status)
		}
	}
	for _, tc := range []struct {
		method, path string
		code         int
	}{
		{"GET", "/v2/e2e-test-images/hello/manifests/2.0?ns=registry.k8s.io", 404},
		{"GET", "/v2/e2e-test-images/hello/manifests/1.0?ns=quay.io", 404},
		{"GET", "/v2/library/hello/blobs/sha256:" + strings.Repeat("0", 64), 404},
		{"PUT", "/v2/library/hello/manifests/1.0", 405},
		{"POST", "/v2/library/hello/blobs/uploads/", 405},
	} {
		if resp, _ := get(t, tc.method, srv.URL+tc.path); resp.StatusCode != tc.code {
			t.Errorf("%s %s: %s, want %d", tc.method, tc.path, resp.Status, tc.code)
		}
	}
}

// TestRegistryRefusesCorruptBlob: a tarball whose blob does not match its
// digest is refused when the registry starts, not served.
func TestRegistryRefusesCorruptBlob(t *testing.T) {
	dir := t.TempDir()
	writeTestImage(t, dir, "docker.io/library/hello:1.0", "hub")
	path := filepath.Join(dir, testimage.FileName("docker.io/library/hello:1.0"))
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	i := strings.Index(string(b), "/hello\"") // in the config blob
	if i < 0 {
		t.Fatal("config not found in the tarball")
	}
	b[i+1] = 'j'
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := NewRegistry(dir); err == nil || !strings.Contains(err.Error(), "has digest") {
		t.Fatalf("NewRegistry on a corrupt blob: %v", err)
	}
}

func TestWriteHostsDir(t *testing.T) {
	dir := t.TempDir()
	if err := WriteHostsDir(dir, "10.0.0.1:5000"); err != nil {
		t.Fatal(err)
	}
	for _, h := range MirrorHosts {
		b, err := os.ReadFile(filepath.Join(dir, h, "hosts.toml"))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), `server = "http://10.0.0.1:5000"`) || !strings.Contains(string(b), `[host."http://10.0.0.1:5000"]`) || !strings.Contains(string(b), `capabilities = ["pull", "resolve"]`) {
			t.Errorf("%s/hosts.toml:\n%s", h, b)
		}
	}
}
