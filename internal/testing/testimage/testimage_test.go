package testimage

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/edgeplane/edgeplane/internal/testing/testenv"
	"k8s.io/apimachinery/pkg/util/wait"
)

func TestWrite(t *testing.T) {
	_, err := os.Stat(DefaultBusyboxPath)
	testenv.Require(t, "busybox-static (apt-get install busybox-static)", err)
	tests := []struct {
		name       string
		img        Image
		entrypoint []string
	}{
		{"busybox", Busybox(), []string{"/bin/sh"}},
		{"pause", Pause(), []string{"/bin/sh", "-c", PauseScript}},
		{"renamed", Image{Name: "example.com/x/y:1", Cmd: []string{"true"}}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			path, err := Write(dir, tt.img)
			if err != nil {
				t.Fatal(err)
			}
			first, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			path2, err := Write(t.TempDir(), tt.img)
			if err != nil {
				t.Fatal(err)
			}
			second, err := os.ReadFile(path2)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(first, second) {
				t.Errorf("two builds of %s differ: the output is not deterministic", tt.img.Name)
			}

			files := readTar(t, bytes.NewReader(first))
			if got := string(files["oci-layout"]); got != `{"imageLayoutVersion":"1.0.0"}` {
				t.Errorf("oci-layout = %q", got)
			}
			var index struct {
				Manifests []Descriptor `json:"manifests"`
			}
			mustJSON(t, files["index.json"], &index)
			if len(index.Manifests) != 1 {
				t.Fatalf("index.json has %d manifests, want 1", len(index.Manifests))
			}
			md := index.Manifests[0]
			if md.Annotations[AnnotationContainerName] != tt.img.Name {
				t.Errorf("index annotation %s = %q, want %q", AnnotationContainerName, md.Annotations[AnnotationContainerName], tt.img.Name)
			}
			if !strings.HasSuffix(tt.img.Name, ":"+md.Annotations[AnnotationRefName]) {
				t.Errorf("index annotation %s = %q, not the tag of %q", AnnotationRefName, md.Annotations[AnnotationRefName], tt.img.Name)
			}
			var manifest struct {
				Config Descriptor   `json:"config"`
				Layers []Descriptor `json:"layers"`
			}
			mustJSON(t, blob(t, files, md), &manifest)
			var config struct {
				Architecture string `json:"architecture"`
				OS           string `json:"os"`
				Config       struct {
					Entrypoint []string `json:"Entrypoint"`
					Cmd        []string `json:"Cmd"`
				} `json:"config"`
				RootFS struct {
					DiffIDs []string `json:"diff_ids"`
				} `json:"rootfs"`
			}
			mustJSON(t, blob(t, files, manifest.Config), &config)
			if config.Architecture != runtime.GOARCH || config.OS != "linux" {
				t.Errorf("platform %s/%s, want linux/%s", config.OS, config.Architecture, runtime.GOARCH)
			}
			if !slices.Equal(config.Config.Entrypoint, tt.entrypoint) || !slices.Equal(config.Config.Cmd, tt.img.Cmd) {
				t.Errorf("entrypoint %q cmd %q, want %q %q", config.Config.Entrypoint, config.Config.Cmd, tt.entrypoint, tt.img.Cmd)
			}
			if len(manifest.Layers) != 1 || manifest.Layers[0].MediaType != MediaTypeLayerGz {
				t.Fatalf("layers %+v, want one gzip layer", manifest.Layers)
			}
			zr, err := gzip.NewReader(bytes.NewReader(blob(t, files, manifest.Layers[0])))
			if err != nil {
				t.Fatal(err)
			}
			layer, err := io.ReadAll(zr)
			if err != nil {
				t.Fatal(err)
			}
			if len(config.RootFS.DiffIDs) != 1 || config.RootFS.DiffIDs[0] != digestOf(layer) {
				t.Errorf("diff_ids %q, want [%s] (the uncompressed layer's digest)", config.RootFS.DiffIDs, digestOf(layer))
			}
			entries := readHeaders(t, bytes.NewReader(layer))
			if h := entries["bin/busybox"]; h == nil || h.Typeflag != tar.TypeReg || h.Mode&0o111 == 0 {
				t.Errorf("layer has no executable bin/busybox: %+v", h)
			}
			for _, a := range []string{"sh", "sleep", "wget", "nc", "nslookup", "httpd", "hostname", "ip"} {
				if h := entries["bin/"+a]; h == nil || h.Typeflag != tar.TypeSymlink || h.Linkname != "busybox" {
					t.Errorf("layer has no bin/%s link to busybox: %+v", a, h)
				}
			}
		})
	}
}

