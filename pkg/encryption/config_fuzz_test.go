package encryption

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"k8s.io/apiserver/pkg/server/options/encryptionconfig"
)

// FuzzLoad feeds arbitrary contents of <data-dir>/tls/encryption-config.yaml
// to Load. Errors say "encryption:" and name the file; an accepted file is one
// the API server loads too (its own encryptionconfig loader), has a key to
// encrypt with, and round-trips through Write with the same keys.
func FuzzLoad(f *testing.F) {
	dir := f.TempDir()
	good := filepath.Join(dir, "good.yaml")
	if _, err := Ensure(good, base); err != nil {
		f.Fatal(err)
	}
	b, err := os.ReadFile(good)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add(b[:len(b)/2])
	f.Add([]byte(strings.Replace(string(b), "secretbox:", "aescbc:", 1)))
	f.Add([]byte(strings.Replace(string(b), "- secrets", "- configmaps", 1)))
	for _, s := range []string{
		"", "{}", "kind: EncryptionConfiguration\napiVersion: apiserver.config.k8s.io/v1\nresources: []\n",
		"resources:\n- resources: [secrets]\n  providers:\n  - secretbox:\n      keys: []\n",
		"resources:\n- resources: [secrets]\n  providers:\n  - secretbox:\n      keys:\n      - name: k\n        secret: AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\n",
		"resources:\n- resources: [secrets]\n  providers:\n  - secretbox:\n      keys:\n      - name: ''\n        secret: AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\n",
		"unknown: 1\n", "- a\n", "resources: [{resources: [secrets], providers: [{identity: {}}]}]\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		path := filepath.Join(dir, FileName)
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		cfg, _, err := Load(path)
		if err != nil {
			if msg := err.Error(); !strings.HasPrefix(msg, "encryption: ") || !strings.Contains(msg, path) {
				t.Fatalf("error does not say encryption and name the file: %v", err)
			}
			return
		}
		keys := Keys(cfg)
		if len(keys) == 0 {
			t.Fatalf("accepted a configuration without a key:\n%s", data)
		}
		if _, err := encryptionconfig.LoadEncryptionConfig(context.Background(), path, false, "fuzz"); err != nil {
			t.Fatalf("accepted a configuration the API server refuses (%v):\n%s", err, data)
		}
		again := filepath.Join(dir, "again.yaml")
		if _, err := Write(again, cfg); err != nil {
			t.Fatal(err)
		}
		cfg2, _, err := Load(again)
		if err != nil || !slices.Equal(Keys(cfg2), keys) {
			t.Fatalf("round trip: %v, keys %v, want %v", err, Keys(cfg2), keys)
		}
	})
}

// FuzzClassify feeds stored values to Classify: it never panics and names
// a provider and key only for values with the k8s:enc: prefix.
func FuzzClassify(f *testing.F) {
	for _, s := range []string{"k8s:enc:secretbox:v1:key-20260301T120000Z:\x00\x01", "k8s:enc:", "k8s:enc:a:b", "k8s\x00", "{}"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, v []byte) {
		c := Classify(v)
		if !strings.HasPrefix(string(v), "k8s:enc:") && c != Unencrypted {
			t.Fatalf("Classify(%q) = %q, want %q", v, c, Unencrypted)
		}
		if strings.HasPrefix(string(v), "k8s:enc:") && c == Unencrypted {
			t.Fatalf("Classify(%q) says unencrypted", v)
		}
	})
}
