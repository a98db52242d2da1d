package flannel

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestNew(t *testing.T) {
	good := Config{Node: "n1", ClusterCIDR: "10.42.0.0/16", Backend: BackendVXLAN, Kubeconfig: "/k", Dir: "/d"}
	for _, tc := range []struct {
		name    string
		mutate  func(*Config)
		wantErr string
	}{
		{name: "vxlan", mutate: func(*Config) {}},
		{name: "host-gw", mutate: func(c *Config) { c.Backend = BackendHostGW }},
		{name: "wireguard", mutate: func(c *Config) { c.Backend = BackendWireGuard }},
		{name: "unknown backend", mutate: func(c *Config) { c.Backend = "udp" }, wantErr: `--flannel-backend "udp" is not one of`},
		{name: "none runs nothing", mutate: func(c *Config) { c.Backend = BackendNone }, wantErr: "runs no flannel"},
		{name: "bad CIDR", mutate: func(c *Config) { c.ClusterCIDR = "10.42.0.0" }, wantErr: `cluster CIDR "10.42.0.0"`},
		{name: "no node", mutate: func(c *Config) { c.Node = "" }, wantErr: "node name"},
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

// TestNetConf: flannel's own parser takes the configuration, with the
// backend type flannel knows and the rule system asked for.
func TestNetConf(t *testing.T) {
	for _, tc := range []struct {
		backend, wantType string
		nft               bool
	}{
		{BackendVXLAN, "vxlan", true},
		{BackendHostGW, "host-gw", false},
		{BackendWireGuard, "wireguard", false},
	} {
		t.Run(tc.backend, func(t *testing.T) {
			f, err := New(Config{Node: "n", ClusterCIDR: "10.42.0.0/16", Backend: tc.backend, Kubeconfig: "/k", Dir: "/d", NFTables: tc.nft})
			if err != nil {
				t.Fatal(err)
			}
			b, err := f.netConf()
			if err != nil {
				t.Fatal(err)
			}
			var got struct {
				Network        string
				EnableNFTables bool
				Backend        struct{ Type string }
			}
			if err := json.Unmarshal(b, &got); err != nil {
				t.Fatal(err)
			}
			if got.Network != "10.42.0.0/16" || got.Backend.Type != tc.wantType || got.EnableNFTables != tc.nft {
				t.Errorf("net-conf %s", b)
			}
		})
	}
}
