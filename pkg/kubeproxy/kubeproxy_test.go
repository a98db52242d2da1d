package kubeproxy

import (
	"net"
	"strings"
	"testing"

	kubeproxyv1alpha1 "k8s.io/kube-proxy/config/v1alpha1"
	"sigs.k8s.io/yaml"
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
	good := Config{Node: "n1", Mode: ModeNFTables, Kubeconfig: "/k", Dir: "/d"}
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

// TestRender: the written file is a KubeProxyConfiguration upstream reads,
// with the node's identity, the mode, the process's own OOM score and the
// host's conntrack settings left alone.
func TestRender(t *testing.T) {
	for _, tc := range []struct {
		name     string
		cfg      Config
		oom      int32
		wantBind string
	}{
		{name: "nftables with node IP", cfg: Config{Node: "edge-1", NodeIP: net.ParseIP("10.0.0.5"), ClusterCIDR: "10.42.0.0/16", Mode: ModeNFTables, Kubeconfig: "/a/kubelet.kubeconfig"}, oom: -500, wantBind: "10.0.0.5"},
		{name: "iptables without node IP", cfg: Config{Node: "edge-2", ClusterCIDR: "10.42.0.0/16,fd00::/56", Mode: ModeIPTables, Kubeconfig: "/b"}, oom: 0, wantBind: ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data, err := Render(tc.cfg, tc.oom)
			if err != nil {
				t.Fatal(err)
			}
			var got kubeproxyv1alpha1.KubeProxyConfiguration
			if err := yaml.UnmarshalStrict(data, &got); err != nil {
				t.Fatalf("the rendered file does not decode strictly: %v\n%s", err, data)
			}
			if got.Kind != "KubeProxyConfiguration" || got.APIVersion != "kubeproxy.config.k8s.io/v1alpha1" {
				t.Errorf("kind %q apiVersion %q", got.Kind, got.APIVersion)
			}
			if got.HostnameOverride != tc.cfg.Node || string(got.Mode) != tc.cfg.Mode || got.ClusterCIDR != tc.cfg.ClusterCIDR ||
				got.ClientConnection.Kubeconfig != tc.cfg.Kubeconfig || got.BindAddress != tc.wantBind {
				t.Errorf("rendered %+v from %+v", got, tc.cfg)
			}
			if got.OOMScoreAdj == nil || *got.OOMScoreAdj != tc.oom {
				t.Errorf("oomScoreAdj = %v, want %d", got.OOMScoreAdj, tc.oom)
			}
			ct := got.Conntrack
			if ct.MaxPerCore == nil || *ct.MaxPerCore != 0 || ct.Min == nil || *ct.Min != 0 ||
				ct.TCPEstablishedTimeout == nil || ct.TCPEstablishedTimeout.Duration != 0 {
				t.Errorf("conntrack %+v: want the host's settings left alone (zeros)", ct)
			}
		})
	}
}
