package kubeproxy

import (
	"net"
	"strings"
	"testing"
)

func TestValidateMode(t *testing.T) {
	for _, tc := range []struct {
		mode    string
		wantErr string
	}{
		{mode: ModeAuto},
		{mode: ModeNFTables},
		{mode: ModeIPTables},
		{mode: "ipvs", wantErr: `--kube-proxy-mode "ipvs" is not one of: auto, nftables, iptables`},
		{mode: "", wantErr: `--kube-proxy-mode "" is not one of`},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			err := ValidateMode(tc.mode)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("ValidateMode(%q) = %v", tc.mode, err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("ValidateMode(%q) = %v, want an error with %q", tc.mode, err, tc.wantErr)
			}
		})
	}
}

func TestNew(t *testing.T) {
	good := Config{Node: "n1", Mode: ModeNFTables, Kubeconfig: "/k"}
	for _, tc := range []struct {
		name    string
		mutate  func(*Config)
		wantErr string
	}{
		{name: "good", mutate: func(*Config) {}},
		{name: "auto unresolved", mutate: func(c *Config) { c.Mode = ModeAuto }, wantErr: `mode "auto"`},
		{name: "no node", mutate: func(c *Config) { c.Node = "" }, wantErr: "node name"},
		{name: "no kubeconfig", mutate: func(c *Config) { c.Kubeconfig = "" }, wantErr: "kubeconfig"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := good
			tc.mutate(&c)
			_, err := New(c)
			if (err != nil) != (tc.wantErr != "") || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("New = %v, want error %q", err, tc.wantErr)
			}
		})
	}
}

// TestArgs: upstream's own flag set parses, completes and validates the
// flags, with the node's identity, the mode, the process's own OOM score,
// and the host's conntrack settings left alone.
func TestArgs(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		oom  int32
		want map[string]string
	}{
		{
			name: "nftables with node IP",
			cfg:  Config{Node: "edge-1", NodeIP: net.ParseIP("10.0.0.5"), ClusterCIDR: "10.42.0.0/16", Mode: ModeNFTables, Kubeconfig: "/a/kubelet.kubeconfig"},
			oom:  -500,
			want: map[string]string{"hostname-override": "edge-1", "proxy-mode": "nftables", "bind-address": "10.0.0.5", "cluster-cidr": "10.42.0.0/16",
				"kubeconfig": "/a/kubelet.kubeconfig", "oom-score-adj": "-500", "conntrack-max-per-core": "0", "conntrack-min": "0"},
		},
		{
			name: "iptables, dual stack, no node IP",
			cfg:  Config{Node: "edge-2", ClusterCIDR: "10.42.0.0/16,fd00:42::/56", Mode: ModeIPTables, Kubeconfig: "/b"},
			want: map[string]string{"hostname-override": "edge-2", "proxy-mode": "iptables", "cluster-cidr": "10.42.0.0/16,fd00:42::/56", "oom-score-adj": "0"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := Args(tc.cfg, tc.oom)
			if _, err := options(args); err != nil {
				t.Fatalf("upstream refuses %q: %v", args, err)
			}
			got := map[string]string{}
			for _, a := range args {
				k, v, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
				got[k] = v
			}
			for k, v := range tc.want {
				if got[k] != v {
					t.Errorf("--%s = %q, want %q (args %q)", k, got[k], v, args)
				}
			}
			if tc.cfg.NodeIP == nil && got["bind-address"] != "" {
				t.Errorf("--bind-address %q without a node IP", got["bind-address"])
			}
		})
	}
}
