package encryption

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

var base = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func TestEnsureAndRotateConfig(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tls", FileName)
	created, err := Ensure(path, base)
	if err != nil || !created {
		t.Fatalf("Ensure = %v, %v", created, err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("config file: %v, %v", fi, err)
	}
	cfg, data, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := Keys(cfg); !slices.Equal(got, []string{"key-20260301T120000Z"}) {
		t.Fatalf("keys %v", got)
	}
	if !strings.Contains(string(data), "identity: {}") || !strings.Contains(string(data), "- secrets") {
		t.Errorf("config lacks the identity fallback or the secrets resource:\n%s", data)
	}

	// Ensure keeps an existing file and tightens its mode.
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if created, err := Ensure(path, base.Add(time.Hour)); err != nil || created {
		t.Fatalf("second Ensure = %v, %v", created, err)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %#o after Ensure", fi.Mode().Perm())
	}
	_, again, _ := Load(path)
	if string(again) != string(data) {
		t.Error("second Ensure changed the config")
	}

	// Rotation: the new key goes first, then only it remains.
	name, err := AddKey(cfg, base) // same second: a suffix keeps names unique
	if err != nil || name != "key-20260301T120000Z-1" {
		t.Fatalf("AddKey = %q, %v", name, err)
	}
	hash, err := Write(path, cfg)
	if err != nil {
		t.Fatal(err)
	}
	_, data, _ = Load(path)
	if hash != Hash(data) || !strings.HasPrefix(hash, "sha256:") {
		t.Errorf("hash %s does not match the file", hash)
	}
	cfg, _, _ = Load(path)
	if got := Keys(cfg); !slices.Equal(got, []string{name, "key-20260301T120000Z"}) {
		t.Fatalf("keys after AddKey %v", got)
	}
	if err := KeepOnly(cfg, name); err != nil {
		t.Fatal(err)
	}
	if got := Keys(cfg); !slices.Equal(got, []string{name}) {
		t.Fatalf("keys after KeepOnly %v", got)
	}
	if err := KeepOnly(cfg, "nope"); err == nil {
		t.Error("KeepOnly of an unknown key succeeded")
	}
}

func TestLoadRejects(t *testing.T) {
	for name, content := range map[string]string{
		"unknown field": "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n- resources: [secrets]\n  providers:\n  - secretbox:\n      keys: []\n    bogus: 1\n",
		"short key":     "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n- resources: [secrets]\n  providers:\n  - secretbox:\n      keys:\n      - name: k\n        secret: c2hvcnQ=\n",
		"no secretbox":  "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n- resources: [secrets]\n  providers:\n  - identity: {}\n",
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), FileName)
			if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
			if _, _, err := Load(path); err == nil {
				t.Error("accepted")
			}
		})
	}
}

func TestClassify(t *testing.T) {
	for value, want := range map[string]string{
		"k8s:enc:secretbox:v1:key-1:\x00\x01binary": "secretbox/key-1",
		"k8s:enc:aescbc:v1:old:...":                 "aescbc/old",
		"k8s\x00\x0a\x0cprotobuf":                   Unencrypted,
		`{"kind":"Secret"}`:                         Unencrypted,
		"k8s:enc:broken":                            "unknown",
	} {
		if got := Classify([]byte(value)); got != want {
			t.Errorf("Classify(%q) = %q, want %q", value, got, want)
		}
	}
}

func TestActiveHashLine(t *testing.T) {
	line := `apiserver_encryption_config_controller_last_config_info{apiserver_id_hash="sha256:abc",hash="sha256:def"} 1`
	if m := activeHashLine.FindStringSubmatch(line); m == nil || m[1] != "sha256:def" {
		t.Fatalf("no match: %v", m)
	}
}
