package certs

import (
	"slices"
	"testing"
)

// TestEtcdPeerSANs: the etcd server certificate of an etcd cluster member
// also names the advertise address and --tls-san values, which peers dial.
func TestEtcdPeerSANs(t *testing.T) {
	tests := []struct {
		name    string
		peer    bool
		wantIPs []string
		wantDNS []string
	}{
		{name: "single server", wantIPs: sorted("127.0.0.1", "::1"), wantDNS: sorted("localhost", "node1")},
		{name: "cluster member", peer: true, wantIPs: sorted("127.0.0.1", "::1", "10.0.0.5", "192.168.1.10"), wantDNS: sorted("localhost", "node1", "edge.example.com")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := testOptions(t)
			o.EtcdPeerSANs = tc.peer
			c := loadCert(t, mustEnsure(t, o).EtcdServer.Cert)
			if got := sorted(ipStrings(c.IPAddresses)...); !slices.Equal(got, tc.wantIPs) {
				t.Errorf("IP SANs %v, want %v", got, tc.wantIPs)
			}
			if got := sorted(c.DNSNames...); !slices.Equal(got, tc.wantDNS) {
				t.Errorf("DNS SANs %v, want %v", got, tc.wantDNS)
			}
		})
	}
}
