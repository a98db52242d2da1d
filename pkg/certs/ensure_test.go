package certs

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

func TestEnsureCreatesFiles(t *testing.T) {
	o := testOptions(t)
	p := mustEnsure(t, o)

	got := snapshot(t, dataDir(o))
	want := []string{
		"admin.kubeconfig", "controller-manager.kubeconfig", "scheduler.kubeconfig",
		"tls/sa.key", "tls/sa.pub", "tls/kubelet-serving-ca-bundle.crt",
	}
	for _, n := range []string{"server-ca", "kubelet-serving-ca", "client-ca", "front-proxy-ca", "front-proxy-client", "apiserver",
		"apiserver-kubelet-client", "admin", "controller-manager", "scheduler", "etcd/ca", "etcd/server", "etcd/client"} {
		want = append(want, "tls/"+n+".crt", "tls/"+n+".key")
	}
	var have []string
	for n := range got {
		have = append(have, n)
	}
	if !slices.Equal(sorted(have...), sorted(want...)) {
		t.Errorf("files:\n got %v\nwant %v", sorted(have...), sorted(want...))
	}
	for n, s := range got {
		wantMode := os.FileMode(0o644)
		if filepath.Ext(n) == ".key" || filepath.Ext(n) == ".kubeconfig" {
			wantMode = 0o600
		}
		if s.mode.Perm() != wantMode {
			t.Errorf("%s: mode %#o, want %#o", n, s.mode.Perm(), wantMode)
		}
	}
	for _, d := range []string{o.Dir, filepath.Join(o.Dir, "etcd")} {
		fi, err := os.Stat(d)
		if err != nil || fi.Mode().Perm() != 0o700 {
			t.Errorf("%s: mode %v (err %v), want 0700", d, fi.Mode().Perm(), err)
		}
	}
	for _, path := range []string{p.ServerCA.Cert, p.Admin.Key, p.ServiceAccountPub, p.AdminKubeconfig} {
		if !filepath.IsAbs(path) {
			t.Errorf("%s is not absolute", path)
		}
	}
	ca := loadCert(t, p.ServerCA.Cert)
	sum := sha256.Sum256(ca.RawSubjectPublicKeyInfo)
	if want := "sha256:" + hex.EncodeToString(sum[:]); p.ServingCAFingerprint != want {
		t.Errorf("fingerprint %q, want %q", p.ServingCAFingerprint, want)
	}
	if _, _, err := LoadKeyPair(KeyPair{Cert: p.ServiceAccountPub, Key: p.ServiceAccountKey}); err == nil {
		t.Errorf("LoadKeyPair accepted a public key file as certificate")
	}
}

