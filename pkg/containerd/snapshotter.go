package containerd

import (
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// Snapshotters the generated configuration chooses between.
const (
	SnapshotterOverlay = "overlayfs"
	SnapshotterNative  = "native"
)

// chooseSnapshotter is overlayfs when an overlay mount works with its
// upper and work directories on the filesystem of dir (containerd's root),
// else native, which copies layers and works on any filesystem. It probes
// as containerd's own overlay check does: it mounts an overlay of empty
// directories made under dir and unmounts it. The reason says why.
func chooseSnapshotter(dir string) (name, reason string) {
	if err := probeOverlay(dir); err != nil {
		return SnapshotterNative, fmt.Sprintf("overlay does not work on %s: %v", dir, err)
	}
	return SnapshotterOverlay, "an overlay mount works on " + dir
}

func probeOverlay(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(dir, ".overlay-probe-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	lower, upper, work, merged := filepath.Join(tmp, "lower"), filepath.Join(tmp, "upper"), filepath.Join(tmp, "work"), filepath.Join(tmp, "merged")
	for _, d := range []string{lower, upper, work, merged} {
		if err := os.Mkdir(d, 0o700); err != nil {
			return err
		}
	}
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", lower, upper, work)
	if err := unix.Mount("overlay", merged, "overlay", 0, opts); err != nil {
		return fmt.Errorf("mount overlay: %w", err)
	}
	if err := unix.Unmount(merged, 0); err != nil {
		return fmt.Errorf("unmount the overlay probe %s: %w", merged, err)
	}
	return nil
}
