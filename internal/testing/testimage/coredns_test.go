package testimage

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestCoreDNS builds the CoreDNS test binary, checks that it has the
// packaged Corefile's plugins, and that its image holds it as the
// entrypoint. The first build compiles CoreDNS (minutes); later ones come
// from the build cache.
func TestCoreDNS(t *testing.T) {
	if testing.Short() {
		t.Skip("builds CoreDNS")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	bin, took, err := BuildCoreDNS(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(bin)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("CoreDNS built in %s, %.1f MB", took.Round(time.Millisecond), float64(st.Size())/1e6)
	out, err := exec.CommandContext(ctx, bin, "-plugins").CombinedOutput()
	if err != nil {
		t.Fatalf("coredns -plugins: %v\n%s", err, out)
	}
	plugins := strings.Fields(string(out))
	for _, p := range []string{"kubernetes", "forward", "cache", "health", "ready", "loop", "reload", "errors", "loadbalance"} {
		if !slices.Contains(plugins, p) {
			t.Errorf("plugin %s missing from:\n%s", p, out)
		}
	}

	img, err := CoreDNS(bin)
	if err != nil {
		t.Fatal(err)
	}
	l, err := Build(img)
	if err != nil {
		t.Fatal(err)
	}
	var layer []byte
	for _, b := range l.Blobs {
		if len(b) > 2 && b[0] == 0x1f && b[1] == 0x8b {
			layer = b
		}
	}
	zr, err := gzip.NewReader(bytes.NewReader(layer))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	found := false
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Name == "coredns" {
			found = h.Size == st.Size() && h.Mode == 0o755
		}
	}
	if !found {
		t.Error("the layer has no coredns of the binary's size, mode 0755")
	}
	t.Logf("CoreDNS image layer %.1f MB gzipped", float64(len(layer))/1e6)
}
