package encryption

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	apiserverv1 "k8s.io/apiserver/pkg/apis/apiserver/v1"
	"sigs.k8s.io/yaml"

	"github.com/edgeplane/edgeplane/internal/atomicfile"
)

// RetiredFileName keeps, under <data-dir>/tls (0600), the keys that
// rotate-keys dropped: snapshots taken before a rotation hold Secrets
// encrypted with them, and a restore puts the ones it needs back.
const RetiredFileName = "encryption-retired-keys.yaml"

// RetiredPath is the retired keys file of a data dir.
func RetiredPath(dataDir string) string { return filepath.Join(dataDir, "tls", RetiredFileName) }

type retiredKeys struct {
	Keys []apiserverv1.Key `json:"keys"`
}

func loadRetired(path string) (retiredKeys, error) {
	var r retiredKeys
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return r, nil
	}
	if err != nil {
		return r, fmt.Errorf("encryption: %w", err)
	}
	if err := yaml.UnmarshalStrict(data, &r); err != nil {
		return r, fmt.Errorf("encryption: %s: %w", path, err)
	}
	return r, nil
}

// retire adds the keys of cfg other than keep to the retired keys file.
func retire(path string, cfg *apiserverv1.EncryptionConfiguration, keep string) error {
	sb, err := secretbox(cfg)
	if err != nil {
		return err
	}
	r, err := loadRetired(path)
	if err != nil {
		return err
	}
	for _, k := range sb.Keys {
		if k.Name != keep && !slices.ContainsFunc(r.Keys, func(o apiserverv1.Key) bool { return o.Name == k.Name }) {
			r.Keys = append(r.Keys, k)
		}
	}
	data, err := yaml.Marshal(r)
	if err != nil {
		return fmt.Errorf("encryption: %w", err)
	}
	if _, err := atomicfile.Write(path, data, fileMode); err != nil {
		return fmt.Errorf("encryption: %w", err)
	}
	return nil
}

// Reinstate makes the configuration at path decrypt with the keys named in
// need (as Classify reports them, "secretbox/<name>") that it lacks, taking
// them from the retired keys file; the write key stays first. It returns the
// keys it added and those it could not find.
func Reinstate(path, retiredPath string, need []string) (added, missing []string, err error) {
	cfg, _, err := Load(path)
	if err != nil {
		return nil, nil, err
	}
	r, err := loadRetired(retiredPath)
	if err != nil {
		return nil, nil, err
	}
	sb, err := secretbox(cfg)
	if err != nil {
		return nil, nil, err
	}
	have := Keys(cfg)
	for _, n := range need {
		name, ok := cutProvider(n)
		if !ok || slices.Contains(have, name) {
			continue
		}
		i := slices.IndexFunc(r.Keys, func(k apiserverv1.Key) bool { return k.Name == name })
		if i < 0 {
			missing = append(missing, name)
			continue
		}
		sb.Keys = append(sb.Keys, r.Keys[i])
		have = append(have, name)
		added = append(added, name)
	}
	if len(added) > 0 {
		if _, err := Write(path, cfg); err != nil {
			return nil, nil, err
		}
	}
	return added, missing, nil
}

func cutProvider(s string) (string, bool) {
	const p = "secretbox/"
	if len(s) > len(p) && s[:len(p)] == p {
		return s[len(p):], true
	}
	return "", false
}
