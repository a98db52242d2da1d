// Package encryption keeps the secrets-at-rest encryption of a data dir: an
// EncryptionConfiguration with secretbox keys (XSalsa20-Poly1305, random
// nonces, safe with long-lived keys) under <data-dir>/tls, mode 0600, which
// the API server loads and reloads on change; and the key rotation that
// re-encrypts every Secret through the API.
package encryption

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	apiserverv1 "k8s.io/apiserver/pkg/apis/apiserver/v1"
	"sigs.k8s.io/yaml"

	"github.com/edgeplane/edgeplane/internal/atomicfile"
)

// FileName is the configuration's name under <data-dir>/tls.
const FileName = "encryption-config.yaml"

// Resources are what is encrypted.
var Resources = []string{"secrets"}

const (
	keyBytes = 32
	fileMode = 0o600
)

// Path is the encryption configuration of a data dir.
func Path(dataDir string) string { return filepath.Join(dataDir, "tls", FileName) }

// Ensure creates the configuration at path with one new key unless it
// exists; an existing one is validated and its mode tightened to 0600.
func Ensure(path string, now time.Time) (created bool, err error) {
	if _, err := os.Stat(path); err == nil {
		if _, _, err := Load(path); err != nil {
			return false, err
		}
		if err := os.Chmod(path, fileMode); err != nil {
			return false, fmt.Errorf("encryption: %w", err)
		}
		return false, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return false, fmt.Errorf("encryption: %w", err)
	}
	cfg := &apiserverv1.EncryptionConfiguration{}
	cfg.APIVersion, cfg.Kind = "apiserver.config.k8s.io/v1", "EncryptionConfiguration"
	cfg.Resources = []apiserverv1.ResourceConfiguration{{
		Resources: Resources,
		Providers: []apiserverv1.ProviderConfiguration{
			{Secretbox: &apiserverv1.SecretboxConfiguration{}},
			// Reads data written before encryption was turned on.
			{Identity: &apiserverv1.IdentityConfiguration{}},
		},
	}}
	if _, err := AddKey(cfg, now); err != nil {
		return false, err
	}
	if _, err := Write(path, cfg); err != nil {
		return false, err
	}
	return true, nil
}

// Load reads and checks the configuration at path, returning it and its bytes.
func Load(path string) (*apiserverv1.EncryptionConfiguration, []byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("encryption: %w", err)
	}
	cfg := &apiserverv1.EncryptionConfiguration{}
	if err := yaml.UnmarshalStrict(data, cfg); err != nil {
		return nil, nil, fmt.Errorf("encryption: %s: %w", path, err)
	}
	// The API server refuses a file without these (found by FuzzLoad).
	if cfg.Kind != "EncryptionConfiguration" || cfg.APIVersion != "apiserver.config.k8s.io/v1" {
		return nil, nil, fmt.Errorf("encryption: %s: want kind EncryptionConfiguration, apiVersion apiserver.config.k8s.io/v1", path)
	}
	sb, err := secretbox(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("encryption: %s: %w", path, err)
	}
	if len(sb.Keys) == 0 {
		return nil, nil, fmt.Errorf("encryption: %s: the secretbox provider has no key", path)
	}
	seen := map[string]bool{}
	for _, k := range sb.Keys {
		if k.Name == "" || seen[k.Name] {
			return nil, nil, fmt.Errorf("encryption: %s: secretbox key names must be set and unique (%q)", path, k.Name)
		}
		seen[k.Name] = true
	}
	return cfg, data, nil
}

// secretbox finds the secretbox provider of the secrets resource and checks its keys.
func secretbox(cfg *apiserverv1.EncryptionConfiguration) (*apiserverv1.SecretboxConfiguration, error) {
	for _, r := range cfg.Resources {
		if !slices.Contains(r.Resources, "secrets") {
			continue
		}
		for _, p := range r.Providers {
			if p.Secretbox == nil {
				continue
			}
			for _, k := range p.Secretbox.Keys {
				b, err := base64.StdEncoding.DecodeString(k.Secret)
				if err != nil || len(b) != keyBytes {
					return nil, fmt.Errorf("key %q is not %d base64-encoded bytes", k.Name, keyBytes)
				}
			}
			return p.Secretbox, nil
		}
	}
	return nil, errors.New("no secretbox provider for secrets")
}

