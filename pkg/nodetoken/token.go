// Package nodetoken holds node join tokens: kubeadm bootstrap tokens
// ("<id>.<secret>", Secrets of type bootstrap.kubernetes.io/token in
// kube-system) that let a kubelet create its certificate signing request and
// nothing more, the agent's token string that pins the cluster CA
// ("K10<ca-hash>::<id>.<secret>"), the server's default node token in
// <data-dir>/node-token, and the agent side's discovery of the cluster CA
// (Discover).
//
// Node tokens are distinct from the server join token (pkg/join): that one
// unlocks the sealed CA keys; a node token can never read them.
package nodetoken

import (
	"crypto/sha256"
	"crypto/subtle"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"strings"

	bootstraputil "k8s.io/cluster-bootstrap/token/util"
	"k8s.io/cluster-bootstrap/util/tokens"

	"github.com/edgeplane/edgeplane/pkg/join"
)

const (
	// tokenPrefix and sep frame the CA pin in a full token, as in the server
	// join token: K10<ca-hash>::<id>.<secret>.
	tokenPrefix = "K10"
	sep         = "::"
	// spkiPrefix starts kubeadm's CA pin: sha256:<hex of the CA's SubjectPublicKeyInfo>.
	spkiPrefix = "sha256:"
	hexLen     = sha256.Size * 2
)

// Token is a node token: a bootstrap token and the pin of the cluster CA it
// is meant for. A token parsed from "<id>.<secret>" has no pin; add one with
// WithCAPin before Discover.
type Token struct {
	ID     string // 6 characters [a-z0-9]
	Secret string // 16 characters [a-z0-9]
	// CAHash is the hex SHA-256 of the cluster CA certificate file's bytes
	// (join.CAHash), the pin of the K10 form; empty when unknown.
	CAHash string
	// SPKIHash is the hex SHA-256 of the CA's SubjectPublicKeyInfo, kubeadm's
	// --discovery-token-ca-cert-hash without "sha256:"; empty when unknown.
	SPKIHash string
}

// Parse parses "K10<ca-hash>::<id>.<secret>" or a bare "<id>.<secret>".
func Parse(s string) (Token, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return Token{}, errors.New("node token is empty: run `edgeplane token --node` or `edgeplane token create` on a server to get one")
	}
	var t Token
	rest := s
	if strings.Contains(s, sep) {
		if !strings.HasPrefix(s, tokenPrefix) {
			return Token{}, errors.New("node token is not of the form K10<ca-hash>::<id>.<secret>")
		}
		hash, tok, _ := strings.Cut(strings.TrimPrefix(s, tokenPrefix), sep)
		if strings.HasPrefix(tok, "server:") {
			return Token{}, errors.New("this is a server join token (K10...::server:...), which joins servers; a node needs a node token: run `edgeplane token --node` on a server")
		}
		h, err := parseHex(hash, "CA hash")
		if err != nil {
			return Token{}, err
		}
		t.CAHash, rest = h, tok
	}
	id, secret, err := tokens.ParseToken(rest)
	if err != nil {
		return Token{}, fmt.Errorf("node token %q is not <id>.<secret> (6 and 16 characters of a-z, 0-9)", redact(rest))
	}
	t.ID, t.Secret = id, secret
	return t, nil
}

// WithCAPin returns t pinned to a CA given apart from the token: either the
// hex SHA-256 of the CA file (as in K10 tokens) or kubeadm's
// "sha256:<hex of the CA's SubjectPublicKeyInfo>".
func (t Token) WithCAPin(pin string) (Token, error) {
	pin = strings.TrimSpace(pin)
	if rest, ok := strings.CutPrefix(pin, spkiPrefix); ok {
		h, err := parseHex(rest, "CA public key hash")
		if err != nil {
			return Token{}, err
		}
		t.SPKIHash = h
		return t, nil
	}
	h, err := parseHex(pin, "CA hash")
	if err != nil {
		return Token{}, fmt.Errorf("%w (or give kubeadm's sha256:<hex> public key pin)", err)
	}
	t.CAHash = h
	return t, nil
}

func parseHex(s, what string) (string, error) {
	if len(s) != hexLen {
		return "", fmt.Errorf("%s has %d characters, want %d hex digits", what, len(s), hexLen)
	}
	if _, err := hex.DecodeString(s); err != nil {
		return "", fmt.Errorf("%s is not hex: %v", what, err)
	}
	return strings.ToLower(s), nil
}

// redact keeps a token's ID and hides its secret, for error messages.
func redact(s string) string {
	if id, _, ok := strings.Cut(s, "."); ok {
		return id + ".<secret>"
	}
	if len(s) > 6 {
		return s[:6] + "..."
	}
	return s
}

// BootstrapToken is "<id>.<secret>", what a kubelet authenticates with.
func (t Token) BootstrapToken() string { return bootstraputil.TokenFromIDAndSecret(t.ID, t.Secret) }

// String is "K10<ca-hash>::<id>.<secret>" when the CA file hash is known, the
// bare "<id>.<secret>" otherwise.
func (t Token) String() string {
	if t.CAHash == "" {
		return t.BootstrapToken()
	}
	return tokenPrefix + t.CAHash + sep + t.BootstrapToken()
}

// Pinned reports whether t pins a CA.
func (t Token) Pinned() bool { return t.CAHash != "" || t.SPKIHash != "" }

// SPKIHash is kubeadm's pin of a CA: "sha256:<hex of the SubjectPublicKeyInfo>"
// of the first certificate in caPEM.
func SPKIHash(caPEM []byte) (string, error) {
	cert, err := firstCert(caPEM)
	if err != nil {
		return "", err
	}
	return spkiPrefix + spkiHex(cert), nil
}

func spkiHex(c *x509.Certificate) string {
	sum := sha256.Sum256(c.RawSubjectPublicKeyInfo)
	return hex.EncodeToString(sum[:])
}

func firstCert(caPEM []byte) (*x509.Certificate, error) {
	for rest := caPEM; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			return nil, errors.New("the CA is not a PEM certificate")
		}
		if block.Type == "CERTIFICATE" {
			c, err := x509.ParseCertificate(block.Bytes)
			if err != nil {
				return nil, fmt.Errorf("the CA certificate: %w", err)
			}
			return c, nil
		}
	}
}

// verifyPin checks caPEM against t's pins and says which hash it is when not.
func (t Token) verifyPin(caPEM []byte) error {
	if !t.Pinned() {
		return errors.New("the node token pins no CA: give the full K10<ca-hash>::<id>.<secret> token that `edgeplane token --node` prints, or the CA hash with it")
	}
	if t.CAHash != "" {
		got := join.CAHash(caPEM)
		if subtle.ConstantTimeCompare([]byte(got), []byte(t.CAHash)) != 1 {
			return fmt.Errorf("%w: the token pins CA sha256 %s but the server's CA is sha256 %s; this server is not of the cluster the token was made for, or someone is in between: check --server and use a token printed on one of its servers", ErrCAMismatch, t.CAHash, got)
		}
	}
	if t.SPKIHash != "" {
		cert, err := firstCert(caPEM)
		if err != nil {
			return err
		}
		if got := spkiHex(cert); subtle.ConstantTimeCompare([]byte(got), []byte(t.SPKIHash)) != 1 {
			return fmt.Errorf("%w: the pin is CA public key sha256:%s but the server's CA public key is sha256:%s; check --server and the pin", ErrCAMismatch, t.SPKIHash, got)
		}
	}
	return nil
}
