package preflight

import (
	"errors"
	"net"
	"path/filepath"
	"strings"
	"testing"
)

func goodNetwork() NetworkFacts {
	return NetworkFacts{
		BridgeNF: "1", IPForward: "1", NFT: "/usr/sbin/nft", NFTables: true, IPTables: "/usr/sbin/iptables",
		VXLAN: true, Interface: "eth0", NodeIP: net.ParseIP("192.168.1.5"), MTU: 1500,
	}
}

func TestEvaluateNetwork(t *testing.T) {
	tests := []struct {
		name  string
		facts func(*NetworkFacts)
		check string
		want  Severity
		// substr is in the finding's message.
		substr string
	}{
		{name: "healthy: br_netfilter", check: "br_netfilter", want: OK},
		{name: "healthy: mtu", check: "mtu", want: OK, substr: "eth0 (192.168.1.5) MTU 1500: pods get 1450"},
		{name: "healthy: nftables", check: "packet-filter", want: OK, substr: "nftables"},
		{name: "br_netfilter not loaded", facts: func(f *NetworkFacts) { f.BridgeNF = "" }, check: "br_netfilter", want: Warning, substr: "modprobe br_netfilter"},
		{name: "bridge-nf-call off", facts: func(f *NetworkFacts) { f.BridgeNF = "0" }, check: "br_netfilter", want: Warning, substr: "sysctl -w net.bridge.bridge-nf-call-iptables=1"},
		{name: "no forwarding", facts: func(f *NetworkFacts) { f.IPForward = "0" }, check: "ip_forward", want: Warning, substr: "sysctl -w net.ipv4.ip_forward=1"},
		{name: "iptables only", facts: func(f *NetworkFacts) { f.NFT = "" }, check: "packet-filter", want: OK, substr: "iptables (/usr/sbin/iptables); nftables tool not found"},
		{name: "nft without kernel support, no iptables", facts: func(f *NetworkFacts) { f.NFTables = false; f.IPTables = "" }, check: "packet-filter", want: Warning, substr: "modprobe nf_tables"},
		{name: "no packet filter", facts: func(f *NetworkFacts) { f.NFT, f.IPTables = "", "" }, check: "packet-filter", want: Warning, substr: "apt-get install nftables"},
		{name: "no vxlan", facts: func(f *NetworkFacts) { f.VXLAN = false }, check: "vxlan", want: Warning, substr: "modprobe vxlan"},
		{name: "small MTU", facts: func(f *NetworkFacts) { f.MTU = 1300 }, check: "mtu", want: Warning, substr: "leaves pods 1250, under 1280"},
		{name: "no interface", facts: func(f *NetworkFacts) { f.InterfaceErr = errors.New("no interface holds 10.9.9.9") }, check: "mtu", want: Warning, substr: "pass --node-ip"},
		{name: "kubelet disabled", facts: func(f *NetworkFacts) { *f = NetworkFacts{Disabled: true} }, check: "network", want: OK, substr: "not checked"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := goodNetwork()
			if tt.facts != nil {
				tt.facts(&f)
			}
			var found *Finding
			findings := EvaluateNetwork(f)
			for i := range findings {
				if findings[i].Check == tt.check {
					found = &findings[i]
				}
			}
			if found == nil {
				t.Fatalf("no %s finding in %v", tt.check, findings)
			}
			if found.Severity != tt.want || !strings.Contains(found.Message, tt.substr) {
				t.Errorf("got %q, want severity %s with %q", found, tt.want, tt.substr)
			}
		})
	}
}

// TestGatherNetwork reads made-up /proc and /sys trees, and the loopback
// interface's real MTU.
func TestGatherNetwork(t *testing.T) {
	tests := []struct {
		name     string
		files    map[string]string // under the temp root
		wantBr   string
		wantFwd  string
		wantVX   bool
		disabled bool
	}{
		{name: "all there", files: map[string]string{
			"proc/sys/net/bridge/bridge-nf-call-iptables": "1\n", "proc/sys/net/ipv4/ip_forward": "1\n", "sys/module/vxlan/refcnt": "0\n",
		}, wantBr: "1", wantFwd: "1", wantVX: true},
		{name: "nothing loaded", files: map[string]string{"proc/sys/net/ipv4/ip_forward": "0\n"}, wantFwd: "0"},
		{name: "disabled", disabled: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			writeFiles(t, root, tt.files)
			f := GatherNetwork(filepath.Join(root, "proc"), filepath.Join(root, "sys"), net.ParseIP("127.0.0.1"), tt.disabled)
			if tt.disabled {
				if !f.Disabled || f.Interface != "" {
					t.Fatalf("disabled gathered %+v", f)
				}
				return
			}
			if f.BridgeNF != tt.wantBr || f.IPForward != tt.wantFwd {
				t.Errorf("bridge-nf %q ip_forward %q, want %q %q", f.BridgeNF, f.IPForward, tt.wantBr, tt.wantFwd)
			}
			if tt.wantVX && !f.VXLAN {
				t.Error("vxlan module not seen")
			}
			if f.InterfaceErr != nil || f.Interface == "" || f.MTU <= 0 {
				t.Errorf("loopback: interface %q MTU %d err %v", f.Interface, f.MTU, f.InterfaceErr)
			}
		})
	}
}
