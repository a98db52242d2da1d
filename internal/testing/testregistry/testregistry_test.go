package testregistry

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/edgeplane/edgeplane/internal/testing/testimage"
)

// TestBasicAuth: with Username set, a request without credentials or with
// a wrong password gets 401 and a Basic challenge; the right ones get the
// manifest. (test/conformance's TestRegistry covers the pull API.)
func TestBasicAuth(t *testing.T) {
	dir := t.TempDir()
	img := testimage.Busybox()
	img.Name = "docker.io/library/hello:1.0"
	if _, err := testimage.Write(dir, img); err != nil {
		t.Fatal(err)
	}
	reg, err := New(dir)
	if err != nil {
		t.Fatal(err)
	}
	reg.Username, reg.Password = "edge", "right"
	srv := httptest.NewServer(reg)
	defer srv.Close()
	for _, tc := range []struct {
		name       string
		user, pass string
		code       int
	}{
		{"no credentials", "", "", http.StatusUnauthorized},
		{"wrong password", "edge", "wrong", http.StatusUnauthorized},
		{"wrong user", "other", "right", http.StatusUnauthorized},
		{"right", "edge", "right", http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequest("GET", srv.URL+"/v2/library/hello/manifests/1.0?ns=docker.io", nil)
			if err != nil {
				t.Fatal(err)
			}
			if tc.user != "" {
				req.SetBasicAuth(tc.user, tc.pass)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tc.code {
				t.Fatalf("%s, want %d", resp.Status, tc.code)
			}
			if tc.code == http.StatusUnauthorized && resp.Header.Get("WWW-Authenticate") != `Basic realm="testregistry"` {
				t.Errorf("WWW-Authenticate %q, want a Basic challenge", resp.Header.Get("WWW-Authenticate"))
			}
		})
	}
}
