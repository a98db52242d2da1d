package node

import (
	"strings"
	"testing"

	"github.com/edgeplane/edgeplane/pkg/criruntime"
	"github.com/edgeplane/edgeplane/pkg/nodeconfig"
)

// TestNetworkOf: an agent runs the network the server published, none when
// the server published none (a server older than the network parts), and
// refuses to run a value it does not know instead of silently running no
// network while the other nodes run one.
func TestNetworkOf(t *testing.T) {
	for _, tc := range []struct {
		name    string
		nc      nodeconfig.Config
		want    Network
		wantErr string
	}{
		{name: "server's choice", nc: nodeconfig.Config{ClusterCIDR: "10.42.0.0/16", FlannelBackend: "host-gw", KubeProxyMode: "nftables"}, want: Network{FlannelBackend: "host-gw", KubeProxyMode: "nftables"}},
		{name: "no kube-proxy", nc: nodeconfig.Config{ClusterCIDR: "10.42.0.0/16", FlannelBackend: "vxlan"}, want: Network{FlannelBackend: "vxlan"}},
		{name: "older server", nc: nodeconfig.Config{}, want: Network{FlannelBackend: "none"}},
		{name: "unknown backend", nc: nodeconfig.Config{ClusterCIDR: "10.42.0.0/16", FlannelBackend: "udp", KubeProxyMode: "iptables"}, wantErr: `flannel backend "udp"`},
		{name: "unknown proxy mode", nc: nodeconfig.Config{ClusterCIDR: "10.42.0.0/16", FlannelBackend: "vxlan", KubeProxyMode: "ipvs"}, wantErr: `kube-proxy mode "ipvs"`},
		{name: "flannel without an IPv4 range", nc: nodeconfig.Config{ClusterCIDR: "fd00:42::/56", FlannelBackend: "vxlan"}, wantErr: "no IPv4 cluster CIDR"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := NetworkOf(tc.nc)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), "upgrade this node") {
					t.Fatalf("NetworkOf = %+v, %v; want an error naming %q and the fix", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("NetworkOf = %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

// TestKubeletTakesTheRuntimesCgroupDriver: the kubelet uses the cgroup
// driver the runtime reports (they must agree, or pods fail to start);
// a runtime that does not say leaves the kubelet's default.
func TestKubeletTakesTheRuntimesCgroupDriver(t *testing.T) {
	for _, tc := range []struct{ reported, want string }{
		{"systemd", "systemd"},
		{"cgroupfs", "cgroupfs"},
		{criruntime.CgroupDriverUnknown, ""},
	} {
		c := Config{Settings: Settings{Name: "n"}, Runtime: &criruntime.Runtime{Endpoint: "unix:///x", CgroupDriver: tc.reported}}
		if got := c.KubeletOptions(PathsIn("/d"), Cluster{}).CgroupDriver; got != tc.want {
			t.Errorf("runtime reports %q: kubelet cgroup driver %q, want %q", tc.reported, got, tc.want)
		}
	}
}
