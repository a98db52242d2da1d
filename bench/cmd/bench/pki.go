package main

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// kubeadmPKI writes, under dir, the certificates and keys kubeadm's "init
// phase certs" creates for a single control-plane host (same file names), for
// the upstream baseline. Keys are ECDSA P-256, as edgeplane's are.
func kubeadmPKI(dir string) error {
	if err := os.MkdirAll(filepath.Join(dir, "etcd"), 0o700); err != nil {
		return err
	}
	ca, err := newCA("kubernetes")
	if err != nil {
		return err
	}
	fp, err := newCA("front-proxy-ca")
	if err != nil {
		return err
	}
	etcdCA, err := newCA("etcd-ca")
	if err != nil {
		return err
	}
	loop := []net.IP{net.IPv4(127, 0, 0, 1)}
	serving := leafSpec{
		cn:    "kube-apiserver",
		dns:   []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
		ips:   append(loop, net.IPv4(10, 96, 0, 1)),
		usage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	client := func(cn string, orgs ...string) leafSpec {
		return leafSpec{cn: cn, orgs: orgs, usage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	}
	etcdServer := leafSpec{
		cn: "bench", dns: []string{"localhost"}, ips: loop,
		usage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	files := []struct {
		name string
		ca   *authority
		spec leafSpec
	}{
		{"apiserver", ca, serving},
		{"apiserver-kubelet-client", ca, client("kube-apiserver-kubelet-client", "kubeadm:cluster-admins")},
		{"admin", ca, client("bench-admin", "system:masters")},
		{"controller-manager", ca, client("system:kube-controller-manager")},
		{"scheduler", ca, client("system:kube-scheduler")},
		{"front-proxy-client", fp, client("front-proxy-client")},
		{"etcd/server", etcdCA, etcdServer},
		{"etcd/peer", etcdCA, etcdServer},
		{"apiserver-etcd-client", etcdCA, client("kube-apiserver-etcd-client")},
	}
	for _, ca := range []struct {
		name string
		ca   *authority
	}{{"ca", ca}, {"front-proxy-ca", fp}, {"etcd/ca", etcdCA}} {
		if err := writePair(dir, ca.name, ca.ca.cert.Raw, ca.ca.key); err != nil {
			return err
		}
	}
	for _, f := range files {
		der, key, err := f.ca.issue(f.spec)
		if err != nil {
			return fmt.Errorf("issuing %s: %w", f.name, err)
		}
		if err := writePair(dir, f.name, der, key); err != nil {
			return err
		}
	}
	// The service-account signing key pair.
	sa, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	if err := writeKey(filepath.Join(dir, "sa.key"), sa); err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(sa.Public())
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "sa.pub"), pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o600)
}

type authority struct {
	cert *x509.Certificate
	key  crypto.Signer
}

type leafSpec struct {
	cn    string
	orgs  []string
	dns   []string
	ips   []net.IP
	usage []x509.ExtKeyUsage
}

func serial() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
}

func newCA(cn string) (*authority, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	sn, err := serial()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          sn,
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &authority{cert: cert, key: key}, nil
}

func (a *authority) issue(s leafSpec) ([]byte, crypto.Signer, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	sn, err := serial()
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: sn,
		Subject:      pkix.Name{CommonName: s.cn, Organization: s.orgs},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  s.usage,
		DNSNames:     s.dns,
		IPAddresses:  s.ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, a.cert, key.Public(), a.key)
	return der, key, err
}

func writePair(dir, name string, der []byte, key crypto.Signer) error {
	crt := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	if err := os.WriteFile(filepath.Join(dir, name+".crt"), crt, 0o644); err != nil {
		return err
	}
	return writeKey(filepath.Join(dir, name+".key"), key)
}

func writeKey(path string, key crypto.Signer) error {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600)
}
