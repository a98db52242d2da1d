package e2e

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
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
//
// The kubelet mounts through mount(8) children, and one started just before
// the server was killed outlives it by a moment and mounts after a first
// look at the mounts (seen: "TempDir RemoveAll cleanup: unlinkat
// .../volumes/kubernetes.io~projected/kube-api-access-...: device or
// resource busy" on a loaded host). So the cleanup first waits for the
// processes whose command line names dir to end, then unmounts until no
// mount under dir is left.
func unmountUnder(t *testing.T, dir string) {
	t.Helper()
	t.Cleanup(func() {
		deadline := time.Now().Add(time.Minute)
		for procs := processesNaming(dir); len(procs) > 0; procs = processesNaming(dir) {
			if time.Now().After(deadline) {
				t.Logf("unmounting under %s with these processes still running: %v", dir, procs)
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		for round := 0; ; round++ {
			points, err := mountsUnder(dir)
			if err != nil {
				t.Errorf("read mountinfo: %v", err)
				return
			}
			if len(points) == 0 {
				return
			}
			if round == 10 {
				t.Errorf("still mounted under %s after 10 rounds of unmounting: %v", dir, points)
				return
			}
			for _, p := range points {
				if err := syscall.Unmount(p, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) {
					t.Errorf("unmount %s: %v", p, err)
				}
			}
		}
	})
}

// mountsUnder lists the mount points at or below dir, deepest first.
func mountsUnder(dir string) ([]string, error) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	var points []string
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && under(f[4], dir) {
			points = append(points, f[4])
		}
	}
	sort.Sort(sort.Reverse(sort.StringSlice(points)))
	return points, nil
}

// under reports whether path is dir or below it.
func under(path, dir string) bool {
	return path == dir || strings.HasPrefix(path, dir+"/")
}

// processesNaming lists the processes (pid and command) whose command line
// has an argument that is dir or a path below it.
func processesNaming(dir string) []string {
	entries, _ := os.ReadDir("/proc")
	var found []string
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue // gone meanwhile
		}
		args := strings.Split(string(cmdline), "\x00")
		for _, a := range args {
			_, value, _ := strings.Cut(a, "=") // --data-dir=DIR
			if under(a, dir) || under(value, dir) {
				found = append(found, fmt.Sprintf("%d %s", pid, strings.Join(args, " ")))
				break
			}
		}
	}
	return found
}
