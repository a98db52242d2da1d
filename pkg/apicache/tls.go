package apicache

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"slices"
	"sync"
	"time"
)

// localTLS is the cache's serving certificate for 127.0.0.1, from a CA made
// at each start whose key never leaves memory; the node's parts trust it
// through their kubeconfig (Config.LocalCAFile).
func localTLS(node string) (serving tls.Certificate, caPEM []byte, err error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "edgeplane node API cache CA, " + node},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(100 * 365 * 24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: "edgeplane node API cache"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     ca.NotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		DNSNames:     []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key},
		pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), nil
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	return n
}

// verifyNode accepts only client certificates of the node itself: chained
// to the cluster's client CA, for client auth, with the node's user name
// in system:nodes. The cache forwards with the node's credentials, so any
// other client (a host-network pod on 127.0.0.1) must not get through.
func verifyNode(roots *x509.CertPool, node string) func([][]byte, [][]*x509.Certificate) error {
	return func(raw [][]byte, _ [][]*x509.Certificate) error {
		if len(raw) == 0 {
			return errors.New("api cache: no client certificate")
		}
		leaf, err := x509.ParseCertificate(raw[0])
		if err != nil {
			return fmt.Errorf("api cache: client certificate: %w", err)
		}
		inter := x509.NewCertPool()
		for _, r := range raw[1:] {
			if c, err := x509.ParseCertificate(r); err == nil {
				inter.AddCert(c)
			}
		}
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
			return fmt.Errorf("api cache: client certificate: %w", err)
		}
		if leaf.Subject.CommonName != "system:node:"+node || !slices.Contains(leaf.Subject.Organization, "system:nodes") {
			return fmt.Errorf("api cache: client %q is not node %s", leaf.Subject.CommonName, node)
		}
		return nil
	}
}

// nodeCert is the node's current client certificate (certificate and key
// in one PEM file, as the kubelet keeps it), read again when the file
// changes (the kubelet rotates it).
type nodeCert struct {
	path string

	mu      sync.Mutex
	modTime time.Time
	size    int64
	cert    *tls.Certificate
}

func (n *nodeCert) get(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	st, err := os.Stat(n.path)
	if err != nil {
		return nil, fmt.Errorf("api cache: the node's client certificate: %w", err)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cert != nil && st.ModTime().Equal(n.modTime) && st.Size() == n.size {
		return n.cert, nil
	}
	c, err := tls.LoadX509KeyPair(n.path, n.path)
	if err != nil {
		return nil, fmt.Errorf("api cache: the node's client certificate: %w", err)
	}
	n.cert, n.modTime, n.size = &c, st.ModTime(), st.Size()
	return n.cert, nil
}

// readPool reads a PEM bundle of CA certificates.
func readPool(path string) (*x509.CertPool, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		return nil, fmt.Errorf("%s holds no PEM certificate", path)
	}
	return pool, nil
}
