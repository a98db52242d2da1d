package bootstrap

import (
	"net"
	"testing"
)

func TestNodeServerURL(t *testing.T) {
	for _, tc := range []struct {
		name            string
		bind, advertise string
		want            string
	}{
		{"specific bind address", "127.0.0.1", "192.0.2.10", "https://127.0.0.1:6443"},
		{"all IPv4 addresses", "0.0.0.0", "192.0.2.10", "https://192.0.2.10:6443"},
		{"all IPv6 addresses", "::", "2001:db8::10", "https://[2001:db8::10]:6443"},
		{"specific IPv6", "2001:db8::1", "192.0.2.10", "https://[2001:db8::1]:6443"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := nodeServerURL(net.ParseIP(tc.bind), net.ParseIP(tc.advertise), 6443); got != tc.want {
				t.Errorf("nodeServerURL = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestNodeJoinPortOf(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int
		ok   bool
	}{
		{"https://127.0.0.1:34567", 34567, true},
		{"https://[::1]:6443", 6443, true},
		{"https://127.0.0.1", 0, false},
	} {
		got, err := portOf(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("portOf(%q) = %d, %v; want %d, ok %v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}