func TestBuildErrors(t *testing.T) {
	_, err := Build(Image{BusyboxPath: "/nonexistent/busybox"})
	if err == nil {
		t.Fatal("Build of an image without name, command or busybox succeeded")
	}
	for _, want := range []string{"no Name", "neither Entrypoint nor Cmd", "/nonexistent/busybox"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}

// TestPauseScript runs the pause image's command with the host's busybox:
// it must keep running, and exit 0 on SIGTERM and on SIGINT.
func TestPauseScript(t *testing.T) {
	_, err := os.Stat(DefaultBusyboxPath)
	testenv.Require(t, "busybox-static (apt-get install busybox-static)", err)
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) {
			cmd := exec.Command(DefaultBusyboxPath, "sh", "-c", PauseScript)
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
			// The trap is set once the shell has started its sleep child.
			children := "/proc/" + itoa(cmd.Process.Pid) + "/task/" + itoa(cmd.Process.Pid) + "/children"
			err := wait.PollUntilContextTimeout(t.Context(), 20*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
				b, err := os.ReadFile(children)
				return err == nil && len(bytes.TrimSpace(b)) > 0, nil
			})
			if err != nil {
				t.Fatalf("the pause command started no sleep: %v", err)
			}
			if err := cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("pause command exited with %v on %s, want 0", err, sig)
				}
			case <-time.After(30 * time.Second):
				t.Fatalf("pause command still runs 30 s after %s", sig)
			}
		})
	}
}

func readTar(t *testing.T, r io.Reader) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		out[h.Name] = b
	}
}

func readHeaders(t *testing.T, r io.Reader) map[string]*tar.Header {
	t.Helper()
	out := map[string]*tar.Header{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out[h.Name] = h
	}
}

func blob(t *testing.T, files map[string][]byte, d Descriptor) []byte {
	t.Helper()
	b, ok := files["blobs/sha256/"+strings.TrimPrefix(d.Digest, "sha256:")]
	if !ok {
		t.Fatalf("blob %s missing from the tarball", d.Digest)
	}
	if digestOf(b) != d.Digest || int64(len(b)) != d.Size {
		t.Fatalf("blob %s has digest %s and size %d, want size %d", d.Digest, digestOf(b), len(b), d.Size)
	}
	return b
}

func mustJSON(t *testing.T, b []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

// TestFiles: an image's extra files land in its layer at their paths, with
// their mode and content (the in-cluster client of the network tests).
func TestFiles(t *testing.T) {
	_, err := os.Stat(DefaultBusyboxPath)
	testenv.Require(t, "busybox-static (apt-get install busybox-static)", err)
	img := Busybox()
	img.Files = []File{{Path: "bin/incluster", Mode: 0o755, Body: []byte("#!/bin/sh\necho hi\n")}}
	l, err := Build(img)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := l.WriteTar(&buf); err != nil {
		t.Fatal(err)
	}
	files := readTar(t, &buf)
	var index struct {
		Manifests []Descriptor `json:"manifests"`
	}
	mustJSON(t, files["index.json"], &index)
	var manifest struct {
		Layers []Descriptor `json:"layers"`
	}
	mustJSON(t, blob(t, files, index.Manifests[0]), &manifest)
	zr, err := gzip.NewReader(bytes.NewReader(blob(t, files, manifest.Layers[0])))
	if err != nil {
		t.Fatal(err)
	}
	layer, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	hdrs := readHeaders(t, bytes.NewReader(layer))
	h, ok := hdrs["bin/incluster"]
	if !ok || h.Mode != 0o755 {
		t.Fatalf("bin/incluster header %+v (present %v), want mode 0755", h, ok)
	}
	if got := readTar(t, bytes.NewReader(layer))["bin/incluster"]; string(got) != "#!/bin/sh\necho hi\n" {
		t.Errorf("bin/incluster = %q", got)
	}
}
