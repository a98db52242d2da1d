package criruntime

import (
	"errors"
	"fmt"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// CgroupMode is how the host mounts its cgroups.
type CgroupMode string

const (
	// CgroupV2 is the unified hierarchy alone (cgroup2 on /sys/fs/cgroup).
	CgroupV2 CgroupMode = "v2 (unified)"
	// CgroupHybrid is cgroup v1 controllers with a cgroup2 mount beside
	// them (systemd's hybrid layout, as Debian 10 and these test hosts).
	CgroupHybrid CgroupMode = "v1 (hybrid)"
	// CgroupV1 is cgroup v1 only.
	CgroupV1 CgroupMode = "v1 (legacy)"
)

// V2 reports whether the kubelet sees cgroup v2: only the unified mode
// counts, as for upstream's check (a hybrid host is v1 to it).
func (m CgroupMode) V2() bool { return m == CgroupV2 }

// KubeletSupport says whether this kubelet runs on the mode, and how.
func (m CgroupMode) KubeletSupport() string {
	if m.V2() {
		return "supported"
	}
	return "supported with failCgroupV1: false, which edgeplane sets on such hosts; upstream deprecated cgroup v1: boot with systemd.unified_cgroup_hierarchy=1 for v2"
}

// HostCgroups tells the host's cgroup mode from the filesystem mounted at
// root ("" means /sys/fs/cgroup), the way the kubelet's cgroup library does:
// cgroup2 there is v2; a tmpfs there is v1, hybrid when a cgroup2 is
// mounted at root/unified.
func HostCgroups(root string) (CgroupMode, error) {
	if root == "" {
		root = "/sys/fs/cgroup"
	}
	var st unix.Statfs_t
	if err := unix.Statfs(root, &st); err != nil {
		return "", fmt.Errorf("cgroup version unknown: statfs %s: %w", root, err)
	}
	switch int64(st.Type) {
	case unix.CGROUP2_SUPER_MAGIC:
		return CgroupV2, nil
	case unix.TMPFS_MAGIC:
	default:
		return "", fmt.Errorf("cgroup version unknown: %s is neither a cgroup2 nor a tmpfs mount (filesystem type %#x): mount the cgroup filesystems (the init system does it at boot)", root, st.Type)
	}
	var unified unix.Statfs_t
	err := unix.Statfs(filepath.Join(root, "unified"), &unified)
	switch {
	case err == nil && int64(unified.Type) == unix.CGROUP2_SUPER_MAGIC:
		return CgroupHybrid, nil
	case err == nil, errors.Is(err, unix.ENOENT):
		return CgroupV1, nil
	default:
		return "", fmt.Errorf("cgroup version unknown: statfs %s: %w", filepath.Join(root, "unified"), err)
	}
}
