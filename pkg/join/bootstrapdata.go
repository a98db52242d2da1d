package join

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"github.com/edgeplane/edgeplane/internal/atomicfile"
)

// SharedFiles are the files, relative to the data dir, that every server of a
// cluster must hold identically: the CAs with their keys, the service-account
// key pair and the secrets encryption configuration. Leaf certificates are not
// shared; each server issues its own from the shared CAs.
var SharedFiles = []string{
	"tls/server-ca.crt", "tls/server-ca.key",
	"tls/kubelet-serving-ca.crt", "tls/kubelet-serving-ca.key",
	"tls/client-ca.crt", "tls/client-ca.key",
	"tls/front-proxy-ca.crt", "tls/front-proxy-ca.key",
	"tls/etcd/ca.crt", "tls/etcd/ca.key",
	"tls/sa.key", "tls/sa.pub",
	"tls/encryption-config.yaml",
}

// ServerCAFile is the shared file whose hash the token pins.
const ServerCAFile = "tls/server-ca.crt"

// hkdfInfo binds derived keys to this use.
const hkdfInfo = "edgeplane bootstrap data v1"

// Data maps SharedFiles paths to their contents.
type Data map[string][]byte

// Collect reads the shared files that exist under dataDir.
func Collect(dataDir string) (Data, error) {
	d := Data{}
	for _, rel := range SharedFiles {
		b, err := os.ReadFile(filepath.Join(dataDir, rel))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("bootstrap data: %w", err)
		}
		d[rel] = b
	}
	if _, ok := d[ServerCAFile]; !ok {
		return nil, fmt.Errorf("bootstrap data: %s is missing", ServerCAFile)
	}
	return d, nil
}

// Apply writes d under dataDir (files 0600, directories 0700). A local file
// that exists with other contents is an error: this data dir belongs to
// another cluster.
func (d Data) Apply(dataDir string) (written int, err error) {
	for _, rel := range SharedFiles {
		want, ok := d[rel]
		if !ok {
			continue
		}
		path := filepath.Join(dataDir, rel)
		have, err := os.ReadFile(path)
		switch {
		case err == nil && bytes.Equal(have, want):
			continue
		case err == nil:
			return written, fmt.Errorf("%s differs from the cluster's copy: this data dir belongs to another cluster; use an empty --data-dir to join", path)
		case !errors.Is(err, fs.ErrNotExist):
			return written, fmt.Errorf("bootstrap data: %w", err)
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return written, fmt.Errorf("bootstrap data: %w", err)
		}
		// Durably: these are the cluster's CA keys; a power cut must not
		// leave a torn one that every later start refuses.
		if _, err := atomicfile.Write(path, want, 0o600); err != nil {
			return written, fmt.Errorf("bootstrap data: %w", err)
		}
		written++
	}
	return written, nil
}

// sealed is the stored form: AES-256-GCM over the JSON of Data.
type sealed struct {
	Version    int    `json:"version"`
	Salt       []byte `json:"salt"`
	Nonce      []byte `json:"nonce"`
	Ciphertext []byte `json:"ciphertext"`
}

func aead(secret string, salt []byte) (cipher.AEAD, error) {
	key, err := hkdf.Key(sha256.New, []byte(secret), salt, hkdfInfo, 32)
	if err != nil {
		return nil, err
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

// Seal encrypts d with a key derived from the token secret.
func (d Data) Seal(secret string) ([]byte, error) {
	plain, err := json.Marshal(d)
	if err != nil {
		return nil, err
	}
	s := sealed{Version: 1, Salt: make([]byte, 16)}
	if _, err := rand.Read(s.Salt); err != nil {
		return nil, err
	}
	g, err := aead(secret, s.Salt)
	if err != nil {
		return nil, err
	}
	s.Nonce = make([]byte, g.NonceSize())
	if _, err := rand.Read(s.Nonce); err != nil {
		return nil, err
	}
	s.Ciphertext = g.Seal(nil, s.Nonce, plain, []byte(hkdfInfo))
	return json.Marshal(s)
}

// Open decrypts what Seal made. A wrong secret is reported as such.
func Open(blob []byte, secret string) (Data, error) {
	var s sealed
	if err := json.Unmarshal(blob, &s); err != nil {
		return nil, fmt.Errorf("bootstrap data is corrupt: %w", err)
	}
	if s.Version != 1 {
		return nil, fmt.Errorf("bootstrap data has version %d; this edgeplane reads version 1", s.Version)
	}
	g, err := aead(secret, s.Salt)
	if err != nil {
		return nil, err
	}
	if len(s.Nonce) != g.NonceSize() {
		return nil, errors.New("bootstrap data is corrupt: bad nonce")
	}
	plain, err := g.Open(nil, s.Nonce, s.Ciphertext, []byte(hkdfInfo))
	if err != nil {
		return nil, errors.New("cannot decrypt the cluster's bootstrap data: the token is not this cluster's token")
	}
	var d Data
	if err := json.Unmarshal(plain, &d); err != nil {
		return nil, fmt.Errorf("bootstrap data is corrupt: %w", err)
	}
	for rel := range d {
		if !slices.Contains(SharedFiles, rel) {
			return nil, fmt.Errorf("bootstrap data holds an unexpected file %q", rel)
		}
	}
	return d, nil
}
