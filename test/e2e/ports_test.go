package e2e

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"sync"
	"testing"
)

// Ports that tests choose before a process binds them (etcd's, a kubelet's,
// PostgreSQL's) come from fixedPorts, outside the kernel's ephemeral range
// (net.ipv4.ip_local_port_range, 32768-60999 by default): the kernel hands
// ports of that range to every bind to port 0 and every outgoing
// connection, so with tests running side by side a port found free there
// could be taken by another test's server before the process meant to bind
// it does, or while a test restarts that process on the same port. Below
// the NodePort range (30000-32767) and well above upstream's fixed ports
// (10250-10259). Each port is handed out once per run.
var fixedPorts = struct {
	lo, hi int
}{20000, 30000}

var (
	portMu   sync.Mutex
	portNext = os.Getpid() * 7919 // where this run starts in fixedPorts
	portOK   *bool                // fixedPorts lie outside the ephemeral range
)

// freePort returns a port that was free on every address a moment ago and
// that no other test of this run gets.
func freePort(t *testing.T) string {
	t.Helper()
	portMu.Lock()
	defer portMu.Unlock()
	if portOK == nil {
		ok := outsideEphemeral(fixedPorts.lo, fixedPorts.hi)
		portOK = &ok
	}
	if *portOK {
		n := fixedPorts.hi - fixedPorts.lo
		for range n {
			p := fixedPorts.lo + portNext%n
			portNext++
			if l, err := net.Listen("tcp", ":"+strconv.Itoa(p)); err == nil {
				_ = l.Close()
				return strconv.Itoa(p)
			}
		}
	}
	// A host whose ephemeral range covers fixedPorts: the kernel's choice.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}

// outsideEphemeral reports whether ports lo to hi-1 are outside the
// kernel's ephemeral port range.
func outsideEphemeral(lo, hi int) bool {
	data, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return false
	}
	var first, last int
	if _, err := fmt.Sscan(string(data), &first, &last); err != nil {
		return false
	}
	return hi <= first || lo > last
}
