package bootstrap

import (
	"net"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// FuzzServerFlags parses the structured server flags (--service-cidr,
// --cluster-cidr, --tls-san, --disable, --write-kubeconfig-mode,
// --cluster-domain, --datastore-endpoint, --token, --snapshot-schedule)
// through the real flag set, Complete and Validate. Nothing panics; every
// problem names its flag; accepted values are usable: a Service CIDR with
// room for Services, a permission mode, known components only, and SANs that
// are IP addresses or DNS names whose labels fit in 63 characters (what
// x509 and the certificate code in pkg/certs accept).
func FuzzServerFlags(f *testing.F) {
	long := strings.Repeat("a", 64)
	for _, s := range [][9]string{
		{"10.43.0.0/16", "", "edge.example.com,10.0.0.5", "", "0600", "cluster.local", "", "", ""},
		{"10.43.0.0/31", "10.42.0.0/16", "*.example.com", "scheduler", "600", "cluster.local", "", "", "@daily"},
		{"fd00::/108", "10.42.0.0/16,fd01::/48", "::1,[::1]", "controller-manager,scheduler", "0644", "c.local", "", "", ""},
		{"10.43.0.0/16", "", long + ".com", "", "0600", "cluster.local", "", "", ""},
		{"10.43.0.0/16", "10.43.0.0/16", long + ".com", "kubelet", "0800", "Cluster.Local", "", "", ""},
		{"10.43.0.0", "0.0.0.0/0", "a_b.example.com", " , ", "-1", "", "https://h:2379", "0123456789abcdef", "0 0 30 2 *"},
		{"", "127.0.0.0/8", `"a,b`, "", "0o600", "x..y", "postgres://u:p@h/db", "K10abc::server:x", "CRON_TZ="},
		{"10.43.0.0/16", "", "EDGE.example.com", "", "777", "cluster.local.", "sqlite:///x.db", "", ""},
	} {
		f.Add(s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7], s[8])
	}
	f.Fuzz(func(t *testing.T, serviceCIDR, clusterCIDR, sans, disable, mode, domain, endpoint, token, schedule string) {
		o := NewOptions()
		fs := pflag.NewFlagSet("fuzz", pflag.ContinueOnError)
		fs.SetOutput(&strings.Builder{})
		o.AddFlags(fs)
		args := []string{"--data-dir", "/nonexistent/fuzz", "--advertise-address", "192.0.2.1",
			"--service-cidr=" + serviceCIDR, "--cluster-cidr=" + clusterCIDR, "--tls-san=" + sans,
			"--disable=" + disable, "--write-kubeconfig-mode=" + mode, "--cluster-domain=" + domain,
			"--snapshot-schedule=" + schedule}
		if endpoint != "" {
			args = append(args, "--datastore-endpoint="+endpoint)
		}
		if token != "" {
			args = append(args, "--token="+token)
		}
		if err := fs.Parse(args); err != nil {
			if !strings.Contains(err.Error(), "--") {
				t.Fatalf("flag error does not name the flag: %v", err)
			}
			return
		}
		c, err := o.Complete()
		if err != nil {
			t.Fatalf("Complete: %v", err)
		}
		errs := c.Validate()
		for _, err := range errs {
			if !strings.Contains(err.Error(), "--") {
				t.Fatalf("problem does not name its flag: %v", err)
			}
		}
		if len(errs) > 0 {
			return
		}
		if c.ServiceCIDR == nil {
			t.Fatalf("accepted --service-cidr %q without a CIDR", serviceCIDR)
		}
		if ones, bits := c.ServiceCIDR.Mask.Size(); bits-ones < 2 {
			t.Fatalf("accepted --service-cidr %s with no room", c.ServiceCIDR)
		}
		if c.KubeconfigMode&^0o777 != 0 {
			t.Fatalf("accepted --write-kubeconfig-mode %q as %v", mode, c.KubeconfigMode)
		}
		for name := range c.Disabled {
			if !slices.Contains(disableable(false), name) {
				t.Fatalf("accepted --disable %q", name)
			}
		}
		for _, san := range c.TLSSANs {
			if net.ParseIP(san) != nil {
				continue
			}
			for _, label := range strings.Split(strings.TrimPrefix(san, "*."), ".") {
				if len(label) == 0 || len(label) > 63 {
					t.Fatalf("accepted --tls-san %q with a %d-character label", san, len(label))
				}
			}
		}
	})
}

// FuzzParseDisable checks that parseDisable accepts only known components
// and that its result round-trips through a comma-separated value.
func FuzzParseDisable(f *testing.F) {
	for _, s := range []string{"scheduler", "controller-manager, scheduler", ",,", "kubelet", " scheduler ,x", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		set, errs := parseDisable(false, []string{v})
		for _, err := range errs {
			if !strings.HasPrefix(err.Error(), "--disable ") {
				t.Fatalf("error does not name the flag: %v", err)
			}
		}
		var names []string
		for name := range set {
			if !slices.Contains(disableable(false), name) {
				t.Fatalf("%q: accepted unknown component %q", v, name)
			}
			names = append(names, name)
		}
		again, errs := parseDisable(false, []string{strings.Join(names, ",")})
		if len(errs) > 0 || len(again) != len(set) {
			t.Fatalf("round trip of %v: %v, %v", names, again, errs)
		}
	})
}
