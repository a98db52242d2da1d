package netpol

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
)

// bridgeSysctls make the kernel pass IPv4 and IPv6 frames that a bridge
// forwards between two of its ports (two pods on one node) through the
// inet hooks, where the table filters them. They are per network
// namespace, and exist once the br_netfilter module is loaded.
var bridgeSysctls = []string{
	"/proc/sys/net/bridge/bridge-nf-call-iptables",
	"/proc/sys/net/bridge/bridge-nf-call-ip6tables",
}

// EnableBridgeNetfilter sets the bridge sysctls to 1 in this process's
// network namespace, loading br_netfilter with modprobe if they are not
// there yet.
func EnableBridgeNetfilter() error {
	if _, err := os.Stat(bridgeSysctls[0]); errors.Is(err, fs.ErrNotExist) {
		if out, err := exec.Command("modprobe", "br_netfilter").CombinedOutput(); err != nil {
			return fmt.Errorf("%s is missing and `modprobe br_netfilter` failed (%v: %s): load the br_netfilter module at boot (echo br_netfilter > /etc/modules-load.d/edgeplane.conf)",
				filepath.Dir(bridgeSysctls[0]), err, out)
		}
	}
	var errs []error
	for _, p := range bridgeSysctls {
		if err := os.WriteFile(p, []byte("1\n"), 0o644); err != nil {
			errs = append(errs, fmt.Errorf("set %s to 1: %w", p, err))
		}
	}
	return errors.Join(errs...)
}
