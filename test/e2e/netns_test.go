package e2e

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
)

var (
	testLinkMu   sync.Mutex
	testLinkNext = os.Getpid() % 200
)

// testNodeIP gives a kubelet a node address the test owns: a veth pair whose
// far end is in a network namespace the test creates, and whose near end,
// on the host, holds the returned address. The kubelet refuses loopback
// node addresses, and the API server dials a kubelet at its node address
// (for logs, exec and port-forward); with this, that traffic stays on
// links the test made instead of going to the host's own address.
func testNodeIP(t *testing.T) string {
	t.Helper()
	testLinkMu.Lock()
	n := testLinkNext % 250
	testLinkNext++
	testLinkMu.Unlock()
	ns := fmt.Sprintf("ep-e2e-%d-%d", os.Getpid(), n)
	host, peer := fmt.Sprintf("epv%dh%d", os.Getpid()%10000, n), fmt.Sprintf("epv%dp%d", os.Getpid()%10000, n)
	hostIP, peerIP := fmt.Sprintf("10.201.%d.1", n), fmt.Sprintf("10.201.%d.2", n)
	ipCmd(t, "netns", "add", ns)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	ipCmd(t, "link", "add", host, "type", "veth", "peer", "name", peer, "netns", ns)
	ipCmd(t, "addr", "add", hostIP+"/30", "dev", host)
	ipCmd(t, "link", "set", host, "up")
	ipCmd(t, "-n", ns, "addr", "add", peerIP+"/30", "dev", peer)
	ipCmd(t, "-n", ns, "link", "set", peer, "up")
	return hostIP
}

func ipCmd(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// unmountUnder registers a cleanup that unmounts what a kubelet left mounted
// under dir (its root dir is a bind mount of itself, and pods' volumes are
// tmpfs mounts), deepest first, so that t.TempDir's removal works. Register
// it before starting the process, so that it runs after the process ends.
func unmountUnder(t *testing.T, dir string) {
	t.Helper()
	t.Cleanup(func() {
		data, err := os.ReadFile("/proc/self/mountinfo")
		if err != nil {
			t.Errorf("read mountinfo: %v", err)
			return
		}
		var points []string
		for _, line := range strings.Split(string(data), "\n") {
			f := strings.Fields(line)
			if len(f) > 4 && (f[4] == dir || strings.HasPrefix(f[4], dir+"/")) {
				points = append(points, f[4])
			}
		}
		sort.Sort(sort.Reverse(sort.StringSlice(points)))
		for _, p := range points {
			if err := syscall.Unmount(p, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) {
				t.Errorf("unmount %s: %v", p, err)
			}
		}
	})
}
