package nodetunnel

import (
	"fmt"
	"net"
	"strconv"
)

// allowed says whether the agent dials addr for a server: the kubelet's
// port on one of this node's own addresses (Local), so that a tunnel never
// becomes a way into the node's network (another host, another port, a
// container's address are refused).
func (a *Agent) allowed(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if port != strconv.Itoa(a.o.KubeletPort) {
		return fmt.Errorf("port %s is not the kubelet's", port)
	}
	ip := net.ParseIP(host)
	if ip == nil {
		return fmt.Errorf("%q is not an IP address", host)
	}
	if !a.o.Local(ip) {
		return fmt.Errorf("%s is not this node's address", ip)
	}
	return nil
}

// hostAddress says whether ip is a node address of this host: assigned to
// one of its interfaces, and not loopback, link-local or multicast (the
// API server never dials a kubelet there).
func hostAddress(ip net.IP) bool {
	if ip.IsLoopback() || ip.IsUnspecified() || ip.IsMulticast() || ip.IsLinkLocalUnicast() {
		return false
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return false
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.Equal(ip) {
			return true
		}
	}
	return false
}
