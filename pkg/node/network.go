package node

import (
	"context"
	"fmt"
	"net"
	"strings"

	"k8s.io/klog/v2"
	netutils "k8s.io/utils/net"

	"github.com/edgeplane/edgeplane/internal/component"
	"github.com/edgeplane/edgeplane/pkg/flannel"
	"github.com/edgeplane/edgeplane/pkg/kubeproxy"
	"github.com/edgeplane/edgeplane/pkg/nodeconfig"
)

// Network is the cluster network every node runs: the server's choice,
// which agents read from the node settings.
type Network struct {
	// FlannelBackend is flannel.BackendNone when flannel is off.
	FlannelBackend string
	// KubeProxyMode is "" when kube-proxy is off.
	KubeProxyMode string
}

// NetworkOf is the network the server published in nc. A server that
// published no backend (older than the network parts) runs none; a value
// this agent does not know is an error: the agent is older than the server
// and must not run a different network than the other nodes.
func NetworkOf(nc nodeconfig.Config) (Network, error) {
	n := Network{FlannelBackend: nc.FlannelBackend, KubeProxyMode: nc.KubeProxyMode}
	if n.FlannelBackend == "" {
		n.FlannelBackend = flannel.BackendNone
	}
	var errs []string
	if err := flannel.ValidateBackend(n.FlannelBackend); err != nil {
		errs = append(errs, fmt.Sprintf("flannel backend %q", n.FlannelBackend))
	}
	if n.KubeProxyMode != "" && kubeproxy.ValidateMode(n.KubeProxyMode) != nil {
		errs = append(errs, fmt.Sprintf("kube-proxy mode %q", n.KubeProxyMode))
	}
	if n.FlannelBackend != flannel.BackendNone && FlannelCIDR(nc.ClusterCIDR) == "" {
		errs = append(errs, fmt.Sprintf("flannel backend %s with no IPv4 cluster CIDR (%q)", n.FlannelBackend, nc.ClusterCIDR))
	}
	if len(errs) > 0 {
		return Network{}, fmt.Errorf("node: the server's node settings (%s/%s) name %s, which this edgeplane does not run: upgrade this node to the server's version",
			nodeconfig.Namespace, nodeconfig.Name, strings.Join(errs, " and "))
	}
	return n, nil
}

// FlannelCIDR is the IPv4 CIDR of a possibly dual-stack cluster CIDR.
func FlannelCIDR(clusterCIDR string) string {
	for _, s := range strings.Split(clusterCIDR, ",") {
		s = strings.TrimSpace(s)
		if _, n, err := netutils.ParseCIDRSloppy(s); err == nil && n.IP.To4() != nil {
			return n.String()
		}
	}
	return ""
}

// networkComponents are the node's network components, in start order:
// flannel (when on), the CNI configuration writer (which waits for
// flannel's MTU), and kube-proxy (when on).
func networkComponents(ctx context.Context, s Settings, p Paths, n Network, clusterCIDR string) ([]component.Component, error) {
	logger := klog.FromContext(ctx)
	var nodeIP net.IP
	if len(s.IPs) > 0 {
		nodeIP = s.IPs[0]
	}
	resolved := ""
	if n.KubeProxyMode != "" || n.FlannelBackend != flannel.BackendNone {
		mode := n.KubeProxyMode
		if mode == "" {
			mode = kubeproxy.ModeAuto // flannel's rules follow the host's rule system
		}
		var why string
		resolved, why = kubeproxy.ResolveMode(mode)
		logger.Info("Node network", "flannelBackend", n.FlannelBackend, "kubeProxy", n.KubeProxyMode != "", "rules", resolved, "why", why)
	}
	var out []component.Component
	podnet := &PodNetwork{Node: s.Name, Kubeconfig: p.Kubeconfig, ConfDir: s.CNIConfDir, IPAMDataDir: p.IPAM}
	if n.FlannelBackend != flannel.BackendNone {
		f, err := flannel.New(flannel.Config{
			Node: s.Name, NodeIP: nodeIP, ClusterCIDR: FlannelCIDR(clusterCIDR), Backend: n.FlannelBackend,
			Kubeconfig: p.Kubeconfig, Dir: p.Flannel, NFTables: resolved == kubeproxy.ModeNFTables,
		})
		if err != nil {
			return nil, err
		}
		podnet.MTU = f.MTU
		out = append(out, f)
	}
	out = append(out, podnet)
	if n.KubeProxyMode != "" {
		kp, err := kubeproxy.New(kubeproxy.Config{
			Node: s.Name, NodeIP: nodeIP, ClusterCIDR: clusterCIDR, Mode: resolved,
			Kubeconfig: p.Kubeconfig,
		})
		if err != nil {
			return nil, err
		}
		out = append(out, kp)
	}
	return out, nil
}
