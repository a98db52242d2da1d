// Package testimage builds container images for tests, with no registry and
// no tool but Go: OCI image-layout tarballs (the format `ctr images import`
// and pkg/airgap take) around the host's static busybox (Debian's
// busybox-static, /bin/busybox).
//
// Two images are predefined: Busybox, a workload whose entrypoint is sh, and
// Pause, a pod sandbox image that sleeps until SIGTERM or SIGINT. Output is
// deterministic (fixed modification times, fixed gzip header, sorted
// entries), so the same busybox binary always gives the same digests.
//
//	path, err := testimage.Write(t.TempDir(), testimage.Busybox())
package testimage

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

const (
	// DefaultBusyboxName is the name of the Busybox image.
	DefaultBusyboxName = "docker.io/edgeplane/busybox:test"
	// DefaultPauseName is the name of the Pause image.
	DefaultPauseName = "docker.io/edgeplane/pause:test"
	// DefaultBusyboxPath is where Debian's busybox-static installs busybox.
	DefaultBusyboxPath = "/bin/busybox"
)

// Media types and annotations of the OCI image spec and containerd.
const (
	MediaTypeIndex    = "application/vnd.oci.image.index.v1+json"
	MediaTypeManifest = "application/vnd.oci.image.manifest.v1+json"
	MediaTypeConfig   = "application/vnd.oci.image.config.v1+json"
	MediaTypeLayerGz  = "application/vnd.oci.image.layer.v1.tar+gzip"

	AnnotationRefName       = "org.opencontainers.image.ref.name"
	AnnotationContainerName = "io.containerd.image.name"
)

// Applets are the busybox applets linked into bin/ of every image.
var Applets = []string{
	"sh", "ash", "sleep", "wget", "nc", "nslookup", "httpd", "hostname", "cat", "echo", "ls", "ps", "ip",
	"ifconfig", "ping", "env", "true", "false", "test", "[", "mkdir", "rm", "cp", "mv", "grep", "sed", "awk",
	"head", "tail", "wc", "id", "kill", "date", "uname", "mount", "df", "du", "touch", "printf", "seq",
	"timeout", "route", "netstat", "tr", "cut", "sort", "find", "xargs", "yes", "tee", "dd", "stat",
	"readlink", "ln", "chmod", "basename", "dirname", "pwd", "whoami", "top", "free", "uptime", "vi",
}

// epoch is the modification time of every entry and the creation time of
// every image, so the output is the same on every run.
var epoch = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

// Image describes one image to build.
type Image struct {
	// Name is the full reference, e.g. docker.io/edgeplane/busybox:test.
	Name string
	// Entrypoint and Cmd go into the image config.
	Entrypoint []string
	Cmd        []string
	// Env goes into the image config; empty means PATH only.
	Env []string
	// BusyboxPath is the static busybox binary to put in; empty means
	// DefaultBusyboxPath.
	BusyboxPath string
	// Files are put into the layer besides busybox (e.g. a server binary).
	Files []File
}

// File is a regular file of an image's layer.
type File struct {
	// Path is relative to the root, e.g. "coredns" or "bin/x".
	Path string
	Mode int64
	Body []byte
}

// Busybox is the workload image: busybox with sh as its entrypoint.
func Busybox() Image {
	return Image{Name: DefaultBusyboxName, Entrypoint: []string{"/bin/sh"}}
}

// PauseScript is the sandbox's command: it sleeps for ever and exits 0 on
// SIGTERM or SIGINT (a shell waiting on a child wakes for a trapped signal).
const PauseScript = `trap "exit 0" TERM INT; while :; do sleep 3600 & wait $!; done`

// Pause is the pod sandbox ("pause") image.
func Pause() Image {
	return Image{Name: DefaultPauseName, Entrypoint: []string{"/bin/sh", "-c", PauseScript}}
}

// Descriptor is an OCI content descriptor.
type Descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
	Platform    *Platform         `json:"platform,omitempty"`
}

// Platform is the platform of a manifest in an index.
type Platform struct {
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
}

