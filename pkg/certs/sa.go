package certs

import (
	"crypto"
	"fmt"

	"k8s.io/client-go/util/keyutil"
)

// planServiceAccountKey loads or plans the service-account token signing key
// (sa.key) and its public half (sa.pub). Like a CA, the key is never replaced
// automatically: tokens signed with it would stop validating.
func (p *planner) planServiceAccountKey(keyPath, pubPath string) error {
	keyPEM, err := readOptional(keyPath)
	if err != nil {
		return err
	}
	pubPEM, err := readOptional(pubPath)
	if err != nil {
		return err
	}
	if keyPEM == nil {
		if pubPEM != nil {
			return fmt.Errorf("tls: the service-account public key %s exists but its private key %s does not: restore the private key, or remove %s to have a new pair created (existing service-account tokens then stop working)", pubPath, keyPath, pubPath)
		}
		key, keyPEM, err := newKey()
		if err != nil {
			return err
		}
		pubPEM, err := encodePublicKeyPEM(key.Public())
		if err != nil {
			return err
		}
		p.log.Info("Creating service-account signing key", "key", keyPath)
		p.group(
			fileOp{path: keyPath, data: keyPEM, mode: keyMode, why: "new service-account key", created: true},
			fileOp{path: pubPath, data: pubPEM, mode: certMode, why: "new service-account key", created: true},
		)
		return nil
	}
	key, err := parseKeyPEM(keyPath, keyPEM)
	if err != nil {
		return err
	}
	p.tightenKeyMode(keyPath)
	if pubPEM == nil {
		pubPEM, err := encodePublicKeyPEM(key.Public())
		if err != nil {
			return err
		}
		p.log.Info("Writing missing service-account public key", "pub", pubPath)
		p.group(fileOp{path: pubPath, data: pubPEM, mode: certMode, why: "service-account public key missing", created: true})
		return nil
	}
	pubs, err := keyutil.ParsePublicKeysPEM(pubPEM)
	if err != nil {
		return fmt.Errorf("tls: %s is not a valid PEM public key (%v): remove it to have it re-derived from %s, or restore it", pubPath, err, keyPath)
	}
	for _, pub := range pubs {
		if samePublicKey(key.Public(), crypto.PublicKey(pub)) {
			return nil
		}
	}
	return fmt.Errorf("tls: %s does not match %s: remove %s to have it re-derived from the private key, or restore the matching pair", pubPath, keyPath, pubPath)
}
