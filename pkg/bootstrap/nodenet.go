package bootstrap

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strings"

	"github.com/spf13/pflag"
	"k8s.io/klog/v2"
	netutils "k8s.io/utils/net"

	"github.com/edgeplane/edgeplane/pkg/agent"
	"github.com/edgeplane/edgeplane/pkg/flannel"
	"github.com/edgeplane/edgeplane/pkg/kubeproxy"
)

// The --disable names of the network parts, for users who bring their own
// (Cilium, Calico): --disable=flannel is --flannel-backend=none.
const (
	componentFlannel   = "flannel"
	componentKubeProxy = "kube-proxy"
)

// NetworkOptions are the server's cluster network flags; agents take the
// server's choice from nodeconfig.
type NetworkOptions struct {
	FlannelBackend string
	KubeProxyMode  string
}

func newNetworkOptions() NetworkOptions {
	return NetworkOptions{FlannelBackend: flannel.DefaultBackend, KubeProxyMode: kubeproxy.ModeAuto}
}

// AddFlags binds the flags to fs.
func (o *NetworkOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.FlannelBackend, "flannel-backend", o.FlannelBackend, "Pod network across nodes, run in-process on every node: "+strings.Join(flannel.Backends, ", ")+" (none: each node's pods reach only that node's pods, or bring your own CNI).")
	fs.StringVar(&o.KubeProxyMode, "kube-proxy-mode", o.KubeProxyMode, "Services' data path on every node (in-process kube-proxy): "+strings.Join(kubeproxy.Modes, ", ")+" (auto: nftables where the kernel and nft have it, else iptables).")
}

// networkCompleted is the cluster network as every node runs it.
type networkCompleted struct {
	// FlannelBackend is none when flannel is off.
	FlannelBackend string
	// KubeProxyMode is empty when kube-proxy is off.
	KubeProxyMode string
}

// complete applies --disable and checks the values.
func (o *NetworkOptions) complete(disabled map[string]bool, clusterCIDR string) (networkCompleted, []error) {
	var errs []error
	c := networkCompleted{FlannelBackend: strings.ToLower(strings.TrimSpace(o.FlannelBackend)), KubeProxyMode: strings.ToLower(strings.TrimSpace(o.KubeProxyMode))}
	if err := flannel.ValidateBackend(c.FlannelBackend); err != nil {
		errs = append(errs, err)
	}
	if err := kubeproxy.ValidateMode(c.KubeProxyMode); err != nil {
		errs = append(errs, err)
	}
	if disabled[componentFlannel] {
		c.FlannelBackend = flannel.BackendNone
	}
	if disabled[componentKubeProxy] {
		c.KubeProxyMode = ""
	}
	if c.FlannelBackend != flannel.BackendNone && clusterCIDR != "" && flannelCIDR(clusterCIDR) == "" {
		errs = append(errs, fmt.Errorf("--flannel-backend %s needs an IPv4 --cluster-cidr (got %q): give one, or --flannel-backend none", c.FlannelBackend, clusterCIDR))
	}
	return c, errs
}

// flannelCIDR is the IPv4 CIDR of a possibly dual-stack cluster CIDR.
func flannelCIDR(clusterCIDR string) string {
	for _, s := range strings.Split(clusterCIDR, ",") {
		s = strings.TrimSpace(s)
		if _, n, err := netutils.ParseCIDRSloppy(s); err == nil && n.IP.To4() != nil {
			return n.String()
		}
	}
	return ""
}

// nodeNetwork builds the node's network components, in start order:
// flannel (when on), the CNI configuration writer (which waits for
// flannel's MTU), and kube-proxy (when on).
func nodeNetwork(ctx context.Context, node nodeCompleted, p agent.Paths, n networkCompleted, clusterCIDR string) ([]Component, error) {
	logger := klog.FromContext(ctx)
	var nodeIP net.IP
	if len(node.IPs) > 0 {
		nodeIP = node.IPs[0]
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
	var out []Component
	podnet := &agent.PodNetwork{Node: node.Name, Kubeconfig: p.Kubeconfig, ConfDir: node.CNIConfDir}
	if n.FlannelBackend != flannel.BackendNone {
		f, err := flannel.New(flannel.Config{
			Node: node.Name, NodeIP: nodeIP, ClusterCIDR: flannelCIDR(clusterCIDR), Backend: n.FlannelBackend,
			Kubeconfig: p.Kubeconfig, Dir: filepath.Join(p.Dir, "flannel"), NFTables: resolved == kubeproxy.ModeNFTables,
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
			Node: node.Name, NodeIP: nodeIP, ClusterCIDR: clusterCIDR, Mode: resolved,
			Kubeconfig: p.Kubeconfig,
		})
		if err != nil {
			return nil, err
		}
		out = append(out, kp)
	}
	return out, nil
}
