package airgap_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	contentapi "github.com/containerd/containerd/api/services/content/v1"
	imagesapi "github.com/containerd/containerd/api/services/images/v1"
	leasesapi "github.com/containerd/containerd/api/services/leases/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	remote "k8s.io/cri-client/pkg"
	"k8s.io/klog/v2/ktesting"

	"github.com/edgeplane/edgeplane/internal/testing/testcontainerd"
	"github.com/edgeplane/edgeplane/internal/testing/testimage"
	"github.com/edgeplane/edgeplane/pkg/airgap"
)

// TestImport imports good and bad tarballs into a private containerd and
// checks the result through CRI and containerd's own API, then imports
// again.
func TestImport(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctd := testcontainerd.Start(t, testcontainerd.Options{})
	dir := filepath.Join(t.TempDir(), "images")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	busybox := build(t, testimage.Busybox())
	pause := build(t, testimage.Pause())
	shortName := testimage.Busybox()
	shortName.Name = "edgeplane/short"
	short := build(t, shortName)
	noConfig := build(t, testimage.Image{Name: "docker.io/edgeplane/noconfig:1", Cmd: []string{"no-config"}})
	tagOnly := build(t, testimage.Image{Name: "tagonly:v1", Cmd: []string{"true"}})
	var tagOnlyIndex map[string]any
	if err := json.Unmarshal(tagOnly.Index, &tagOnlyIndex); err != nil {
		t.Fatal(err)
	}
	delete(tagOnlyIndex["manifests"].([]any)[0].(map[string]any)["annotations"].(map[string]any), testimage.AnnotationContainerName)
	tagOnly.Index, _ = json.Marshal(tagOnlyIndex)

	files := map[string][]byte{
		"busybox.tar":    tarOf(t, busybox),
		"pause.tar.gz":   gz(t, tarOf(t, pause)),
		"short.tgz":      gz(t, tarOf(t, short)),
		"notes.txt":      []byte("not an image: ignored"),
		"garbage.tar":    bytes.Repeat([]byte("not a tarball "), 100),
		"truncated.tgz":  gz(t, tarOf(t, busybox))[:2000],
		"bad-digest.tar": tarOf(t, corrupt(busybox, busybox.Config.Digest)),
		"no-config.tar":  tarOf(t, without(noConfig, noConfig.Config.Digest)),
		"tag-only.tar":   tarOf(t, tagOnly),
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	opts := airgap.Options{Address: ctd.Socket, Dir: dir, Pinned: []string{testimage.DefaultPauseName}}

	res, err := airgap.Import(ctx, opts)
	wantErrs := map[string]string{
		"garbage.tar":    "not a tar file",
		"truncated.tgz":  "unexpected EOF (truncated or corrupt file)",
		"bad-digest.tar": "corrupt file",
		"no-config.tar":  "neither in the file nor in containerd",
		"tag-only.tar":   `only the tag "v1"`,
	}
	if err == nil {
		t.Fatal("Import of a directory with bad tarballs returned no error")
	}
	for file, want := range wantErrs {
		if !strings.Contains(err.Error(), filepath.Join(dir, file)+": ") || !lineWith(err.Error(), file, want) {
			t.Errorf("Import error does not name %s with %q:\n%v", file, want, err)
		}
	}
	if len(res.Failed) != len(wantErrs) {
		t.Errorf("Failed = %q, want the %d bad files", res.Failed, len(wantErrs))
	}
	wantImages := []string{"docker.io/edgeplane/busybox:test", "docker.io/edgeplane/pause:test", "docker.io/edgeplane/short:latest"}
	if got := res.Images(); !slices.Equal(got, wantImages) || len(res.Imported) != 3 {
		t.Fatalf("imported %d files with images %q, want 3 files with %q", len(res.Imported), got, wantImages)
	}

	// CRI finds every name, in the forms the kubelet may use.
	img, err := remote.NewRemoteImageServiceBuilder().WithEndpoint(ctd.Endpoint).WithConnectionTimeout(10 * time.Second).WithUseStreaming(false).Build(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer img.Close(ctx)
	for _, name := range []string{testimage.DefaultBusyboxName, testimage.DefaultPauseName, "edgeplane/short", "docker.io/edgeplane/short:latest"} {
		st, err := img.ImageStatus(ctx, &runtimeapi.ImageSpec{Image: name}, false)
		if err != nil || st.GetImage() == nil {
			t.Errorf("CRI ImageStatus(%s) = %v, %v; want the image", name, st, err)
			continue
		}
		if want := configOf(t, name, busybox, pause, short); st.GetImage().GetId() != want {
			t.Errorf("CRI ImageStatus(%s).Id = %s, want the config digest %s", name, st.GetImage().GetId(), want)
		}
	}

	// containerd's records: CRI labels, the pin on the pause image only
	// (containerd 1.6's CRI does not report pins; 1.7 reads this label),
	// GC references on the manifest, and no lease left.
	conn, err := grpc.NewClient(ctd.Endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	nsCtx := metadata.AppendToOutgoingContext(ctx, "containerd-namespace", airgap.DefaultNamespace)
	for name, pinned := range map[string]bool{testimage.DefaultPauseName: true, testimage.DefaultBusyboxName: false} {
		got, err := imagesapi.NewImagesClient(conn).Get(nsCtx, &imagesapi.GetImageRequest{Name: name})
		if err != nil {
			t.Fatal(err)
		}
		labels := got.GetImage().GetLabels()
		if labels[airgap.LabelCRIImage] != "managed" || (labels[airgap.LabelCRIPinned] == "pinned") != pinned {
			t.Errorf("image %s labels %v, want %s=managed and pinned=%v", name, labels, airgap.LabelCRIImage, pinned)
		}
	}
	info, err := contentapi.NewContentClient(conn).Info(nsCtx, &contentapi.InfoRequest{Digest: busybox.Manifest.Digest})
	if err != nil {
		t.Fatal(err)
	}
	if l := info.GetInfo().GetLabels(); l["containerd.io/gc.ref.content.config"] != busybox.Config.Digest || l["containerd.io/gc.ref.content.l.0"] != layerOf(t, busybox) {
		t.Errorf("manifest labels %v, want GC references to its config and layer", l)
	}
	leases, err := leasesapi.NewLeasesClient(conn).List(nsCtx, &leasesapi.ListRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range leases.GetLeases() {
		if strings.HasPrefix(l.GetID(), "edgeplane-airgap-") {
			t.Errorf("lease %s left after the import", l.GetID())
		}
	}

	// Again: nothing to import; the bad files still fail.
	res, err = airgap.Import(ctx, opts)
	if len(res.Imported) != 0 || len(res.Skipped) != 3 || len(res.Failed) != len(wantErrs) || err == nil {
		t.Errorf("second Import: imported %v, skipped %v, failed %v, err %v; want 3 skipped, the bad files failed", res.Imported, res.Skipped, res.Failed, err)
	}

	// An image removed from containerd is imported again; a touched file
	// with the same content is not.
	if _, err := imagesapi.NewImagesClient(conn).Delete(nsCtx, &imagesapi.DeleteImageRequest{Name: testimage.DefaultBusyboxName, Sync: true}); err != nil {
		t.Fatal(err)
	}
	later := time.Now().Add(time.Minute)
	if err := os.Chtimes(filepath.Join(dir, "short.tgz"), later, later); err != nil {
		t.Fatal(err)
	}
	for bad := range wantErrs {
		if err := os.Remove(filepath.Join(dir, bad)); err != nil {
			t.Fatal(err)
		}
	}
	res, err = airgap.Import(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Imported) != 1 || res.Imported[0].Path != filepath.Join(dir, "busybox.tar") || len(res.Skipped) != 2 {
		t.Errorf("third Import: imported %v, skipped %v; want busybox.tar imported again, the others skipped", res.Imported, res.Skipped)
	}
	if st, err := img.ImageStatus(ctx, &runtimeapi.ImageSpec{Image: testimage.DefaultBusyboxName}, false); err != nil || st.GetImage() == nil {
		t.Errorf("CRI ImageStatus(%s) after re-import = %v, %v", testimage.DefaultBusyboxName, st, err)
	}
}

func TestImportOptions(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	tests := []struct {
		name string
		opts airgap.Options
		want []string
	}{
		{"empty", airgap.Options{}, []string{"Options.Address is empty", "Options.Dir is empty"}},
		{"bad pin", airgap.Options{Address: "/x.sock", Dir: "/x", Pinned: []string{"Bad Name"}}, []string{"Options.Pinned", "Bad Name"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := airgap.Import(ctx, tt.opts)
			for _, w := range tt.want {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Errorf("Import error %v does not say %q", err, w)
				}
			}
		})
	}
	// A missing directory is nothing to import.
	res, err := airgap.Import(ctx, airgap.Options{Address: "/nonexistent.sock", Dir: filepath.Join(t.TempDir(), "none")})
	if err != nil || len(res.Imported)+len(res.Skipped)+len(res.Failed) != 0 {
		t.Errorf("Import of a missing directory = %+v, %v; want nothing", res, err)
	}
}

func TestNormalizeName(t *testing.T) {
	tests := []struct{ in, want string }{
		{"busybox", "docker.io/library/busybox:latest"},
		{"busybox:1.36", "docker.io/library/busybox:1.36"},
		{"edgeplane/pause:test", "docker.io/edgeplane/pause:test"},
		{"registry.k8s.io/pause:3.10", "registry.k8s.io/pause:3.10"},
		{"localhost:5000/x", "localhost:5000/x:latest"},
		{"example.com/x@sha256:" + strings.Repeat("a", 64), "example.com/x@sha256:" + strings.Repeat("a", 64)},
		{"UPPER", ""},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := airgap.NormalizeName(tt.in)
			if got != tt.want || (err != nil) != (tt.want == "") {
				t.Errorf("NormalizeName(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
			}
		})
	}
}

func TestWaitReady(t *testing.T) {
	ctd := testcontainerd.Start(t, testcontainerd.Options{})
	tests := []struct {
		name    string
		address string
		ok      bool
	}{
		{"socket path", ctd.Socket, true},
		{"endpoint", ctd.Endpoint, true},
		{"nothing there", filepath.Join(t.TempDir(), "none.sock"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			v, err := airgap.WaitReady(ctx, tt.address)
			if tt.ok && (err != nil || v == "") {
				t.Errorf("WaitReady(%s) = %q, %v; want containerd's version", tt.address, v, err)
			}
			if !tt.ok && (err == nil || !strings.Contains(err.Error(), "does not answer")) {
				t.Errorf("WaitReady(%s) = %q, %v; want an error saying containerd does not answer", tt.address, v, err)
			}
		})
	}
}

func build(t *testing.T, img testimage.Image) *testimage.Layout {
	t.Helper()
	l, err := testimage.Build(img)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func tarOf(t *testing.T, l *testimage.Layout) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := l.WriteTar(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func gz(t *testing.T, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// corrupt is l with one blob's content changed under the same digest.
func corrupt(l *testimage.Layout, digest string) *testimage.Layout {
	c := *l
	c.Blobs = map[string][]byte{}
	for d, b := range l.Blobs {
		c.Blobs[d] = b
	}
	c.Blobs[digest] = append([]byte(" "), l.Blobs[digest]...)
	return &c
}

// without is l without one blob.
func without(l *testimage.Layout, digest string) *testimage.Layout {
	c := *l
	c.Blobs = map[string][]byte{}
	for d, b := range l.Blobs {
		if d != digest {
			c.Blobs[d] = b
		}
	}
	return &c
}

func layerOf(t *testing.T, l *testimage.Layout) string {
	t.Helper()
	var m struct {
		Layers []testimage.Descriptor `json:"layers"`
	}
	if err := json.Unmarshal(l.Blobs[l.Manifest.Digest], &m); err != nil || len(m.Layers) != 1 {
		t.Fatalf("manifest: %v", err)
	}
	return m.Layers[0].Digest
}

// configOf is the config digest (CRI's image ID) of the image named name.
func configOf(t *testing.T, name string, busybox, pause, short *testimage.Layout) string {
	t.Helper()
	switch {
	case strings.Contains(name, "busybox"):
		return busybox.Config.Digest
	case strings.Contains(name, "pause"):
		return pause.Config.Digest
	default:
		return short.Config.Digest
	}
}

// lineWith reports whether one of the joined errors names file and says want.
func lineWith(err, file, want string) bool {
	for _, line := range strings.Split(err, "\n") {
		if strings.Contains(line, file) && strings.Contains(line, want) {
			return true
		}
	}
	return false
}
