// Package build builds edgeplane's pause image from source: the pause
// program (pkg/pauseimage/pause) compiled for one architecture, wrapped into
// an OCI image-layout tarball, byte for byte the same on every run with the
// same Go toolchain. The go:generate program of pkg/pauseimage writes the
// tarballs with it, and pkg/pauseimage's test rebuilds them with it to
// check the committed ones.
//
// What makes the output reproducible:
//   - the program is built in a temporary module of its own (a fixed
//     go.mod), so edgeplane's go.mod (its go line, which sets the default
//     GODEBUG the build info records) and its VCS state do not enter;
//   - CGO_ENABLED=0, -trimpath, -buildvcs=false, -ldflags "-s -w -buildid=",
//     GOAMD64=v1 / GOARM=7 set explicitly, GOFLAGS and GOEXPERIMENT
//     cleared, GOTOOLCHAIN=local;
//   - fixed modification times, owners and modes in both tarballs, sorted
//     entries, a gzip header without name or time.
//
// What remains is the Go toolchain: its version string is in the build
// info and runtime.buildVersion of the program, and its compiler, linker,
// standard library and compress/flate make the rest. GoVersion reports it.
package build

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
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// Name is the pause image's name: pkg/pauseimage.Name, the default
// --pause-image. Its registry host is under .invalid, a top-level domain
// that RFC 2606 reserves and RFC 6761 says never resolves: no registry can
// ever serve this name, and no one can register the domain to serve a
// different image under it, so a node that lost the image fails to pull it
// rather than running someone else's. The tag is the pause program's
// version (its -v).
const Name = "edgeplane.invalid/pause:1"

// Arches are the architectures edgeplane ships, GOARCH values.
var Arches = []string{"amd64", "arm64", "arm"}

// epoch is every time in the image (tar entries, the config's created).
var epoch = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

const (
	mediaTypeIndex    = "application/vnd.oci.image.index.v1+json"
	mediaTypeManifest = "application/vnd.oci.image.manifest.v1+json"
	mediaTypeConfig   = "application/vnd.oci.image.config.v1+json"
	mediaTypeLayerGz  = "application/vnd.oci.image.layer.v1.tar+gzip"
)

// goMod is the temporary module the program is built in.
const goMod = "module edgeplane.invalid/pause\n\ngo 1.26\n"

// SourceDir is the pause program's directory relative to pkg/pauseimage.
const SourceDir = "pause"