func TestServingSANs(t *testing.T) {
	_, v6svc, _ := net.ParseCIDR("fd00:43::/112")
	tests := []struct {
		name    string
		mutate  func(*Options)
		wantDNS []string
		wantIPs []string
	}{{
		name: "defaults",
		wantDNS: []string{"node1", "edge.example.com", "localhost", "kubernetes", "kubernetes.default",
			"kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
		wantIPs: []string{"10.0.0.5", "127.0.0.1", "::1", "192.168.1.10", "10.43.0.1"},
	}, {
		name: "duplicates, custom domain, no advertise address, IPv6 service CIDR",
		mutate: func(o *Options) {
			o.ExtraSANs = []string{"127.0.0.1", "NODE1", "Kubernetes", " 2001:db8::7 ", "", "[fd00::9]"}
			o.AdvertiseAddress = nil
			o.ClusterDomain = "edge.internal"
			o.ServiceCIDR = v6svc
		},
		wantDNS: []string{"node1", "localhost", "kubernetes", "kubernetes.default",
			"kubernetes.default.svc", "kubernetes.default.svc.edge.internal"},
		wantIPs: []string{"127.0.0.1", "2001:db8::7", "fd00::9", "::1", "fd00:43::1"},
	}, {
		name: "hostname is an IP, no service CIDR, default domain",
		mutate: func(o *Options) {
			o.Hostname = "10.1.2.3"
			o.ExtraSANs = []string{"*.edge.example.com"}
			o.AdvertiseAddress = net.ParseIP("10.1.2.3")
			o.ServiceCIDR = nil
			o.ClusterDomain = ""
		},
		wantDNS: []string{"*.edge.example.com", "localhost", "kubernetes", "kubernetes.default",
			"kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
		wantIPs: []string{"10.1.2.3", "127.0.0.1", "::1"},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := testOptions(t)
			if tc.mutate != nil {
				tc.mutate(&o)
			}
			p := mustEnsure(t, o)
			c := loadCert(t, p.APIServerServing.Cert)
			if !slices.Equal(sorted(c.DNSNames...), sorted(tc.wantDNS...)) {
				t.Errorf("DNS SANs %v, want %v", c.DNSNames, tc.wantDNS)
			}
			if got := ipStrings(c.IPAddresses); !slices.Equal(sorted(got...), sorted(tc.wantIPs...)) {
				t.Errorf("IP SANs %v, want %v", got, tc.wantIPs)
			}
			for _, h := range append(tc.wantDNS, tc.wantIPs...) {
				if h[0] == '*' {
					h = "x" + h[1:]
				}
				if err := c.VerifyHostname(h); err != nil {
					t.Errorf("VerifyHostname(%s): %v", h, err)
				}
			}
		})
	}
}

func TestEtcdServerSANs(t *testing.T) {
	o := testOptions(t)
	p := mustEnsure(t, o)
	c := loadCert(t, p.EtcdServer.Cert)
	if want := []string{"localhost", "node1"}; !slices.Equal(sorted(c.DNSNames...), want) {
		t.Errorf("etcd DNS SANs %v, want %v", c.DNSNames, want)
	}
	if got, want := sorted(ipStrings(c.IPAddresses)...), sorted("127.0.0.1", "::1"); !slices.Equal(got, want) {
		t.Errorf("etcd IP SANs %v, want %v", got, want)
	}
}

func TestCertificateProperties(t *testing.T) {
	o := testOptions(t)
	p := mustEnsure(t, o)

	for _, ca := range []KeyPair{p.ServerCA, p.ClientCA, p.FrontProxyCA, p.EtcdCA} {
		c := loadCert(t, ca.Cert)
		if !c.IsCA || !c.BasicConstraintsValid {
			t.Errorf("%s: IsCA=%v BasicConstraintsValid=%v", ca.Cert, c.IsCA, c.BasicConstraintsValid)
		}
		if want := x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature; c.KeyUsage != want {
			t.Errorf("%s: key usage %v, want %v", ca.Cert, c.KeyUsage, want)
		}
		if !c.NotBefore.Equal(base.Add(-5*time.Minute)) || !c.NotAfter.Equal(base.Add(10*365*24*time.Hour)) {
			t.Errorf("%s: validity %v..%v", ca.Cert, c.NotBefore, c.NotAfter)
		}
		if err := c.CheckSignatureFrom(c); err != nil {
			t.Errorf("%s is not self-signed: %v", ca.Cert, err)
		}
	}

	subjects := map[string]struct {
		cn   string
		orgs []string
	}{
		"apiserver":                {"kube-apiserver", nil},
		"apiserver-kubelet-client": {"kube-apiserver-kubelet-client", []string{"system:masters"}},
		"front-proxy-client":       {"front-proxy-client", nil},
		"etcd-server":              {"etcd-server", nil},
		"etcd-client":              {"etcd-client", nil},
		"admin":                    {"admin", []string{"system:masters"}},
		"controller-manager":       {"system:kube-controller-manager", nil},
		"scheduler":                {"system:kube-scheduler", nil},
	}
	for _, l := range leafCerts(p) {
		t.Run(l.name, func(t *testing.T) {
			if err := verifyLeaf(t, l.leaf, l.ca, l.usages, base); err != nil {
				t.Errorf("does not verify against %s for %v: %v", l.ca.Cert, l.usages, err)
			}
			c, key, err := LoadKeyPair(l.leaf)
			if err != nil {
				t.Fatal(err)
			}
			if c.IsCA {
				t.Errorf("leaf is a CA")
			}
			if want := x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment; c.KeyUsage != want {
				t.Errorf("key usage %v, want %v", c.KeyUsage, want)
			}
			if ec, ok := key.Public().(*ecdsa.PublicKey); !ok || ec.Curve != elliptic.P256() {
				t.Errorf("key is %T, want ECDSA P-256", key.Public())
			}
			if !c.NotBefore.Equal(base.Add(-5*time.Minute)) || !c.NotAfter.Equal(base.Add(365*24*time.Hour)) {
				t.Errorf("validity %v..%v", c.NotBefore, c.NotAfter)
			}
			if s, ok := subjects[l.name]; ok {
				if c.Subject.CommonName != s.cn || !slices.Equal(c.Subject.Organization, s.orgs) {
					t.Errorf("subject CN=%q O=%v, want CN=%q O=%v", c.Subject.CommonName, c.Subject.Organization, s.cn, s.orgs)
				}
			}
		})
	}
	// A client certificate must not be usable as a server certificate and vice versa.
	if err := verifyLeaf(t, p.Admin, p.ClientCA, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, base); err == nil {
		t.Errorf("admin certificate verifies for server auth")
	}
	if err := verifyLeaf(t, p.APIServerServing, p.ServerCA, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, base); err == nil {
		t.Errorf("serving certificate verifies for client auth")
	}
	if err := verifyLeaf(t, p.Admin, p.ServerCA, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, base); err == nil {
		t.Errorf("admin certificate verifies against the server CA")
	}
}

func TestLoadKeyPair(t *testing.T) {
	o := testOptions(t)
	p := mustEnsure(t, o)
	c, key, err := LoadKeyPair(p.ClientCA)
	if err != nil {
		t.Fatal(err)
	}
	if !c.IsCA || !samePublicKey(c.PublicKey, key.Public()) {
		t.Errorf("LoadKeyPair returned an inconsistent CA")
	}
	_, _, err = LoadKeyPair(KeyPair{Cert: p.ClientCA.Cert, Key: p.ServerCA.Key})
	wantErrContains(t, err, p.ServerCA.Key+" does not match "+p.ClientCA.Cert)
	_, _, err = LoadKeyPair(KeyPair{Cert: p.ClientCA.Cert, Key: filepath.Join(o.Dir, "nope.key")})
	wantErrContains(t, err, "nope.key", "no such file")
}
