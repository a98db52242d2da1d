package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
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
