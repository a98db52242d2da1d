package certs

import (
	"crypto"
	"crypto/x509"
	"fmt"
	"time"
)

// caState is a CA loaded from disk or minted by this run of Ensure.
type caState struct {
	name    string // "cluster CA", for messages
	kp      KeyPair
	cert    *x509.Certificate
	key     crypto.Signer
	certPEM []byte
	created bool
}

// planCA loads the CA at kp, or plans its creation when neither file exists.
// A CA is never replaced automatically: a half-present, damaged, mismatched,
// not-yet-valid or expired CA is an error the operator must resolve.
func (p *planner) planCA(name, cn string, kp KeyPair) (*caState, error) {
	certPEM, err := readOptional(kp.Cert)
	if err != nil {
		return nil, err
	}
	keyPEM, err := readOptional(kp.Key)
	if err != nil {
		return nil, err
	}
	st := &caState{name: name, kp: kp}
	switch {
	case certPEM == nil && keyPEM == nil:
		return st, p.mintCA(st, cn)
	case keyPEM == nil:
		return nil, fmt.Errorf("tls: the %s certificate %s exists but its key %s does not: restore the key, or remove the certificate to have a new CA created (clients must then trust the new CA)", name, kp.Cert, kp.Key)
	case certPEM == nil:
		return nil, fmt.Errorf("tls: the %s key %s exists but its certificate %s does not: restore the certificate, or remove the key to have a new CA created (clients must then trust the new CA)", name, kp.Key, kp.Cert)
	}
	if st.cert, err = parseCertPEM(kp.Cert, certPEM); err != nil {
		return nil, err
	}
	if st.key, err = parseKeyPEM(kp.Key, keyPEM); err != nil {
		return nil, err
	}
	if err := checkMatch(kp, st.cert, st.key); err != nil {
		return nil, err
	}
	if !st.cert.IsCA || st.cert.KeyUsage&x509.KeyUsageCertSign == 0 {
		return nil, fmt.Errorf("tls: %s is not a CA certificate (it cannot sign certificates): restore the %s, or remove it and %s to have a new one created", kp.Cert, name, kp.Key)
	}
	if p.now.Before(st.cert.NotBefore) {
		return nil, fmt.Errorf("tls: system clock reads %s, before the %s's NotBefore %s (%s): %s",
			p.now.UTC().Format(timeFormat), name, st.cert.NotBefore.UTC().Format(timeFormat), kp.Cert, clockFloorMsg)
	}
	if !p.now.Before(st.cert.NotAfter) {
		return nil, fmt.Errorf("tls: the %s %s expired at %s (clock reads %s): fix the clock if it is wrong, otherwise remove %s and %s to have a new CA created (clients must then trust the new CA)",
			name, kp.Cert, st.cert.NotAfter.UTC().Format(timeFormat), p.now.UTC().Format(timeFormat), kp.Cert, kp.Key)
	}
	if left := st.cert.NotAfter.Sub(p.now); left < renewBefore {
		p.log.Info("CA expires soon and is not renewed automatically; plan to replace it", "ca", name, "cert", kp.Cert, "notAfter", st.cert.NotAfter, "remaining", left.Round(time.Hour))
	}
	st.certPEM = certPEM
	p.tightenKeyMode(kp.Key)
	p.log.V(4).Info("Reusing CA", "ca", name, "cert", kp.Cert)
	return st, nil
}

func (p *planner) mintCA(st *caState, cn string) error {
	if err := checkMintClock(p.now, "the "+st.name); err != nil {
		return err
	}
	key, keyPEM, err := newKey()
	if err != nil {
		return err
	}
	cert, certPEM, err := mintCA(cn, key, p.now)
	if err != nil {
		return err
	}
	st.cert, st.key, st.certPEM, st.created = cert, key, certPEM, true
	why := "new " + st.name
	p.group(
		fileOp{path: st.kp.Key, data: keyPEM, mode: keyMode, why: why, created: true},
		fileOp{path: st.kp.Cert, data: certPEM, mode: certMode, why: why, created: true},
	)
	return nil
}
