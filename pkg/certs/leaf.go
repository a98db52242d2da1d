package certs

import (
	"crypto"
	"crypto/x509"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"
)

// leafState is a leaf certificate after planning: reused or newly minted.
type leafState struct {
	certPEM, keyPEM []byte
	cert            *x509.Certificate
}

// planLeaf reuses the leaf at spec.kp when it is intact, verifies against its
// CA, has more than a third of its life left and matches spec; otherwise it plans
// a re-issue. Unreadable, unparseable or mismatched files are errors.
func (p *planner) planLeaf(spec *leafSpec) (*leafState, error) {
	certPEM, err := readOptional(spec.kp.Cert)
	if err != nil {
		return nil, err
	}
	keyPEM, err := readOptional(spec.kp.Key)
	if err != nil {
		return nil, err
	}
	var cert *x509.Certificate
	var key crypto.Signer
	if certPEM != nil {
		if cert, err = parseCertPEM(spec.kp.Cert, certPEM); err != nil {
			return nil, err
		}
	}
	if keyPEM != nil {
		if key, err = parseKeyPEM(spec.kp.Key, keyPEM); err != nil {
			return nil, err
		}
	}
	if cert != nil && key != nil {
		if err := checkMatch(spec.kp, cert, key); err != nil {
			return nil, err
		}
	}
	reason := p.reissueReason(spec, cert, key)
	if reason == "" {
		p.tightenKeyMode(spec.kp.Key)
		p.log.V(4).Info("Reusing certificate", "name", spec.name, "cert", spec.kp.Cert)
		return &leafState{certPEM: certPEM, keyPEM: keyPEM, cert: cert}, nil
	}
	if err := checkMintClock(p.now, "the "+spec.name+" certificate"); err != nil {
		return nil, err
	}
	// Keep an existing key so that only the certificate file changes: a
	// crash can then never leave a mismatched pair behind.
	newKeyPEM := []byte(nil)
	if key == nil {
		if key, newKeyPEM, err = newKey(); err != nil {
			return nil, err
		}
		keyPEM = newKeyPEM
	}
	cert, certPEM2, err := mintLeaf(spec, key.Public(), p.now, p.leafValidity)
	if err != nil {
		return nil, err
	}
	p.log.Info("Issuing certificate", "name", spec.name, "cert", spec.kp.Cert, "reason", reason)
	why := spec.name + ": " + reason
	ops := []fileOp{{path: spec.kp.Cert, data: certPEM2, mode: certMode, why: why, created: certPEM == nil}}
	if newKeyPEM != nil {
		// Written after the certificate: a crash in between leaves a
		// certificate without key, which the next start re-issues.
		ops = append(ops, fileOp{path: spec.kp.Key, data: newKeyPEM, mode: keyMode, why: why, created: true})
	} else {
		p.tightenKeyMode(spec.kp.Key)
	}
	p.group(ops...)
	p.renewed = append(p.renewed, spec.name)
	return &leafState{certPEM: certPEM2, keyPEM: keyPEM, cert: cert}, nil
}

// reissueReason returns why the leaf must be issued again, or "" to reuse it.
func (p *planner) reissueReason(spec *leafSpec, cert *x509.Certificate, key crypto.Signer) string {
	switch {
	case spec.ca.created:
		return "its CA is new"
	case cert == nil:
		return "certificate missing"
	case key == nil:
		return "key missing"
	}
	roots := x509.NewCertPool()
	roots.AddCert(spec.ca.cert)
	if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, CurrentTime: p.now, KeyUsages: spec.usages}); err != nil {
		return fmt.Sprintf("does not verify against the %s: %v", spec.ca.name, err)
	}
	if dueForRenewal(cert, p.now) && cert.NotAfter.Before(spec.ca.cert.NotAfter) {
		return "expires at " + cert.NotAfter.UTC().Format(timeFormat)
	}
	if d := specDiff(spec, cert); d != "" {
		return d + " changed"
	}
	return ""
}

// dueForRenewal reports whether less than renewFraction of cert's life
// (NotBefore to NotAfter) is left at now.
func dueForRenewal(cert *x509.Certificate, now time.Time) bool {
	return !now.Before(RenewalTime(cert))
}

// RenewalTime is when cert becomes due for renewal: once less than a third
// of its life is left (about four months for a one-year leaf).
func RenewalTime(cert *x509.Certificate) time.Time {
	life := cert.NotAfter.Sub(cert.NotBefore)
	return cert.NotAfter.Add(-time.Duration(float64(life) * renewFraction))
}

// specDiff names the first property of cert that differs from spec, or "".
func specDiff(spec *leafSpec, cert *x509.Certificate) string {
	if cert.Subject.CommonName != spec.cn || !sameStrings(cert.Subject.Organization, spec.orgs) {
		return "subject"
	}
	if !sameStrings(lowerAll(cert.DNSNames), spec.dns) {
		return "DNS names"
	}
	if !sameStrings(ipStrings(cert.IPAddresses), ipStrings(spec.ips)) {
		return "IP addresses"
	}
	var have, want []string
	for _, u := range cert.ExtKeyUsage {
		have = append(have, fmt.Sprint(u))
	}
	for _, u := range spec.usages {
		want = append(want, fmt.Sprint(u))
	}
	if !sameStrings(have, want) {
		return "extended key usages"
	}
	return ""
}

// sameStrings compares a and b as sets.
func sameStrings(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(slices.Compact(a), slices.Compact(b))
}

func lowerAll(s []string) []string {
	out := make([]string, len(s))
	for i, v := range s {
		out[i] = strings.ToLower(v)
	}
	return out
}

func ipStrings(ips []net.IP) []string {
	out := make([]string, len(ips))
	for i, ip := range ips {
		out[i] = ip.String()
	}
	return out
}
