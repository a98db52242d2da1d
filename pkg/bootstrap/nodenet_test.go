package bootstrap

import (
	"strings"
	"testing"

	"github.com/edgeplane/edgeplane/pkg/node"
)

func TestNetworkOptionsComplete(t *testing.T) {
	for _, tc := range []struct {
		name        string
		opts        NetworkOptions
		disabled    map[string]bool
		clusterCIDR string
		want        node.Network
		wantErr     string
	}{
		{name: "defaults", opts: newNetworkOptions(), clusterCIDR: "10.42.0.0/16", want: node.Network{FlannelBackend: "vxlan", KubeProxyMode: "auto"}},
		{name: "host-gw, iptables", opts: NetworkOptions{FlannelBackend: "Host-GW", KubeProxyMode: "iptables"}, clusterCIDR: "10.42.0.0/16", want: node.Network{FlannelBackend: "host-gw", KubeProxyMode: "iptables"}},
		{name: "disable both", opts: newNetworkOptions(), disabled: map[string]bool{"flannel": true, "kube-proxy": true}, clusterCIDR: "10.42.0.0/16", want: node.Network{FlannelBackend: "none"}},
		{name: "dual stack takes the IPv4 range", opts: newNetworkOptions(), clusterCIDR: "10.42.0.0/16,fd00:42::/56", want: node.Network{FlannelBackend: "vxlan", KubeProxyMode: "auto"}},
		{name: "IPv6 only needs none", opts: newNetworkOptions(), clusterCIDR: "fd00:42::/56", wantErr: "needs an IPv4 --cluster-cidr"},
		{name: "bad backend", opts: NetworkOptions{FlannelBackend: "udp", KubeProxyMode: "auto"}, clusterCIDR: "10.42.0.0/16", wantErr: `--flannel-backend "udp"`},
		{name: "bad mode", opts: NetworkOptions{FlannelBackend: "none", KubeProxyMode: "ipvs"}, clusterCIDR: "10.42.0.0/16", wantErr: `--kube-proxy-mode "ipvs"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, errs := tc.opts.complete(tc.disabled, tc.clusterCIDR)
			if tc.wantErr != "" {
				if len(errs) == 0 || !strings.Contains(errs[0].Error(), tc.wantErr) {
					t.Fatalf("errors %v, want one with %q", errs, tc.wantErr)
				}
				return
			}
			if len(errs) > 0 || got != tc.want {
				t.Fatalf("complete = %+v, %v; want %+v", got, errs, tc.want)
			}
		})
	}
}
