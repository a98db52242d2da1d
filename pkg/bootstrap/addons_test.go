package bootstrap

import (
	"strings"
	"testing"
)

// TestAddonOptions checks the cluster DNS address the options derive from
// the service CIDR, and --coredns-image.
func TestAddonOptions(t *testing.T) {
	tests := []struct {
		name    string
		mutate  func(o *Options)
		wantDNS string
		wantErr string
	}{
		{name: "defaults", mutate: func(*Options) {}, wantDNS: "10.43.0.10"},
		{name: "other service CIDR", mutate: func(o *Options) { o.ServiceCIDR = "10.96.0.0/12" }, wantDNS: "10.96.0.10"},
		{name: "service CIDR too small for DNS", mutate: func(o *Options) { o.ServiceCIDR = "10.43.0.0/29" }, wantErr: "--service-cidr 10.43.0.0/29 is too small for the cluster DNS address"},
		{name: "empty image", mutate: func(o *Options) { o.CoreDNSImage = " " }, wantErr: "--coredns-image must not be empty"},
		{name: "empty image, CoreDNS disabled", mutate: func(o *Options) { o.CoreDNSImage = ""; o.Disable = []string{"coredns"} }, wantDNS: "10.43.0.10"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := NewOptions()
			o.DataDir = t.TempDir()
			o.AdvertiseAddress = "192.0.2.10"
			tt.mutate(o)
			c, err := o.Complete()
			if err != nil {
				t.Fatal(err)
			}
			errs := c.Validate()
			if tt.wantErr != "" {
				for _, e := range errs {
					if strings.Contains(e.Error(), tt.wantErr) {
						return
					}
				}
				t.Fatalf("errors %v, want one containing %q", errs, tt.wantErr)
			}
			if len(errs) > 0 {
				t.Fatalf("errors %v", errs)
			}
			if got := c.ClusterDNS.String(); got != tt.wantDNS {
				t.Errorf("ClusterDNS = %s, want %s", got, tt.wantDNS)
			}
		})
	}
}
