package nodetunnel

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/edgeplane/edgeplane/pkg/certs"
)

// testPKI is a CA and what the tests sign with it, written under a
// t.TempDir: the CA file, and client certificates with their keys in one
// file each (as the kubelet keeps its own).
type testPKI struct {
	dir    string
	ca     *x509.Certificate
	caKey  crypto.Signer
	pool   *x509.CertPool
	CAFile string
	serial int64
}

func newTestPKI(t testing.TB) *testPKI {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(der)
	p := &testPKI{dir: t.TempDir(), ca: ca, caKey: key, pool: x509.NewCertPool(), serial: 1}
	p.pool.AddCert(ca)
	p.CAFile = filepath.Join(p.dir, "ca.pem")
	if err := os.WriteFile(p.CAFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

// serving is a serving certificate for 127.0.0.1.
func (p *testPKI) serving(t testing.TB) tls.Certificate {
	t.Helper()
	c, _ := p.sign(t, &x509.Certificate{
		Subject: pkix.Name{CommonName: "serving"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
	return c
}

// client writes a client certificate for user in groups, and its key, to
// one file, and returns its path.
func (p *testPKI) client(t testing.TB, user string, groups ...string) string {
	t.Helper()
	_, file := p.sign(t, &x509.Certificate{
		Subject:     pkix.Name{CommonName: user, Organization: groups},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	return file
}

func (p *testPKI) sign(t testing.TB, tmpl *x509.Certificate) (tls.Certificate, string) {
	t.Helper()
	p.serial++
	key := newKey(t)
	tmpl.SerialNumber = big.NewInt(p.serial)
	tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(time.Hour)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.ca, &key.PublicKey, p.caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(p.dir, "cert-"+big.NewInt(p.serial).String()+".pem")
	if err := os.WriteFile(file, append(certPEM, keyPEM...), 0o600); err != nil {
		t.Fatal(err)
	}
	return pair, file
}

// pkiOf signs with the CA kp of a real PKI (pkg/certs).
func pkiOf(t testing.TB, kp certs.KeyPair) *testPKI {
	t.Helper()
	ca, key, err := certs.LoadKeyPair(kp)
	if err != nil {
		t.Fatal(err)
	}
	p := &testPKI{dir: t.TempDir(), ca: ca, caKey: key, pool: x509.NewCertPool(), CAFile: kp.Cert, serial: time.Now().UnixNano()}
	p.pool.AddCert(ca)
	return p
}
