package controllers

import (
	"net"
	"strings"
	"testing"
)

// FuzzValidateClusterCIDR feeds --cluster-cidr and --service-cidr values to
// ValidateClusterCIDR. Errors name the flag; an accepted value is one CIDR
// or an IPv4/IPv6 pair, usable, apart from the Service CIDR and, with node
// CIDR allocation, able to hold /24 (IPv4) or /64 (IPv6) node ranges.
func FuzzValidateClusterCIDR(f *testing.F) {
	for _, s := range []struct {
		cluster, service string
		allocate         bool
	}{
		{"", "10.43.0.0/16", true},
		{"10.42.0.0/16", "10.43.0.0/16", false},
		{"10.42.0.0/16,fd00:42::/56", "10.43.0.0/16", true},
		{"10.42.0.0/16,10.44.0.0/16", "10.43.0.0/16", false},
		{"10.42.0.0/25", "", true},
		{"10.0.0.0/8", "10.43.0.0/16", true},
		{"0.0.0.0/0", "", false},
		{"127.0.0.0/8", "", false},
		{"010.042.0.0/16", "", false},
		{"::ffff:10.42.0.0/112", "10.43.0.0/16", true},
		{" 10.42.0.0/16 , ", "", false},
		{"10.42.0.0/16,fd00::/48,fd01::/48", "", false},
	} {
		f.Add(s.cluster, s.service, s.allocate)
	}
	f.Fuzz(func(t *testing.T, cluster, service string, allocate bool) {
		var svc *net.IPNet
		if _, c, err := net.ParseCIDR(service); err == nil {
			svc = c
		}
		errs := ValidateClusterCIDR(cluster, svc, allocate)
		for _, err := range errs {
			if !strings.Contains(err.Error(), "--cluster-cidr") {
				t.Fatalf("error does not name the flag: %v", err)
			}
		}
		if len(errs) > 0 {
			return
		}
		if strings.TrimSpace(cluster) == "" {
			cluster = DefaultClusterCIDR
		}
		cidrs, err := parseClusterCIDR(cluster)
		if err != nil || len(cidrs) == 0 || len(cidrs) > 2 {
			t.Fatalf("accepted %q but parse gives %v, %v", cluster, cidrs, err)
		}
		for _, c := range cidrs {
			if svc != nil && (c.Contains(svc.IP) || svc.Contains(c.IP)) {
				t.Fatalf("accepted %s overlapping the Service CIDR %s", c, svc)
			}
			if c.IP.IsLoopback() || c.IP.IsUnspecified() {
				t.Fatalf("accepted unusable %s", c)
			}
			if ones, bits := c.Mask.Size(); allocate && (bits == 32 && ones > 24 || bits == 128 && ones > 64) {
				t.Fatalf("accepted %s, smaller than one node's range", c)
			}
		}
		// The canonical form of an accepted value is accepted too.
		var canon []string
		for _, c := range cidrs {
			canon = append(canon, c.String())
		}
		if errs := ValidateClusterCIDR(strings.Join(canon, ","), svc, allocate); len(errs) > 0 {
			t.Fatalf("accepted %q but not its canonical form %v: %v", cluster, canon, errs)
		}
	})
}
