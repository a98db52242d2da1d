package certs

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Options configures Ensure.
type Options struct {
	// Dir is <data-dir>/tls. It is created with mode 0700.
	Dir string
	// KubeconfigDir is where kubeconfigs are written (normally <data-dir>).
	// Defaults to the parent of Dir.
	KubeconfigDir string
	// Hostname (os.Hostname()) is added to the serving SANs.
	Hostname string
	// ExtraSANs are --tls-san values: IP addresses or DNS names.
	ExtraSANs []string
	// AdvertiseAddress is added to the serving SANs when non-nil.
	AdvertiseAddress net.IP
	// ServiceCIDR's first address (the kubernetes service IP) is added to the serving SANs.
	ServiceCIDR *net.IPNet
	// ClusterDomain, e.g. cluster.local. Defaults to cluster.local.
	ClusterDomain string
	// APIServerPort is the secure port kubeconfigs point at (https://127.0.0.1:<port>).
	APIServerPort int
	// APIServerHost is the address the kubeconfigs point at, and a serving
	// SAN: the API server's bind address when it listens on one address
	// only; nil means 127.0.0.1.
	APIServerHost net.IP
	// AdminKubeconfigMode is the mode of admin.kubeconfig; 0600 when zero.
	AdminKubeconfigMode os.FileMode
	// Now returns the current time; defaults to time.Now.
	Now func() time.Time
	// LeafValidity is the lifetime of newly issued leaf certificates; one
	// year when zero. Tests shorten it (see LeafLifetimeEnv).
	LeafValidity time.Duration
	// EtcdPeerSANs adds AdvertiseAddress and ExtraSANs to the etcd server
	// certificate, whose peers then reach it over the network (an embedded
	// etcd cluster); otherwise etcd is loopback only.
	EtcdPeerSANs bool
}

const (
	defaultClusterDomain = "cluster.local"
	defaultAdminMode     = 0o600
)

