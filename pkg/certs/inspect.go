package certs

import (
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"strings"
	"time"
)

// Entry is one certificate of the PKI. Name is how `edgeplane certs check`
// lists it and what `edgeplane certs rotate --service` accepts.
type Entry struct {
	Name string
	Pair KeyPair
	// CA signs this certificate; nil for the CAs themselves.
	CA *KeyPair
}

// Entries lists the CAs, then the leaf certificates, of p.
func (p *PKI) Entries() []Entry {
	leaf := func(name string, kp, ca KeyPair) Entry { return Entry{Name: name, Pair: kp, CA: &ca} }
	return []Entry{
		{Name: "server-ca", Pair: p.ServerCA},
		{Name: "kubelet-serving-ca", Pair: p.KubeletServingCA},
		{Name: "client-ca", Pair: p.ClientCA},
		{Name: "front-proxy-ca", Pair: p.FrontProxyCA},
		{Name: "etcd-ca", Pair: p.EtcdCA},
		leaf("apiserver", p.APIServerServing, p.ServerCA),
		leaf("apiserver-kubelet-client", p.APIServerKubeletClient, p.ClientCA),
		leaf("front-proxy-client", p.FrontProxyClient, p.FrontProxyCA),
		leaf("etcd-server", p.EtcdServer, p.EtcdCA),
		leaf("etcd-client", p.EtcdClient, p.EtcdCA),
		leaf("admin", p.Admin, p.ClientCA),
		leaf("controller-manager", p.ControllerManager, p.ClientCA),
		leaf("scheduler", p.Scheduler, p.ClientCA),
	}
}

// LeafNames lists the names of the leaf certificates, in order.
func (p *PKI) LeafNames() []string {
	var names []string
	for _, e := range p.Entries() {
		if e.CA != nil {
			names = append(names, e.Name)
		}
	}
	return names
}

// CertInfo describes one certificate on disk.
type CertInfo struct {
	Entry
	Subject, Issuer     string
	DNSNames            []string
	IPAddresses         []net.IP
	NotBefore, NotAfter time.Time
	// RenewAt is when the server renews a leaf (zero for CAs, which are
	// never renewed automatically).
	RenewAt time.Time
	// Err is why the certificate could not be read; the other fields are
	// then empty.
	Err error
}

// SANs joins the subject alternative names for display.
func (c CertInfo) SANs() string {
	var s []string
	s = append(s, c.DNSNames...)
	for _, ip := range c.IPAddresses {
		s = append(s, ip.String())
	}
	return strings.Join(s, ",")
}

// Inspect reads every certificate of p. A missing or damaged file yields an
// entry with Err set rather than an error, so that one bad file does not hide
// the others.
func Inspect(p *PKI) []CertInfo {
	var out []CertInfo
	for _, e := range p.Entries() {
		info := CertInfo{Entry: e}
		cert, err := readCert(e.Pair.Cert)
		if err != nil {
			info.Err = err
			out = append(out, info)
			continue
		}
		info.Subject = cert.Subject.String()
		info.Issuer = cert.Issuer.String()
		info.DNSNames = cert.DNSNames
		info.IPAddresses = cert.IPAddresses
		info.NotBefore, info.NotAfter = cert.NotBefore, cert.NotAfter
		if e.CA != nil {
			info.RenewAt = RenewalTime(cert)
		}
		out = append(out, info)
	}
	return out
}

func readCert(path string) (*x509.Certificate, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("tls: cannot read %s: %v", path, causeOf(err))
	}
	return parseCertPEM(path, b)
}