// GoVersion is the version of the go command Program uses (go env GOVERSION).
func GoVersion() (string, error) {
	out, err := exec.Command("go", "env", "GOVERSION").Output()
	if err != nil {
		return "", fmt.Errorf("pauseimage build: go env GOVERSION: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

// Program compiles the pause program whose main.go is in srcDir for goarch
// and returns the executable.
func Program(srcDir, goarch string) ([]byte, error) {
	src, err := os.ReadFile(filepath.Join(srcDir, "main.go"))
	if err != nil {
		return nil, fmt.Errorf("pauseimage build: %w", err)
	}
	tmp, err := os.MkdirTemp("", "pausebuild")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	if err := os.WriteFile(filepath.Join(tmp, "go.mod"), []byte(goMod), 0o644); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(tmp, "main.go"), src, 0o644); err != nil {
		return nil, err
	}
	out := filepath.Join(tmp, "pause")
	cmd := exec.Command("go", "build", "-trimpath", "-buildvcs=false", "-ldflags=-s -w -buildid=", "-o", out, ".")
	cmd.Dir = tmp
	cmd.Env = append(os.Environ(),
		"CGO_ENABLED=0", "GOOS=linux", "GOARCH="+goarch, "GOAMD64=v1", "GOARM=7",
		"GOFLAGS=", "GOEXPERIMENT=", "GOTOOLCHAIN=local", "GOWORK=off")
	if b, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("pauseimage build: go build for %s: %w\n%s", goarch, err, b)
	}
	return os.ReadFile(out)
}

// Image wraps the pause executable into an OCI image-layout tarball whose
// index names the image name (io.containerd.image.name and
// org.opencontainers.image.ref.name), for linux/goarch.
func Image(name, goarch string, program []byte) ([]byte, error) {
	var layerTar bytes.Buffer
	tw := tar.NewWriter(&layerTar)
	if err := writeFile(tw, "pause", 0o755, program); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	var layerGz bytes.Buffer
	zw, err := gzip.NewWriterLevel(&layerGz, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	if _, err := zw.Write(layerTar.Bytes()); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}

	blobs := map[string][]byte{}
	add := func(mediaType string, b []byte) map[string]any {
		d := digest(b)
		blobs[d] = b
		return map[string]any{"mediaType": mediaType, "digest": d, "size": len(b)}
	}
	layer := add(mediaTypeLayerGz, layerGz.Bytes())
	platform := map[string]any{"architecture": goarch, "os": "linux"}
	if goarch == "arm" {
		platform["variant"] = "v7"
	}
	config := map[string]any{
		"created": epoch.Format(time.RFC3339),
		"os":      "linux",
		"config": map[string]any{
			"Entrypoint": []string{"/pause"},
			"WorkingDir": "/",
		},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{digest(layerTar.Bytes())}},
	}
	for k, v := range platform {
		config[k] = v
	}
	configJSON, err := json.Marshal(config)
	if err != nil {
		return nil, err
	}
	manifestJSON, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     mediaTypeManifest,
		"config":        add(mediaTypeConfig, configJSON),
		"layers":        []any{layer},
	})
	if err != nil {
		return nil, err
	}
	manifest := add(mediaTypeManifest, manifestJSON)
	manifest["platform"] = platform
	manifest["annotations"] = map[string]string{
		"io.containerd.image.name":          name,
		"org.opencontainers.image.ref.name": name,
	}
	indexJSON, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     mediaTypeIndex,
		"manifests":     []any{manifest},
	})
	if err != nil {
		return nil, err
	}

	var out bytes.Buffer
	tw = tar.NewWriter(&out)
	if err := writeFile(tw, "oci-layout", 0o644, []byte(`{"imageLayoutVersion":"1.0.0"}`)); err != nil {
		return nil, err
	}
	if err := writeFile(tw, "index.json", 0o644, indexJSON); err != nil {
		return nil, err
	}
	for _, d := range []string{"blobs/", "blobs/sha256/"} {
		if err := tw.WriteHeader(header(tar.TypeDir, d, 0o755, 0)); err != nil {
			return nil, err
		}
	}
	digests := make([]string, 0, len(blobs))
	for d := range blobs {
		digests = append(digests, d)
	}
	sort.Strings(digests)
	for _, d := range digests {
		if err := writeFile(tw, "blobs/sha256/"+strings.TrimPrefix(d, "sha256:"), 0o644, blobs[d]); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// Tarball builds the pause image tarball for goarch from the program in
// srcDir.
func Tarball(srcDir, name, goarch string) ([]byte, error) {
	program, err := Program(srcDir, goarch)
	if err != nil {
		return nil, err
	}
	return Image(name, goarch, program)
}

// FileName is the tarball's file name in pkg/pauseimage for goarch.
func FileName(goarch string) string { return "pause_" + goarch + ".tar" }

func header(typ byte, name string, mode, size int64) *tar.Header {
	return &tar.Header{Typeflag: typ, Name: name, Mode: mode, Size: size, ModTime: epoch,
		Uname: "root", Gname: "root", Format: tar.FormatPAX}
}

func writeFile(tw *tar.Writer, name string, mode int64, body []byte) error {
	if err := tw.WriteHeader(header(tar.TypeReg, name, mode, int64(len(body)))); err != nil {
		return err
	}
	_, err := io.Copy(tw, bytes.NewReader(body))
	return err
}

func digest(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}