// withDefaults validates o and fills in defaults. It touches nothing on disk.
func (o Options) withDefaults() (Options, error) {
	if o.Dir == "" {
		return o, fmt.Errorf("tls: no certificate directory given (Options.Dir is empty)")
	}
	dir, err := filepath.Abs(o.Dir)
	if err != nil {
		return o, fmt.Errorf("tls: cannot resolve directory %q: %w", o.Dir, err)
	}
	o.Dir = dir
	if o.KubeconfigDir == "" {
		o.KubeconfigDir = filepath.Dir(o.Dir)
	}
	if o.KubeconfigDir, err = filepath.Abs(o.KubeconfigDir); err != nil {
		return o, fmt.Errorf("tls: cannot resolve kubeconfig directory: %w", err)
	}
	if o.ClusterDomain == "" {
		o.ClusterDomain = defaultClusterDomain
	}
	o.ClusterDomain = strings.TrimSuffix(strings.ToLower(o.ClusterDomain), ".")
	if !validDNSName(o.ClusterDomain) {
		return o, fmt.Errorf("tls: cluster domain %q is not a valid DNS name", o.ClusterDomain)
	}
	if o.APIServerPort <= 0 || o.APIServerPort > 65535 {
		return o, fmt.Errorf("tls: API server port %d is out of range 1-65535", o.APIServerPort)
	}
	if o.AdminKubeconfigMode == 0 {
		o.AdminKubeconfigMode = defaultAdminMode
	}
	if o.AdminKubeconfigMode&^os.ModePerm != 0 {
		return o, fmt.Errorf("tls: admin kubeconfig mode %v is not a permission mode", o.AdminKubeconfigMode)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.LeafValidity == 0 {
		o.LeafValidity = leafValidity
	}
	if o.LeafValidity < minLeafValidity {
		return o, fmt.Errorf("tls: leaf certificate lifetime %v is shorter than %v", o.LeafValidity, minLeafValidity)
	}
	if o.ServiceCIDR != nil {
		if _, err := firstIP(o.ServiceCIDR); err != nil {
			return o, err
		}
	}
	for _, s := range o.ExtraSANs {
		if _, _, err := parseSAN(s); err != nil {
			return o, fmt.Errorf("tls: --tls-san %q: %w", s, err)
		}
	}
	return o, nil
}

// sanSet is an ordered, de-duplicated set of subject alternative names.
type sanSet struct {
	dns  []string
	ips  []net.IP
	seen map[string]bool
}

func (s *sanSet) addDNS(name string) {
	name = strings.TrimSuffix(strings.ToLower(strings.TrimSpace(name)), ".")
	if name == "" || s.seen["dns:"+name] {
		return
	}
	if s.seen == nil {
		s.seen = map[string]bool{}
	}
	s.seen["dns:"+name] = true
	s.dns = append(s.dns, name)
}

func (s *sanSet) addIP(ip net.IP) {
	if ip == nil {
		return
	}
	if v4 := ip.To4(); v4 != nil {
		ip = v4
	}
	key := "ip:" + ip.String()
	if s.seen[key] {
		return
	}
	if s.seen == nil {
		s.seen = map[string]bool{}
	}
	s.seen[key] = true
	s.ips = append(s.ips, ip)
}

// add adds a value that is either an IP address or a DNS name. Callers
// validate values with parseSAN first.
func (s *sanSet) add(v string) {
	ip, dns, err := parseSAN(v)
	switch {
	case err != nil:
	case ip != nil:
		s.addIP(ip)
	default:
		s.addDNS(dns)
	}
}

// parseSAN classifies v as an IP address or a DNS name. Empty values yield
// neither and no error.
func parseSAN(v string) (net.IP, string, error) {
	v = strings.TrimSpace(v)
	if v == "" {
		return nil, "", nil
	}
	if ip := net.ParseIP(strings.Trim(v, "[]")); ip != nil {
		return ip, "", nil
	}
	name := strings.TrimSuffix(strings.ToLower(v), ".")
	if ip := net.ParseIP(name); ip != nil {
		// "10.0.0.5." is that address, not a DNS name made of digits that
		// clients connecting to 10.0.0.5 would not match (found by FuzzParseSAN).
		return ip, "", nil
	}
	if !validDNSName(name) {
		return nil, "", fmt.Errorf("neither an IP address nor a valid DNS name")
	}
	return nil, name, nil
}

// validDNSName accepts host names with an optional leading "*." wildcard.
func validDNSName(name string) bool {
	name = strings.TrimPrefix(name, "*.")
	if name == "" || len(name) > 253 {
		return false
	}
	for _, label := range strings.Split(name, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, c := range label {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}

// firstIP returns the first usable address of cidr (10.43.0.1 for 10.43.0.0/16).
func firstIP(cidr *net.IPNet) (net.IP, error) {
	ip := cidr.IP.Mask(cidr.Mask)
	if ip == nil {
		return nil, fmt.Errorf("tls: service CIDR %v is invalid", cidr)
	}
	ip = append(net.IP(nil), ip...)
	for i := len(ip) - 1; i >= 0; i-- {
		ip[i]++
		if ip[i] != 0 {
			break
		}
	}
	if !cidr.Contains(ip) {
		return nil, fmt.Errorf("tls: service CIDR %v is too small to hold a service IP", cidr)
	}
	return ip, nil
}

// servingSANs computes the API server serving certificate's SANs.
func (o Options) servingSANs() sanSet {
	var s sanSet
	s.add(o.Hostname)
	for _, v := range o.ExtraSANs {
		s.add(v)
	}
	s.addIP(net.IPv4(127, 0, 0, 1))
	s.addIP(net.IPv6loopback)
	s.addDNS("localhost")
	s.addIP(o.AdvertiseAddress)
	s.addIP(o.APIServerHost)
	s.addDNS("kubernetes")
	s.addDNS("kubernetes.default")
	s.addDNS("kubernetes.default.svc")
	s.addDNS("kubernetes.default.svc." + o.ClusterDomain)
	if o.ServiceCIDR != nil {
		if ip, err := firstIP(o.ServiceCIDR); err == nil {
			s.addIP(ip)
		}
	}
	return s
}

// etcdServerSANs computes the embedded etcd server certificate's SANs.
func (o Options) etcdServerSANs() sanSet {
	var s sanSet
	s.addDNS("localhost")
	s.addIP(net.IPv4(127, 0, 0, 1))
	s.addIP(net.IPv6loopback)
	s.add(o.Hostname)
	if !o.EtcdPeerSANs {
		return s
	}
	if o.AdvertiseAddress != nil {
		s.addIP(o.AdvertiseAddress)
	}
	for _, san := range o.ExtraSANs {
		s.add(san)
	}
	return s
}
