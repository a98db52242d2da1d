package preflight

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	utilnet "k8s.io/apimachinery/pkg/util/net"
)

// vxlanOverhead is what a VXLAN header costs the pods' MTU (IPv4 outer
// header); minPodMTU is the least a pod network should carry (IPv6's
// minimum link MTU).
const (
	vxlanOverhead = 50
	minPodMTU     = 1280
)

// NetworkFacts are what a node's pod network and Services need from the
// kernel and the host: bridge netfilter, forwarding, a packet filter tool,
// VXLAN, and the MTU of the node address's interface.
type NetworkFacts struct {
	// Disabled: the server runs no node (--disable kubelet).
	Disabled bool
	// BridgeNF is /proc/sys/net/bridge/bridge-nf-call-iptables ("" when
	// the directory is missing: br_netfilter is not loaded).
	BridgeNF string
	// IPForward is /proc/sys/net/ipv4/ip_forward.
	IPForward string
	// NFT and IPTables are the tools' paths ("" when not found); NFTables
	// says the kernel has nf_tables (a module loaded or built in, or nft
	// lists the tables).
	NFT, IPTables string
	NFTables      bool
	// VXLAN says the kernel has the vxlan driver, loaded or loadable.
	VXLAN bool
	// Interface, NodeIP and MTU describe the node address's interface;
	// InterfaceErr says why it was not found.
	Interface    string
	NodeIP       net.IP
	MTU          int
	InterfaceErr error
}

// GatherNetwork reads the network facts. procDir and sysDir are the roots
// of /proc and /sys ("" for those); nodeIP is --node-ip, nil for the
// address of the default route's interface.
func GatherNetwork(procDir, sysDir string, nodeIP net.IP, disabled bool) NetworkFacts {
	if disabled {
		return NetworkFacts{Disabled: true}
	}
	procDir, sysDir = orDefault(procDir, "/proc"), orDefault(sysDir, "/sys")
	f := NetworkFacts{
		BridgeNF:  strings.TrimSpace(readString(filepath.Join(procDir, "sys/net/bridge/bridge-nf-call-iptables"))),
		IPForward: strings.TrimSpace(readString(filepath.Join(procDir, "sys/net/ipv4/ip_forward"))),
		NFTables:  exists(filepath.Join(sysDir, "module/nf_tables")) || moduleBuiltin("nf_tables"),
		VXLAN:     exists(filepath.Join(sysDir, "module/vxlan")) || moduleAvailable("vxlan"),
	}
	f.NFT, _ = exec.LookPath("nft")
	f.IPTables, _ = exec.LookPath("iptables")
	if !f.NFTables && f.NFT != "" {
		// A built-in nf_tables need not show in /sys/module; listing the
		// tables (a read) tells.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		f.NFTables = exec.CommandContext(ctx, f.NFT, "list", "tables").Run() == nil
		cancel()
	}
	if nodeIP == nil {
		ip, err := utilnet.ChooseHostInterface()
		if err != nil {
			f.InterfaceErr = fmt.Errorf("no node address: %w", err)
			return f
		}
		nodeIP = ip
	}
	f.NodeIP = nodeIP
	f.Interface, f.MTU, f.InterfaceErr = interfaceOf(nodeIP)
	return f
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// modulesDir is the running kernel's module directory.
func modulesDir() string {
	release := strings.TrimSpace(readString("/proc/sys/kernel/osrelease"))
	return filepath.Join("/lib/modules", release)
}

// moduleBuiltin tells whether the running kernel has name built in.
func moduleBuiltin(name string) bool {
	b, err := os.ReadFile(filepath.Join(modulesDir(), "modules.builtin"))
	return err == nil && strings.Contains(string(b), "/"+name+".ko")
}

// moduleAvailable tells whether name is built in or can be loaded.
func moduleAvailable(name string) bool {
	if moduleBuiltin(name) {
		return true
	}
	b, err := os.ReadFile(filepath.Join(modulesDir(), "modules.dep"))
	return err == nil && strings.Contains(string(b), "/"+name+".ko")
}

// interfaceOf finds the interface holding ip.
func interfaceOf(ip net.IP) (string, int, error) {
	ifaces, err := net.Interfaces()
	if err != nil {
		return "", 0, err
	}
	for _, iface := range ifaces {
		addrs, err := iface.Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && n.IP.Equal(ip) {
				return iface.Name, iface.MTU, nil
			}
		}
	}
	return "", 0, fmt.Errorf("no interface holds %s", ip)
}

