// Package nodeidentity binds a node name to the node that first joined
// under it, so that a node token cannot be used to become a node that
// already exists.
//
// Every node holds an identity key of its own (ECDSA P-256, KeyFileName in
// its state dir, 0600), generated at its first join and never sent
// anywhere. Its client certificate requests made with a node token are
// signed with that key, and the certificate they get certifies that key,
// so only its holder can use it. The first such request for a name that
// no Node holds records the key's fingerprint in a Secret in kube-system
// (SecretName); from then on a token request for that name is approved only
// when it is signed by the recorded key. A node that rotates its client
// certificate authenticates as itself and needs no token; a node
// reinstalled from scratch has a new key and is let in again only after an
// admin removes the record (`edgeplane node forget NAME`).
//
// The approver's side is pkg/csrapprover; the node's side is pkg/node.
package nodeidentity

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/edgeplane/edgeplane/internal/atomicfile"
)

// KeyFileName is the identity key's file in a node's state dir
// (<data-dir>/agent).
const KeyFileName = "node-identity.key"

// EnrollLabel, set to EnrollValue on a client certificate request that a
// node makes as itself (authenticated by its current client certificate)
// and signs with its identity key, asks the approver to record that key
// for the node when none is recorded yet: how a node that joined before
// identities were recorded gets one.
const (
	EnrollLabel = "edgeplane.io/node-identity"
	EnrollValue = "enroll"
)

// NodeUserPrefix is how a node's user name starts: system:node:<name>.
const NodeUserPrefix = "system:node:"

// KeyPath is the identity key's path in the node state dir dir.
func KeyPath(dir string) string { return filepath.Join(dir, KeyFileName) }

// LoadKey reads the identity key at path. A missing file is reported with
// os.ErrNotExist; a file that is not an EC private key is an error that
// names the file.
func LoadKey(path string) (*ecdsa.PrivateKey, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("node identity key: %w", err)
	}
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "EC PRIVATE KEY" {
		return nil, fmt.Errorf("node identity key %s: not a PEM \"EC PRIVATE KEY\"; it is this node's proof of its name: restore it from a backup, or remove it and have an admin run `edgeplane node forget NODE` on a server", path)
	}
	key, err := x509.ParseECPrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("node identity key %s: %v; restore it from a backup, or remove it and have an admin run `edgeplane node forget NODE` on a server", path, err)
	}
	return key, nil
}

// LoadOrCreateKey returns the identity key at path, creating it (0600,
// atomically and durably) when there is none; created says which. The
// directory must exist.
func LoadOrCreateKey(path string) (key *ecdsa.PrivateKey, created bool, err error) {
	key, err = LoadKey(path)
	if err == nil || !errors.Is(err, os.ErrNotExist) {
		return key, false, err
	}
	key, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, false, fmt.Errorf("node identity key: %w", err)
	}
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, false, fmt.Errorf("node identity key: %w", err)
	}
	if _, err := atomicfile.Write(path, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		return nil, false, fmt.Errorf("node identity key: %w", err)
	}
	return key, true, nil
}

// KeyPEM is key in the PEM form a kubelet's certificate store keeps.
func KeyPEM(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), nil
}

// Fingerprint is "sha256:<hex>" of pub's SubjectPublicKeyInfo.
func Fingerprint(pub crypto.PublicKey) (string, error) {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return "", fmt.Errorf("node identity: %w", err)
	}
	sum := sha256.Sum256(der)
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}

// ClientRequest is the x509 request of a node's client certificate
// (subject system:node:<node> in system:nodes, as the kubelet's own) signed
// with key, PEM-encoded.
func ClientRequest(key crypto.Signer, node string) ([]byte, error) {
	tmpl := &x509.CertificateRequest{Subject: pkix.Name{
		CommonName:   NodeUserPrefix + node,
		Organization: []string{user.NodesGroup},
	}}
	der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
	if err != nil {
		return nil, fmt.Errorf("node identity: client certificate request: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}), nil
}
