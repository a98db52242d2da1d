// Package pauseimage is the pod sandbox ("pause") image inside edgeplane:
// a minimal static program (./pause) in an OCI image-layout tarball for the
// architecture edgeplane is built for, embedded in the binary and imported
// into containerd when a node starts, under Name, the default
// --pause-image. No node pulls a sandbox image, online or offline.
//
// The tarballs (pause_<goarch>.tar) are generated from source by `go
// generate ./pkg/pauseimage` and committed, so that `go build` needs no
// step before it; TestCommittedTarballs rebuilds them and fails when a
// committed one differs. Only the target architecture's tarball is in a
// build (file-name build constraints of pause_<goarch>.go).
package pauseimage

//go:generate go run ./internal/gen

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"

	"github.com/edgeplane/edgeplane/pkg/airgap"
	"github.com/edgeplane/edgeplane/pkg/pauseimage/internal/build"
)

// Name is the embedded image's name (see build.Name for why it is under
// .invalid).
const Name = build.Name

// Available reports whether this build embeds a pause image (it does for
// amd64, arm64 and arm).
func Available() bool { return len(tarball) > 0 }

// Tarball is the embedded OCI image-layout tarball, nil when this
// architecture has none.
func Tarball() []byte { return tarball }

// FileName is the tarball's name where Import writes it.
const FileName = "edgeplane-pause.tar"

// Import imports the embedded image into the containerd at address (a
// socket path or unix://path) under Name, pinned. dir is a directory of
// the node's own (<data-dir>/agent/pause-image) where the tarball is
// written for pkg/airgap, which keeps its record of the import beside it:
// a call when the image is still in containerd costs one image lookup; a
// call when it is gone (image GC removed it: containerd 1.6 does not keep
// the sandbox image from the kubelet's image GC) imports it again. It
// returns whether it imported.
func Import(ctx context.Context, address, dir string) (bool, error) {
	if !Available() {
		return false, fmt.Errorf("pauseimage: this edgeplane build (%s) embeds no pause image: pass --pause-image with an image in the airgap directory", runtime.GOARCH)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return false, fmt.Errorf("pauseimage: %w", err)
	}
	path := filepath.Join(dir, FileName)
	if old, err := os.ReadFile(path); err != nil || !bytes.Equal(old, tarball) {
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return false, fmt.Errorf("pauseimage: %w", err)
		}
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, tarball, 0o600); err != nil {
			return false, fmt.Errorf("pauseimage: %w", err)
		}
		if err := os.Rename(tmp, path); err != nil {
			return false, fmt.Errorf("pauseimage: %w", err)
		}
	}
	res, err := airgap.Import(ctx, airgap.Options{Address: address, Dir: dir, Pinned: []string{Name}})
	if err != nil {
		return false, fmt.Errorf("pauseimage: import %s: %w", Name, err)
	}
	return len(res.Imported) > 0, nil
}
