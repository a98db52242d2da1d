package certs

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"

	"k8s.io/client-go/util/keyutil"
)

// KeyPair holds the absolute paths of a PEM certificate and its PEM private key.
type KeyPair struct{ Cert, Key string }

// LoadKeyPair reads and parses kp, checking that the key matches the
// certificate. Other packages use it to sign with a CA (for example CSR
// signing in the controller manager).
func LoadKeyPair(kp KeyPair) (*x509.Certificate, crypto.Signer, error) {
	certPEM, err := os.ReadFile(kp.Cert)
	if err != nil {
		return nil, nil, fmt.Errorf("tls: cannot read %s: %v", kp.Cert, causeOf(err))
	}
	keyPEM, err := os.ReadFile(kp.Key)
	if err != nil {
		return nil, nil, fmt.Errorf("tls: cannot read %s: %v", kp.Key, causeOf(err))
	}
	cert, err := parseCertPEM(kp.Cert, certPEM)
	if err != nil {
		return nil, nil, err
	}
	key, err := parseKeyPEM(kp.Key, keyPEM)
	if err != nil {
		return nil, nil, err
	}
	if err := checkMatch(kp, cert, key); err != nil {
		return nil, nil, err
	}
	return cert, key, nil
}

// parseCertPEM parses the first CERTIFICATE block of data read from path.
func parseCertPEM(path string, data []byte) (*x509.Certificate, error) {
	rest := data
	for {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			return nil, fmt.Errorf("tls: %s contains no PEM CERTIFICATE block: remove it to have it re-created, or restore it", path)
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("tls: %s holds an unparseable certificate (%v): remove it to have it re-created, or restore it", path, err)
		}
		return cert, nil
	}
}

// parseKeyPEM parses a PEM private key (EC, RSA or PKCS#8) read from path.
func parseKeyPEM(path string, data []byte) (crypto.Signer, error) {
	k, err := keyutil.ParsePrivateKeyPEM(data)
	if err != nil {
		return nil, fmt.Errorf("tls: %s is not a valid PEM private key (%v): remove it to have it re-created, or restore it", path, err)
	}
	s, ok := k.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("tls: %s holds a %T private key, which cannot sign", path, k)
	}
	return s, nil
}

type equaler interface{ Equal(crypto.PublicKey) bool }

// samePublicKey reports whether a and b are the same public key.
func samePublicKey(a, b crypto.PublicKey) bool {
	e, ok := a.(equaler)
	return ok && e.Equal(b)
}

// checkMatch errors when key is not the private key of cert.
func checkMatch(kp KeyPair, cert *x509.Certificate, key crypto.Signer) error {
	if !samePublicKey(cert.PublicKey, key.Public()) {
		return fmt.Errorf("tls: %s does not match %s: remove both to have them re-created, or restore the matching pair", kp.Key, kp.Cert)
	}
	return nil
}

// newKey generates an ECDSA P-256 key, cheap enough for a Raspberry Pi.
func newKey() (crypto.Signer, []byte, error) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("tls: cannot generate a key: %w", err)
	}
	der, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		return nil, nil, fmt.Errorf("tls: cannot encode a key: %w", err)
	}
	return k, pem.EncodeToMemory(&pem.Block{Type: keyutil.ECPrivateKeyBlockType, Bytes: der}), nil
}

func encodeCertPEM(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func encodePublicKeyPEM(pub crypto.PublicKey) ([]byte, error) {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return nil, fmt.Errorf("tls: cannot encode a public key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), nil
}
