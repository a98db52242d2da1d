package netpol

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"sigs.k8s.io/knftables"

	"github.com/edgeplane/edgeplane/internal/testing/testenv"
)

// testNet is a node made of network namespaces the test creates:
//
//	node ns:  bridge br0 10.244.0.1/24 with a veth port per local pod,
//	          and a veth rm0 10.245.0.1/24 to the "remote" pod's namespace,
//	          IPv4 forwarding on, bridged IPv4 through the inet hooks;
//	pod ns:   eth0 with the pod's address, default route via the node.
//
// Traffic between a local pod and the remote one is routed by the node
// (the forward hook, as pods on two nodes); between two local pods it is
// bridged (the forward hook only with bridge-nf-call-iptables=1).
type testNet struct {
	t      *testing.T
	prefix string
	node   string // the node's namespace
}

var netSeq struct {
	sync.Mutex
	n int
}

func newTestNet(t *testing.T) *testNet {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.Require(t, "root (network namespaces and nftables)", errors.New("not root"))
	}
	for _, tool := range []string{"ip", "nft", "nsenter"} {
		if _, err := exec.LookPath(tool); err != nil {
			testenv.Require(t, tool+" (apt-get install iproute2 nftables util-linux)", err)
		}
	}
	netSeq.Lock()
	netSeq.n++
	prefix := fmt.Sprintf("np%d-%d", os.Getpid(), netSeq.n)
	netSeq.Unlock()
	n := &testNet{t: t, prefix: prefix, node: prefix + "-node"}
	n.addNetns(n.node)
	n.ip("-n", n.node, "link", "set", "lo", "up")
	n.ip("-n", n.node, "link", "add", "br0", "type", "bridge")
	n.ip("-n", n.node, "addr", "add", "10.244.0.1/24", "dev", "br0")
	n.ip("-n", n.node, "link", "set", "br0", "up")
	n.ip("-n", n.node, "link", "add", "rm0", "type", "veth", "peer", "name", "eth0", "netns", n.ns("remote"))
	n.ip("-n", n.node, "addr", "add", "10.245.0.1/24", "dev", "rm0")
	n.ip("-n", n.node, "link", "set", "rm0", "up")
	n.podSide("remote", "10.245.0.2/24", "10.245.0.1")
	if err := inNetns(n.node, func() error {
		if err := os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte("1\n"), 0o644); err != nil {
			return err
		}
		return EnableBridgeNetfilter()
	}); err != nil {
		t.Fatalf("node namespace sysctls: %v", err)
	}
	return n
}

// ns returns the namespace name of a pod, creating it the first time.
func (n *testNet) ns(pod string) string {
	name := n.prefix + "-" + pod
	if _, err := os.Stat("/run/netns/" + name); err != nil {
		n.addNetns(name)
	}
	return name
}

func (n *testNet) addNetns(name string) {
	n.ip("netns", "add", name)
	n.t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
			n.t.Errorf("ip netns del %s: %v: %s", name, err, out)
		}
	})
}

// addLocalPod plugs a pod namespace into the bridge with address ip (/24).
func (n *testNet) addLocalPod(pod, ip string) {
	port := "v" + pod
	n.ip("-n", n.node, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", n.ns(pod))
	n.ip("-n", n.node, "link", "set", port, "master", "br0")
	n.ip("-n", n.node, "link", "set", port, "up")
	n.podSide(pod, ip+"/24", "10.244.0.1")
}

func (n *testNet) podSide(pod, cidr, gw string) {
	ns := n.ns(pod)
	n.ip("-n", ns, "link", "set", "lo", "up")
	n.ip("-n", ns, "addr", "add", cidr, "dev", "eth0")
	n.ip("-n", ns, "link", "set", "eth0", "up")
	n.ip("-n", ns, "route", "add", "default", "via", gw)
}

func (n *testNet) ip(args ...string) {
	n.t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		n.t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// nft is a knftables.Interface for the node namespace's table: the real nft
// command run through `nsenter --net` by a wrapper knftables finds first on
// the PATH (knftables runs "nft" from the PATH).
func (n *testNet) nft() knftables.Interface {
	n.t.Helper()
	nftPath, err := exec.LookPath("nft")
	if err != nil {
		n.t.Fatal(err)
	}
	dir := n.t.TempDir()
	script := fmt.Sprintf("#!/bin/sh\nexec nsenter --net=/run/netns/%s -- %s \"$@\"\n", n.node, nftPath)
	if err := os.WriteFile(filepath.Join(dir, "nft"), []byte(script), 0o755); err != nil {
		n.t.Fatal(err)
	}
	n.t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	nft, err := knftables.New(knftables.InetFamily, TableName)
	if err != nil {
		n.t.Fatal(err)
	}
	return nft
}

// listTable prints the table as nft sees it, for failure messages.
func (n *testNet) listTable() string {
	out, err := exec.Command("nsenter", "--net=/run/netns/"+n.node, "--", "nft", "list", "table", "inet", TableName).CombinedOutput()
	if err != nil {
		return fmt.Sprintf("(nft list table: %v: %s)", err, out)
	}
	return string(out)
}

// listTableHandles prints the table with rule handles: a rewrite of the
// table gives every rule a new handle.
func (n *testNet) listTableHandles() string {
	out, err := exec.Command("nsenter", "--net=/run/netns/"+n.node, "--", "nft", "-a", "list", "table", "inet", TableName).CombinedOutput()
	if err != nil {
		n.t.Fatalf("nft -a list table: %v: %s", err, out)
	}
	return string(out)
}

// inNetns runs f on an OS thread moved into the named network namespace;
// sockets f opens stay in it. The thread goes back to its namespace after
// f, or is retired with the goroutine if it cannot.
func inNetns(name string, f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer orig.Close()
		target, err := os.Open("/run/netns/" + name)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("setns %s: %w", name, err)
			return
		}
		ferr := f()
		if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- errors.Join(ferr, fmt.Errorf("setns back: %w", err)) // thread stays locked and exits
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

// serve listens on TCP port in the pod's namespace and answers each
// connection with the pod's name, until the test ends.
func (n *testNet) serve(pod string, port int) {
	n.t.Helper()
	var l net.Listener
	if err := inNetns(n.ns(pod), func() error {
		var err error
		l, err = net.Listen("tcp", fmt.Sprintf(":%d", port))
		return err
	}); err != nil {
		n.t.Fatalf("listen in %s: %v", pod, err)
	}
	var wg sync.WaitGroup
	n.t.Cleanup(func() { _ = l.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_ = c.SetDeadline(time.Now().Add(2 * time.Second))
			_, _ = io.WriteString(c, pod)
			_ = c.Close()
		}
	})
}

// dialTimeout bounds a connection attempt: a dropped SYN shows as a
// timeout, an allowed connection on these links answers in well under it.
const dialTimeout = 700 * time.Millisecond

// reach reports whether a TCP connection from the namespace ns to addr gets
// the answer want (the serving pod's name).
func reach(ns, addr, want string) (bool, error) {
	var got []byte
	err := inNetns(ns, func() error {
		c, err := net.DialTimeout("tcp", addr, dialTimeout)
		if err != nil {
			return err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(dialTimeout))
		got, err = io.ReadAll(c)
		return err
	})
	var ne net.Error
	switch {
	case err == nil:
		if string(got) != want {
			return false, fmt.Errorf("%s answered %q, want %q", addr, got, want)
		}
		return true, nil
	case errors.As(err, &ne) && ne.Timeout():
		return false, nil
	default:
		return false, err
	}
}
