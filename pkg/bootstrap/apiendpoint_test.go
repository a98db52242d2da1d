package bootstrap

import (
	"errors"
	"net"
	"strings"
	"testing"

	"github.com/edgeplane/edgeplane/internal/testing/testenv"
)

// TestAPIEndpoint: the `kubernetes` Service's endpoint is published only
// where the API listens, a host address the bind address does not serve is
// refused at Validate, and a loopback-bound server refuses to be a node.
func TestAPIEndpoint(t *testing.T) {
	for _, tc := range []struct {
		name            string
		bind, advertise string
		explicit, local bool
		wantPublish     bool
		wantInvalid     []string // in Validate's error; nil: valid
		wantNodeRefused bool
	}{
		{name: "every address, host's primary advertised", bind: "0.0.0.0", advertise: "10.0.0.5", local: true, wantPublish: true},
		{name: "every address, a load balancer advertised", bind: "0.0.0.0", advertise: "198.51.100.7", explicit: true, wantPublish: true},
		{name: "every IPv6 address, an IPv4 one advertised (dual stack)", bind: "::", advertise: "10.0.0.5", explicit: true, local: true, wantPublish: true},
		{name: "one address, advertised by default", bind: "10.0.0.5", advertise: "10.0.0.5", local: true, wantPublish: true},
		{name: "one address, given as both", bind: "10.0.0.5", advertise: "10.0.0.5", explicit: true, local: true, wantPublish: true},
		{name: "one IPv6 address, given as both", bind: "2001:db8::5", advertise: "2001:db8::5", explicit: true, local: true, wantPublish: true},
		{name: "one IPv4-mapped address, given as both", bind: "::ffff:10.0.0.5", advertise: "10.0.0.5", explicit: true, local: true, wantPublish: true},
		{name: "one address, another of this host advertised", bind: "10.0.0.5", advertise: "10.0.0.6", explicit: true, local: true, wantPublish: true,
			wantInvalid: []string{"--advertise-address 10.0.0.6 is an address of this host", "--bind-address 10.0.0.5 only", "--bind-address 0.0.0.0", "--bind-address 10.0.0.6", "leave --advertise-address out"}},
		{name: "one IPv6 address, another of this host advertised", bind: "2001:db8::5", advertise: "2001:db8::6", explicit: true, local: true, wantPublish: true,
			wantInvalid: []string{"--advertise-address 2001:db8::6", "--bind-address :: (every address)"}},
		{name: "one address, a load balancer advertised", bind: "10.0.0.5", advertise: "198.51.100.7", explicit: true, wantPublish: true},
		{name: "loopback, host's primary by default: no endpoint", bind: "127.0.0.1", advertise: "10.0.0.5", local: true, wantNodeRefused: true},
		{name: "IPv6 loopback, host's primary by default: no endpoint", bind: "::1", advertise: "2001:db8::5", local: true, wantNodeRefused: true},
		{name: "loopback, a host address advertised", bind: "127.0.0.1", advertise: "10.0.0.5", explicit: true, local: true, wantPublish: true, wantNodeRefused: true,
			wantInvalid: []string{"--advertise-address 10.0.0.5 is an address of this host", "--bind-address 127.0.0.1 only", "--bind-address 0.0.0.0 (every address) or --bind-address 10.0.0.5"}},
		{name: "loopback, an address in front advertised", bind: "127.0.0.1", advertise: "192.0.2.10", explicit: true, wantPublish: true, wantNodeRefused: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &completedOptions{BindAddress: net.ParseIP(tc.bind), AdvertiseAddress: net.ParseIP(tc.advertise),
				Endpoint: apiEndpoint{explicit: tc.explicit, local: tc.local}}
			if got := c.publishesEndpoint(); got != tc.wantPublish {
				t.Errorf("publishesEndpoint() = %v, want %v", got, tc.wantPublish)
			}
			err := c.validateEndpoint()
			switch {
			case tc.wantInvalid == nil && err != nil:
				t.Errorf("validateEndpoint() = %v, want nil", err)
			case tc.wantInvalid != nil && err == nil:
				t.Errorf("validateEndpoint() = nil, want an error with %q", tc.wantInvalid)
			case err != nil:
				for _, want := range tc.wantInvalid {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("validateEndpoint() = %v, want it to contain %q", err, want)
					}
				}
			}
			err = c.nodeReachesAPI("containerd 1.7.0")
			if got := err != nil; got != tc.wantNodeRefused {
				t.Fatalf("nodeReachesAPI() = %v, want refused %v", err, tc.wantNodeRefused)
			}
			if err != nil {
				for _, want := range []string{"containerd 1.7.0 answers", "--bind-address " + tc.bind, "--advertise-address " + tc.advertise, "--disable=kubelet"} {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("nodeReachesAPI() = %v, want it to contain %q", err, want)
					}
				}
			}
		})
	}
}

// TestAdvertiseAddressOfThisHost: Complete finds that an --advertise-address
// is one of this host's, and Validate refuses it with a loopback bind address.
func TestAdvertiseAddressOfThisHost(t *testing.T) {
	host, err := hostAddresses()
	if err != nil {
		t.Fatal(err)
	}
	var own net.IP
	for _, ip := range host {
		if !ip.IsLoopback() && !ip.IsLinkLocalUnicast() {
			own = ip
			break
		}
	}
	if own == nil {
		testenv.Require(t, "a host address that is not loopback", errors.New("none found"))
	}
	c, errs := validateArgs(t, []string{"--bind-address", "127.0.0.1", "--advertise-address", own.String()})
	if !c.Endpoint.explicit || !c.Endpoint.local {
		t.Fatalf("Endpoint = %+v for this host's %s", c.Endpoint, own)
	}
	wantOneProblem(t, errs, "--advertise-address "+own.String()+" is an address of this host")

	c, errs = validateArgs(t, []string{"--bind-address", "127.0.0.1"}) // validateArgs advertises 192.0.2.1
	if len(errs) != 0 || c.Endpoint.local || !c.publishesEndpoint() {
		t.Fatalf("an address in front of a loopback server: problems %v, Endpoint %+v", errs, c.Endpoint)
	}
}