// Keys lists the key names; the first one encrypts new writes.
func Keys(cfg *apiserverv1.EncryptionConfiguration) []string {
	sb, err := secretbox(cfg)
	if err != nil {
		return nil
	}
	names := make([]string, 0, len(sb.Keys))
	for _, k := range sb.Keys {
		names = append(names, k.Name)
	}
	return names
}

// AddKey puts a new random key first, so it encrypts new writes while the
// others still decrypt, and returns its name ("key-<UTC time>").
func AddKey(cfg *apiserverv1.EncryptionConfiguration, now time.Time) (string, error) {
	sb, err := secretboxOrEmpty(cfg)
	if err != nil {
		return "", err
	}
	secret := make([]byte, keyBytes)
	if _, err := rand.Read(secret); err != nil {
		return "", fmt.Errorf("encryption: new key: %w", err)
	}
	name := "key-" + now.UTC().Format("20060102T150405Z")
	for i := 1; slices.Contains(Keys(cfg), name); i++ {
		name = fmt.Sprintf("key-%s-%d", now.UTC().Format("20060102T150405Z"), i)
	}
	sb.Keys = slices.Insert(sb.Keys, 0, apiserverv1.Key{Name: name, Secret: base64.StdEncoding.EncodeToString(secret)})
	return name, nil
}

func secretboxOrEmpty(cfg *apiserverv1.EncryptionConfiguration) (*apiserverv1.SecretboxConfiguration, error) {
	for _, r := range cfg.Resources {
		for _, p := range r.Providers {
			if p.Secretbox != nil && slices.Contains(r.Resources, "secrets") {
				return p.Secretbox, nil
			}
		}
	}
	return nil, errors.New("encryption: no secretbox provider for secrets")
}

// KeepOnly drops every key but name.
func KeepOnly(cfg *apiserverv1.EncryptionConfiguration, name string) error {
	sb, err := secretbox(cfg)
	if err != nil {
		return err
	}
	i := slices.IndexFunc(sb.Keys, func(k apiserverv1.Key) bool { return k.Name == name })
	if i < 0 {
		return fmt.Errorf("encryption: no key %q", name)
	}
	sb.Keys = []apiserverv1.Key{sb.Keys[i]}
	return nil
}

// Write replaces the file at path atomically (mode 0600) and returns the
// hash the API server reports for it once loaded.
func Write(path string, cfg *apiserverv1.EncryptionConfiguration) (string, error) {
	data, err := yaml.Marshal(cfg)
	if err != nil {
		return "", fmt.Errorf("encryption: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return "", fmt.Errorf("encryption: %w", err)
	}
	// Durably: a power cut leaves the old configuration or the new one,
	// never a torn file that hides the keys of the stored Secrets.
	if _, err := atomicfile.Write(path, data, fileMode); err != nil {
		return "", fmt.Errorf("encryption: %w", err)
	}
	return Hash(data), nil
}

// Hash is how the API server names a configuration in the metric
// apiserver_encryption_config_controller_last_config_info.
func Hash(data []byte) string { return fmt.Sprintf("sha256:%x", sha256.Sum256(data)) }

// Unencrypted is what Classify returns for a value stored in plain form.
const Unencrypted = "unencrypted"

// Classify tells how a raw stored value is encrypted: "<provider>/<key>"
// (e.g. "secretbox/key-20260301T120000Z") or Unencrypted.
func Classify(value []byte) string {
	// Encrypted values start with k8s:enc:<provider>:v1:<key name>:
	rest, ok := bytes.CutPrefix(value, []byte("k8s:enc:"))
	if !ok {
		return Unencrypted
	}
	parts := strings.SplitN(string(rest[:min(len(rest), 256)]), ":", 4)
	if len(parts) < 4 {
		return "unknown"
	}
	return parts[0] + "/" + parts[2]
}