// EvaluateNetwork turns the network facts into findings, each missing part
// with its fix. None is a blocker: the control plane runs without them, but
// pods on this node would lack Services or the pod network.
func EvaluateNetwork(f NetworkFacts) []Finding {
	var out []Finding
	add := func(s Severity, check, format string, args ...any) {
		out = append(out, Finding{Severity: s, Check: check, Message: fmt.Sprintf(format, args...)})
	}
	if f.Disabled {
		add(OK, "network", "not checked: the kubelet is disabled (--disable kubelet), this server runs no pods")
		return out
	}
	switch f.BridgeNF {
	case "":
		add(Warning, "br_netfilter", "not loaded (/proc/sys/net/bridge is missing): Service traffic between pods on one bridge bypasses kube-proxy; fix: modprobe br_netfilter && echo br_netfilter > /etc/modules-load.d/edgeplane.conf")
	case "1":
		add(OK, "br_netfilter", "loaded, bridge-nf-call-iptables=1")
	default:
		add(Warning, "br_netfilter", "bridge-nf-call-iptables=%s: bridged pod traffic skips kube-proxy's rules; fix: sysctl -w net.bridge.bridge-nf-call-iptables=1 (and in /etc/sysctl.d/)", f.BridgeNF)
	}
	if f.IPForward == "1" {
		add(OK, "ip_forward", "on")
	} else {
		add(Warning, "ip_forward", "net.ipv4.ip_forward=%s: pods cannot reach other nodes or Services; fix: sysctl -w net.ipv4.ip_forward=1 and echo net.ipv4.ip_forward=1 > /etc/sysctl.d/90-edgeplane.conf", orDefault(f.IPForward, "unknown"))
	}
	switch {
	case f.NFT != "" && f.NFTables:
		add(OK, "packet-filter", "nftables (%s)", f.NFT)
	case f.IPTables != "":
		add(OK, "packet-filter", "iptables (%s); nftables %s", f.IPTables, nftMissing(f))
	case f.NFT != "":
		add(Warning, "packet-filter", "nft is installed but the kernel's nf_tables is not loaded and there is no iptables: kube-proxy cannot program Services; fix: modprobe nf_tables, or apt-get install iptables")
	default:
		add(Warning, "packet-filter", "neither nft nor iptables found: kube-proxy cannot program Services; fix: apt-get install nftables (or iptables)")
	}
	if f.VXLAN {
		add(OK, "vxlan", "the kernel has the vxlan driver")
	} else {
		add(Warning, "vxlan", "no vxlan driver in the kernel (/sys/module/vxlan, modules.dep): the default flannel backend cannot cross nodes; fix: modprobe vxlan (install your kernel's extra modules package), or use the host-gw backend on a flat LAN")
	}
	switch {
	case f.InterfaceErr != nil:
		add(Warning, "mtu", "%v; pass --node-ip with an address of this host", f.InterfaceErr)
	case f.MTU-vxlanOverhead < minPodMTU:
		add(Warning, "mtu", "%s (%s) MTU %d: VXLAN leaves pods %d, under %d; fix: raise the link's MTU or use the host-gw backend", f.Interface, f.NodeIP, f.MTU, f.MTU-vxlanOverhead, minPodMTU)
	default:
		add(OK, "mtu", "%s (%s) MTU %d: pods get %d over VXLAN", f.Interface, f.NodeIP, f.MTU, f.MTU-vxlanOverhead)
	}
	return out
}

func nftMissing(f NetworkFacts) string {
	if f.NFT == "" {
		return "tool not found (apt-get install nftables to use it)"
	}
	return "does not answer (nf_tables missing from the kernel?)"
}
