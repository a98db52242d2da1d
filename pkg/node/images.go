package node

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"k8s.io/klog/v2"

	"github.com/edgeplane/edgeplane/pkg/airgap"
	"github.com/edgeplane/edgeplane/pkg/criruntime"
	"github.com/edgeplane/edgeplane/pkg/pauseimage"
)

// containerdNamespace is where the CRI plugin keeps Kubernetes' images.
const containerdNamespace = "k8s.io"

// Images imports the image tarballs of the airgap directory into the
// container runtime before the kubelet starts, so that an edge box with no
// registry runs pods, and the pause image embedded in edgeplane when it is
// the sandbox image.
type Images struct {
	// Dir is <data-dir>/agent/images.
	Dir string
	// RuntimeEndpoint is the CRI socket, unix:///... Importing needs
	// containerd's own API, which listens on the same socket.
	RuntimeEndpoint string
	// Pinned are image names the runtime's image GC must keep (the sandbox
	// image).
	Pinned []string
	// PauseDir, when set, is where the pause image embedded in edgeplane
	// (pkg/pauseimage) is written to be imported at start and again every
	// PauseCheck while the node runs if it is gone: the kubelet's image GC
	// keeps only images the runtime reports pinned, which containerd 1.6
	// does not do, so on a node with no pod it may remove the sandbox
	// image, and no registry serves it. Empty when --pause-image names
	// another image.
	PauseDir string
	// PauseCheck is how often the embedded pause image is looked for;
	// zero means defaultPauseCheck.
	PauseCheck time.Duration

	stop context.CancelFunc
	done chan struct{}
}

// defaultPauseCheck is how often a running node looks for the embedded
// pause image: a lookup of one image record in containerd.
const defaultPauseCheck = time.Minute

// Name implements the bootstrap component contract.
func (i *Images) Name() string { return "images" }

// Start imports what is new in Dir. A file that cannot be imported is
// logged and skipped; a runtime that cannot import at all fails the start.
func (i *Images) Start(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithName("images")
	if i.PauseDir != "" {
		if err := i.startPause(ctx, logger); err != nil {
			return err
		}
	}
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

// startPause imports the embedded pause image and starts looking for it
// every PauseCheck.
func (i *Images) startPause(ctx context.Context, logger klog.Logger) error {
	if !strings.HasPrefix(i.RuntimeEndpoint, "unix://") {
		logger.Info("The embedded pause image is imported into containerd only; skipping", "runtime", i.RuntimeEndpoint)
		return nil
	}
	address := strings.TrimPrefix(i.RuntimeEndpoint, "unix://")
	if _, err := pauseimage.Import(ctx, address, i.PauseDir); err != nil {
		return fmt.Errorf("images: the sandbox image %s: %w", pauseimage.Name, err)
	}
	logger.V(1).Info("Embedded pause image in place", "image", pauseimage.Name)
	every := i.PauseCheck
	if every <= 0 {
		every = defaultPauseCheck
	}
	loopCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	i.stop, i.done = cancel, make(chan struct{})
	go func() {
		defer close(i.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-loopCtx.Done():
				return
			case <-t.C:
			}
			imported, err := pauseimage.Import(loopCtx, address, i.PauseDir)
			switch {
			case err != nil && loopCtx.Err() == nil:
				logger.Error(err, "Looking for the embedded pause image", "image", pauseimage.Name)
			case imported:
				logger.Info("Imported the embedded pause image again: it was gone from the runtime (image garbage collection)", "image", pauseimage.Name)
			}
		}
	}()
	return nil
}

// Ready is immediate: Start imported the images.
func (i *Images) Ready(context.Context) error { return nil }

// Stop ends the look-out for the embedded pause image.
func (i *Images) Stop(ctx context.Context) error {
	if i.stop == nil {
		return nil
	}
	i.stop()
	select {
	case <-i.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// images is the node's Images part.
func (n *Node) images(ctx context.Context) *Images {
	return imagesPart(ctx, n.cfg.Settings, n.paths, n.cfg.Runtime)
}

// imagesPart imports the airgap directory, pinning the sandbox image: the
// --pause-image, and the one the runtime says it is configured with when
// that is another (a host containerd's sandbox_image, which is what its
// pods use; a warning says so). It imports the embedded pause image when
// either is its name.
func imagesPart(ctx context.Context, s Settings, p Paths, rt *criruntime.Runtime) *Images {
	i := &Images{Dir: p.Images, RuntimeEndpoint: rt.Endpoint, Pinned: []string{s.PauseImage}}
	want, _ := airgap.NormalizeName(s.PauseImage)
	sandbox := want
	if rt.SandboxImage != "" {
		if name, err := airgap.NormalizeName(rt.SandboxImage); err == nil && name != want {
			sandbox = name
			i.Pinned = append(i.Pinned, name)
			klog.FromContext(ctx).Info("The container runtime's sandbox image is not --pause-image: its pods use the runtime's, pinned when it comes from the airgap directory; "+
				"set the runtime's (containerd: sandbox_image) to --pause-image, or pass --pause-image with the runtime's",
				"runtime", rt.Endpoint, "runtimeSandboxImage", name, "pauseImage", s.PauseImage)
		}
	}
	if want == pauseimage.Name || sandbox == pauseimage.Name {
		i.PauseDir = p.PauseImage
	}
	return i
}