// Layout is a built image: every blob by digest, and index.json.
type Layout struct {
	// Manifest is the descriptor of the image manifest (what the image
	// name points at once imported).
	Manifest Descriptor
	// Config is the descriptor of the image config; its digest is the
	// image ID that CRI reports.
	Config Descriptor
	// Blobs holds every blob by digest ("sha256:...").
	Blobs map[string][]byte
	// Index is the content of index.json.
	Index []byte
}

// Write builds img and writes it as an OCI layout tarball into dir, named
// after the image (e.g. docker.io_edgeplane_busybox_test.tar). It returns
// the file's path.
func Write(dir string, img Image) (string, error) {
	l, err := Build(img)
	if err != nil {
		return "", err
	}
	var buf bytes.Buffer
	if err := l.WriteTar(&buf); err != nil {
		return "", err
	}
	path := filepath.Join(dir, FileName(img.Name))
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		return "", fmt.Errorf("testimage: write %s: %w", path, err)
	}
	return path, nil
}

// FileName is the tarball's file name for an image name.
func FileName(name string) string {
	return strings.NewReplacer("/", "_", ":", "_", "@", "_").Replace(name) + ".tar"
}

// Build builds img in memory.
func Build(img Image) (*Layout, error) {
	var errs []error
	if img.Name == "" {
		errs = append(errs, errors.New("testimage: the image has no Name"))
	}
	if len(img.Entrypoint) == 0 && len(img.Cmd) == 0 {
		errs = append(errs, fmt.Errorf("testimage: image %q has neither Entrypoint nor Cmd", img.Name))
	}
	bbPath := img.BusyboxPath
	if bbPath == "" {
		bbPath = DefaultBusyboxPath
	}
	busybox, err := os.ReadFile(bbPath)
	if err != nil {
		errs = append(errs, fmt.Errorf("testimage: read busybox: %w (install busybox-static, or set Image.BusyboxPath)", err))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}

	layerTar, err := rootfs(busybox, img.Files)
	if err != nil {
		return nil, err
	}
	var gz bytes.Buffer
	zw, err := gzip.NewWriterLevel(&gz, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	if _, err := zw.Write(layerTar); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}

	l := &Layout{Blobs: map[string][]byte{}}
	layer := l.add(MediaTypeLayerGz, gz.Bytes())

	env := img.Env
	if len(env) == 0 {
		env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	}
	config := map[string]any{
		"created":      epoch.Format(time.RFC3339),
		"architecture": runtime.GOARCH,
		"os":           "linux",
		"config": map[string]any{
			"Env":        env,
			"Entrypoint": img.Entrypoint,
			"Cmd":        img.Cmd,
			"WorkingDir": "/",
		},
		"rootfs": map[string]any{
			"type":     "layers",
			"diff_ids": []string{digestOf(layerTar)},
		},
		"history": []map[string]any{{"created": epoch.Format(time.RFC3339), "created_by": "edgeplane internal/testing/testimage"}},
	}
	configJSON, err := json.Marshal(config)
	if err != nil {
		return nil, err
	}
	l.Config = l.add(MediaTypeConfig, configJSON)

	manifestJSON, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     MediaTypeManifest,
		"config":        l.Config,
		"layers":        []Descriptor{layer},
	})
	if err != nil {
		return nil, err
	}
	l.Manifest = l.add(MediaTypeManifest, manifestJSON)

	inIndex := l.Manifest
	inIndex.Annotations = map[string]string{
		AnnotationContainerName: img.Name,
		AnnotationRefName:       refName(img.Name),
	}
	inIndex.Platform = &Platform{Architecture: runtime.GOARCH, OS: "linux"}
	l.Index, err = json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     MediaTypeIndex,
		"manifests":     []Descriptor{inIndex},
	})
	if err != nil {
		return nil, err
	}
	return l, nil
}

// refName is the OCI ref.name annotation: the tag of a tagged name, the
// whole name otherwise.
func refName(name string) string {
	if i := strings.LastIndex(name, ":"); i > strings.LastIndex(name, "/") {
		return name[i+1:]
	}
	return name
}

func (l *Layout) add(mediaType string, b []byte) Descriptor {
	d := digestOf(b)
	l.Blobs[d] = b
	return Descriptor{MediaType: mediaType, Digest: d, Size: int64(len(b))}
}

func digestOf(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}
