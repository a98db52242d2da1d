package csrapprover

import (
	"errors"
	"net"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// APIServer is what names the API server, none of which a node's serving
// certificate may name: a certificate for one of them, signed by a CA that
// clients trust, would let its node pass for the API server.
type APIServer struct {
	// ClusterDomain is the cluster's DNS domain (cluster.local): the
	// kubernetes Service's full name is kubernetes.default.svc.<domain>.
	ClusterDomain string
	// ServiceIPs are the kubernetes Service's ClusterIPs: the first
	// address of each service CIDR.
	ServiceIPs []net.IP
	// AdvertiseAddress and BindAddress are the API server's
	// --advertise-address and --bind-address (an unspecified bind
	// address, 0.0.0.0 or ::, names nothing).
	AdvertiseAddress net.IP
	BindAddress      net.IP
	// Hostname is the server's host name, in its serving certificate.
	Hostname string
	// TLSSANs are the --tls-san values: IP addresses or DNS names, a DNS
	// name possibly a wildcard (*.example.com).
	TLSSANs []string
}

// Validate returns every problem with a.
func (a APIServer) Validate() []error {
	var errs []error
	if a.ClusterDomain == "" {
		errs = append(errs, errors.New("csrapprover: no cluster domain: the kubernetes Service's full name depends on it"))
	}
	if len(a.ServiceIPs) == 0 {
		errs = append(errs, errors.New("csrapprover: no kubernetes Service IP (the service CIDR's first address)"))
	}
	return errs
}

// Reserved is what no node's serving certificate may name, and what one
// node's may not because it is another node's.
type Reserved struct {
	APIServer APIServer
	// Endpoints are the addresses of every API server: the EndpointSlices
	// of the kubernetes Service in namespace default.
	Endpoints []net.IP
	// Nodes are the cluster's Nodes; the requester's own is skipped.
	Nodes []*corev1.Node
}

// Rules of the SAN policy, as the denial names them.
const (
	ruleServiceName  = "the kubernetes Service's DNS name"
	ruleServiceIP    = "the kubernetes Service's ClusterIP (the service CIDR's first address)"
	ruleLocalhost    = "localhost"
	ruleLoopback     = "a loopback address"
	ruleUnspecified  = "the unspecified address"
	ruleAdvertise    = "the API server's advertise address (--advertise-address)"
	ruleBind         = "the API server's bind address (--bind-address)"
	ruleHostname     = "the server's host name, in the API server's certificate"
	ruleTLSSAN       = "a --tls-san of the API server"
	ruleEndpoint     = "an API server's address (EndpointSlices of default/kubernetes)"
	ruleWildcard     = "a wildcard: a node's serving certificate names its own addresses only"
	ruleOtherName    = "another node's name"
	ruleOtherAddress = "another node's address"
)

// dnsKey is how DNS names compare: lower case, without the root's dot.
func dnsKey(name string) string {
	return strings.TrimSuffix(strings.ToLower(strings.TrimSpace(name)), ".")
}

// matchDNS reports whether the DNS SAN name (a dnsKey) matches pattern, a
// DNS name or a wildcard of one label as TLS clients match them.
func matchDNS(pattern, name string) bool {
	pattern = dnsKey(pattern)
	if rest, ok := strings.CutPrefix(pattern, "*."); ok {
		_, domain, found := strings.Cut(name, ".")
		return found && domain == rest
	}
	return pattern == name
}

// dnsRule is the rule a DNS SAN of node self's certificate breaks, with
// who it names ("" when it breaks none).
func (r Reserved) dnsRule(san, self string) (rule string, whose string) {
	name := dnsKey(san)
	if strings.Contains(name, "*") {
		return ruleWildcard, ""
	}
	if ip := net.ParseIP(name); ip != nil {
		// A DNS SAN that is an address: TLS clients match it against
		// that address's textual form; judge it as the address.
		return r.ipRule(ip, self)
	}
	domain := dnsKey(r.APIServer.ClusterDomain)
	for _, svc := range []string{"kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc." + domain} {
		if name == svc {
			return ruleServiceName, "the API server"
		}
	}
	if name == "localhost" || strings.HasSuffix(name, ".localhost") {
		return ruleLocalhost, "this host"
	}
	if h := dnsKey(r.APIServer.Hostname); h != "" && name == h {
		return ruleHostname, "the API server"
	}
	for _, san := range r.APIServer.TLSSANs {
		if net.ParseIP(strings.Trim(san, "[]")) == nil && matchDNS(san, name) {
			return ruleTLSSAN + " (" + san + ")", "the API server"
		}
	}
	for _, n := range r.Nodes {
		if n.Name == self {
			continue
		}
		if dnsKey(n.Name) == name {
			return ruleOtherName, "node " + n.Name
		}
		for _, a := range n.Status.Addresses {
			if a.Address != "" && dnsKey(a.Address) == name {
				return ruleOtherAddress + " (" + string(a.Type) + ")", "node " + n.Name
			}
		}
	}
	return "", ""
}

// ipRule is the rule an IP SAN of node self's certificate breaks, with
// who it names ("" when it breaks none).
func (r Reserved) ipRule(ip net.IP, self string) (rule string, whose string) {
	switch {
	case ip.IsLoopback():
		return ruleLoopback, "this host"
	case ip.IsUnspecified():
		return ruleUnspecified, "every address of a host"
	}
	for _, s := range r.APIServer.ServiceIPs {
		if ip.Equal(s) {
			return ruleServiceIP, "the API server"
		}
	}
	if ip.Equal(r.APIServer.AdvertiseAddress) {
		return ruleAdvertise, "the API server"
	}
	if b := r.APIServer.BindAddress; b != nil && !b.IsUnspecified() && ip.Equal(b) {
		return ruleBind, "the API server"
	}
	for _, san := range r.APIServer.TLSSANs {
		if s := net.ParseIP(strings.Trim(san, "[]")); s != nil && ip.Equal(s) {
			return ruleTLSSAN + " (" + san + ")", "the API server"
		}
	}
	for _, e := range r.Endpoints {
		if ip.Equal(e) {
			return ruleEndpoint, "an API server"
		}
	}
	for _, n := range r.Nodes {
		if n.Name == self {
			continue
		}
		if s := net.ParseIP(n.Name); s != nil && ip.Equal(s) {
			return ruleOtherName, "node " + n.Name
		}
		for _, a := range n.Status.Addresses {
			if s := net.ParseIP(a.Address); s != nil && ip.Equal(s) {
				return ruleOtherAddress + " (" + string(a.Type) + ")", "node " + n.Name
			}
		}
	}
	return "", ""
}
