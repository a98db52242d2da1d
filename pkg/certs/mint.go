package certs

import (
	"crypto"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"math/big"
	"net"
	"time"
)

const (
	caValidity   = 10 * 365 * 24 * time.Hour
	leafValidity = 365 * 24 * time.Hour
	renewBefore  = 90 * 24 * time.Hour // CAs: warn this long before expiry
	// renewFraction: leaves are renewed once less than this part of their
	// life is left, at start and while running.
	renewFraction = 1.0 / 3
	clockSkew     = 5 * time.Minute
	timeFormat    = time.RFC3339
	clockFloorMsg = "set the clock (NTP, or an RTC) and start again"
)

// clockFloor is the earliest time at which certificates are minted: boards
// without an RTC boot in 1970, and certificates minted then would become
// useless once the clock is set.
var clockFloor = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// checkMintClock refuses to mint certificates while the clock is implausible.
func checkMintClock(now time.Time, what string) error {
	if now.Before(clockFloor) {
		return fmt.Errorf("tls: system clock reads %s, before %s: refusing to create %s: %s",
			now.UTC().Format(timeFormat), clockFloor.Format(timeFormat), what, clockFloorMsg)
	}
	return nil
}

func newSerial() (*big.Int, error) {
	s, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("tls: cannot generate a serial number: %w", err)
	}
	return s.Add(s, big.NewInt(1)), nil
}

// mintCA creates a self-signed CA certificate for key.
func mintCA(cn string, key crypto.Signer, now time.Time) (*x509.Certificate, []byte, error) {
	serial, err := newSerial()
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: fmt.Sprintf("%s@%d", cn, now.Unix())},
		NotBefore:             now.Add(-clockSkew).UTC(),
		NotAfter:              now.Add(caValidity).UTC(),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	return sign(tmpl, tmpl, key.Public(), key)
}

// leafSpec describes a leaf certificate Ensure maintains.
type leafSpec struct {
	name   string // human name for logs
	kp     KeyPair
	ca     *caState
	cn     string
	orgs   []string
	dns    []string
	ips    []net.IP
	usages []x509.ExtKeyUsage
}

// mintLeaf signs a certificate for pub as described by spec, valid for
// validity from now. Its validity is capped at the CA's NotAfter.
func mintLeaf(spec *leafSpec, pub crypto.PublicKey, now time.Time, validity time.Duration) (*x509.Certificate, []byte, error) {
	serial, err := newSerial()
	if err != nil {
		return nil, nil, err
	}
	notAfter := now.Add(validity)
	if ca := spec.ca.cert; notAfter.After(ca.NotAfter) {
		notAfter = ca.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: spec.cn, Organization: spec.orgs},
		NotBefore:             now.Add(-backdate(validity)).UTC(),
		NotAfter:              notAfter.UTC(),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:           spec.usages,
		BasicConstraintsValid: true,
		DNSNames:              spec.dns,
		IPAddresses:           spec.ips,
	}
	return sign(tmpl, spec.ca.cert, pub, spec.ca.key)
}

// backdate is how far before now a leaf's NotBefore lies, to tolerate clock
// skew: clockSkew, or a tenth of a short (test) validity, so that the backdated
// part never dominates the certificate's life.
func backdate(validity time.Duration) time.Duration {
	return min(clockSkew, validity/10)
}

func sign(tmpl, parent *x509.Certificate, pub crypto.PublicKey, signer crypto.Signer) (*x509.Certificate, []byte, error) {
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, pub, signer)
	if err != nil {
		return nil, nil, fmt.Errorf("tls: cannot sign certificate %q: %w", tmpl.Subject.CommonName, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, fmt.Errorf("tls: cannot parse freshly signed certificate: %w", err)
	}
	return cert, encodeCertPEM(der), nil
}
