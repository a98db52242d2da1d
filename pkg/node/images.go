package node

import (
	"context"
	"errors"
	"os"
	"strings"
	"time"

	"k8s.io/klog/v2"

	"github.com/edgeplane/edgeplane/pkg/airgap"
)

// containerdNamespace is where the CRI plugin keeps Kubernetes' images.
const containerdNamespace = "k8s.io"

// Images imports the image tarballs of the airgap directory into the
// container runtime before the kubelet starts, so that an edge box with no
// registry runs pods: the sandbox (pause) image among them.
type Images struct {
	// Dir is <data-dir>/agent/images.
	Dir string
	// RuntimeEndpoint is the CRI socket, unix:///... Importing needs
	// containerd's own API, which listens on the same socket.
	RuntimeEndpoint string
	// Pinned are image names the runtime's image GC must keep (the sandbox
	// image).
	Pinned []string
}

// Name implements the bootstrap component contract.
func (i *Images) Name() string { return "images" }

// Start imports what is new in Dir. A file that cannot be imported is
// logged and skipped; a runtime that cannot import at all fails the start.
func (i *Images) Start(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithName("images")
	entries, err := os.ReadDir(i.Dir)
	if errors.Is(err, os.ErrNotExist) || (err == nil && len(entries) == 0) {
		logger.V(1).Info("No airgap images to import", "dir", i.Dir)
		return nil
	}
	if err != nil {
		return err
	}
	if !strings.HasPrefix(i.RuntimeEndpoint, "unix://") {
		logger.Info("Airgap images are imported into containerd only; skipping", "runtime", i.RuntimeEndpoint, "dir", i.Dir)
		return nil
	}
	begin := time.Now()
	res, err := airgap.Import(ctx, airgap.Options{
		Address:   strings.TrimPrefix(i.RuntimeEndpoint, "unix://"),
		Namespace: containerdNamespace,
		Dir:       i.Dir,
		Pinned:    i.Pinned,
	})
	if err != nil && len(res.Imported) == 0 && len(res.Skipped) == 0 {
		return err
	}
	if err != nil {
		logger.Error(err, "Some airgap images were not imported", "dir", i.Dir)
	}
	logger.Info("Imported airgap images", "dir", i.Dir, "images", res.Images(), "new", len(res.Imported), "unchanged", len(res.Skipped),
		"duration", time.Since(begin).Round(time.Millisecond))
	return nil
}

// Ready is immediate: Start imported the images.
func (i *Images) Ready(context.Context) error { return nil }

// Stop has nothing to stop.
func (i *Images) Stop(context.Context) error { return nil }
