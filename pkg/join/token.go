// Package join holds what servers that share one cluster exchange: the join
// token and the bootstrap data (CAs, their keys, the service-account key and
// the secrets encryption key), encrypted with a key derived from the token.
package join

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/edgeplane/edgeplane/internal/atomicfile"
)

const (
	// tokenPrefix starts a full token, followed by the CA hash.
	tokenPrefix = "K10"
	// tokenRole separates the CA hash from the secret.
	tokenRole = "::server:"
	// TokenFileName is the token's file in the data dir.
	TokenFileName = "token"
	minSecretLen  = 16
)

// Token is a join token: "K10<sha256 hex of the server CA cert>::server:<secret>",
// or a bare secret when the CA hash is not known (yet).
type Token struct {
	CAHash string // lower-case hex; empty for a bare secret
	Secret string
}

// ParseToken parses a full or bare token.
func ParseToken(s string) (Token, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return Token{}, errors.New("token is empty")
	}
	if !strings.HasPrefix(s, tokenPrefix) || !strings.Contains(s, tokenRole) {
		if strings.Contains(s, "::") {
			return Token{}, errors.New(`token is not of the form K10<ca-hash>::server:<secret>`)
		}
		return checkSecret(Token{Secret: s})
	}
	hash, secret, _ := strings.Cut(strings.TrimPrefix(s, tokenPrefix), tokenRole)
	if len(hash) != sha256.Size*2 {
		return Token{}, fmt.Errorf("token CA hash has %d characters, want %d hex digits", len(hash), sha256.Size*2)
	}
	if _, err := hex.DecodeString(hash); err != nil {
		return Token{}, fmt.Errorf("token CA hash is not hex: %v", err)
	}
	return checkSecret(Token{CAHash: strings.ToLower(hash), Secret: secret})
}

func checkSecret(t Token) (Token, error) {
	if len(t.Secret) < minSecretLen {
		return Token{}, fmt.Errorf("token secret must have at least %d characters", minSecretLen)
	}
	if strings.ContainsAny(t.Secret, " \t\r\n:") {
		return Token{}, errors.New("token secret must not contain spaces or colons")
	}
	return t, nil
}

// String is the full form when the CA hash is known, the bare secret otherwise.
func (t Token) String() string {
	if t.CAHash == "" {
		return t.Secret
	}
	return tokenPrefix + t.CAHash + tokenRole + t.Secret
}

// NewSecret returns a random token secret.
func NewSecret() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("token: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// CAHash is the hex SHA-256 of a CA certificate file's bytes, as in the token.
func CAHash(caPEM []byte) string {
	sum := sha256.Sum256(caPEM)
	return hex.EncodeToString(sum[:])
}

// VerifyCA returns an error when the token pins a CA and caPEM is not it.
func (t Token) VerifyCA(caPEM []byte) error {
	if t.CAHash == "" {
		return nil
	}
	if got := CAHash(caPEM); subtle.ConstantTimeCompare([]byte(got), []byte(t.CAHash)) != 1 {
		return fmt.Errorf("the cluster CA does not match the token: the token pins CA sha256 %s but the cluster's CA is sha256 %s; use the token that `edgeplane token` prints on a server of that cluster", t.CAHash, got)
	}
	return nil
}

// ReadTokenFile reads <dataDir>/token; ok is false when it does not exist.
func ReadTokenFile(dataDir string) (t Token, ok bool, err error) {
	b, err := os.ReadFile(filepath.Join(dataDir, TokenFileName))
	if errors.Is(err, os.ErrNotExist) {
		return Token{}, false, nil
	}
	if err != nil {
		return Token{}, false, err
	}
	t, err = ParseToken(string(b))
	if err != nil {
		return Token{}, false, fmt.Errorf("%s: %w", filepath.Join(dataDir, TokenFileName), err)
	}
	return t, true, nil
}

// WriteTokenFile writes <dataDir>/token, mode 0600, atomically and durably
// (temp file, fsync, rename, directory fsync): a power cut leaves the old
// token or the new one, never a torn one.
func WriteTokenFile(dataDir string, t Token) error {
	path := filepath.Join(dataDir, TokenFileName)
	if _, err := atomicfile.Write(path, []byte(t.String()+"\n"), 0o600); err != nil {
		return fmt.Errorf("writing the token: %w", err)
	}
	return nil
}
