package localstorage

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/api/resource"
)

// Modes of what a node makes. A volume's directory is 0777, as k3s's
// local-path-provisioner makes it: a pod that runs as any user can write
// there (with fsGroup the kubelet also gives the directory to the pod's
// group). The storage path above it is 0700: it keeps the host's other
// users out of those open directories; the kubelet, as root, bind-mounts
// each into its pods.
const (
	volumeDirMode = 0o777
	storageMode   = 0o700
)

// ensureDir makes dir and, when missing, its parent (the storage path).
// An existing directory is left as it is: the kubelet may have changed its
// group and mode for a pod's fsGroup.
func ensureDir(dir string) error {
	if fi, err := os.Stat(dir); err == nil {
		if !fi.IsDir() {
			return fmt.Errorf("%s is not a directory", dir)
		}
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(dir), storageMode); err != nil {
		return err
	}
	if err := os.Mkdir(dir, volumeDirMode); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	return os.Chmod(dir, volumeDirMode) // the umask took bits off
}

// writable is nil when this process may write in dir.
func writable(dir string) error {
	if err := unix.Access(dir, unix.W_OK); err != nil {
		return &os.PathError{Op: "access", Path: dir, Err: err}
	}
	return nil
}

// freeBytes is the space an unprivileged writer has left on dir's
// filesystem (a pod may run as any user: root's reserve is not counted).
func freeBytes(dir string) (uint64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, &os.PathError{Op: "statfs", Path: dir, Err: err}
	}
	return st.Bavail * uint64(st.Bsize), nil
}

// noSpace reports whether err says the disk (or the quota) is full.
func noSpace(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

// spaceShortage says how the free space falls short of the claim's
// request, or "" when it does not.
func spaceShortage(dir string, free uint64, request resource.Quantity) string {
	want := request.Value()
	if want <= 0 || free >= uint64(want) {
		return ""
	}
	if free == 0 {
		return fmt.Sprintf("the disk holding %s is full (the claim asks for %s): writes to the volume fail until space is freed", dir, request.String())
	}
	return fmt.Sprintf("the disk holding %s has %s free, less than the %s the claim asks for: writes to the volume fail once it is full",
		dir, humanBytes(free), request.String())
}

// humanBytes is n in the largest binary unit that keeps it at 1 or more,
// to one decimal.
func humanBytes(n uint64) string {
	const units = "KMGTPE"
	if n < 1024 {
		return fmt.Sprintf("%d B", n)
	}
	v, i := float64(n)/1024, 0
	for v >= 1024 && i < len(units)-1 {
		v, i = v/1024, i+1
	}
	return fmt.Sprintf("%.1f %ciB", v, units[i])
}
