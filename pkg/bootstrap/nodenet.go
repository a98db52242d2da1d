package bootstrap

import (
	"fmt"
	"strings"

	"github.com/spf13/pflag"

	"github.com/edgeplane/edgeplane/pkg/flannel"
	"github.com/edgeplane/edgeplane/pkg/kubeproxy"
	"github.com/edgeplane/edgeplane/pkg/node"
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

// complete applies --disable and checks the values: the cluster network as
// every node runs it.
func (o *NetworkOptions) complete(disabled map[string]bool, clusterCIDR string) (node.Network, []error) {
	var errs []error
	c := node.Network{FlannelBackend: strings.ToLower(strings.TrimSpace(o.FlannelBackend)), KubeProxyMode: strings.ToLower(strings.TrimSpace(o.KubeProxyMode))}
	if err := flannel.ValidateBackend(c.FlannelBackend); err != nil {
		errs = append(errs, err)
	}
	if err := kubeproxy.ValidateMode(c.KubeProxyMode); err != nil {
		errs = append(errs, err)
	}
	if disabled[node.PartFlannel] {
		c.FlannelBackend = flannel.BackendNone
	}
	if disabled[node.PartKubeProxy] {
		c.KubeProxyMode = ""
	}
	if c.FlannelBackend != flannel.BackendNone && clusterCIDR != "" && node.FlannelCIDR(clusterCIDR) == "" {
		errs = append(errs, fmt.Errorf("--flannel-backend %s needs an IPv4 --cluster-cidr (got %q): give one, or --flannel-backend none", c.FlannelBackend, clusterCIDR))
	}
	return c, errs
}
