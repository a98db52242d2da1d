package registries

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestWriteHosts(t *testing.T) {
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(ca, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	certs := filepath.Join(dir, "certs.d")
	// A directory the user made, and one an earlier WriteHosts made for a
	// registry no longer in the file.
	for name, body := range map[string]string{
		"user.example.com": "server = \"https://user.example.com\"\n",
		"old.example.com":  hostsHeader + "server = \"https://old.example.com\"\n",
	} {
		if err := os.MkdirAll(filepath.Join(certs, name), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(certs, name, "hosts.toml"), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	r, err := Parse("/etc/edgeplane/registries.yaml", []byte(strings.ReplaceAll(`mirrors:
  docker.io:
    endpoint: ["https://mirror.example.com:5000", "http://127.0.0.1:5000/cache"]
  "*":
    endpoint: ["https://all.example.com"]
configs:
  docker.io:
    tls: {insecure_skip_verify: true}
  mirror.example.com:5000:
    auth: {username: u, password: p}
    tls: {ca_file: CA, cert_file: CA, key_file: CA}
  private.example.com:
    tls: {ca_file: CA}
  auth-only.example.com:
    auth: {username: u, password: p}
`, "CA", ca)))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.WriteHosts(certs); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"docker.io": hostsHeader + `# Source: /etc/edgeplane/registries.yaml
server = "https://registry-1.docker.io"
skip_verify = true

[host."https://mirror.example.com:5000"]
  capabilities = ["pull", "resolve"]
  ca = "CA"
  client = [["CA", "CA"]]

[host."http://127.0.0.1:5000/cache"]
  capabilities = ["pull", "resolve"]
  override_path = true
`,
		"_default": hostsHeader + `# Source: /etc/edgeplane/registries.yaml

[host."https://all.example.com"]
  capabilities = ["pull", "resolve"]
`,
		// Its TLS settings serve pulls that name it as well as the mirror.
		"mirror.example.com:5000": hostsHeader + `# Source: /etc/edgeplane/registries.yaml
server = "https://mirror.example.com:5000"
ca = "CA"
client = [["CA", "CA"]]
` + hostTableStub,
		"private.example.com": hostsHeader + `# Source: /etc/edgeplane/registries.yaml
server = "https://private.example.com"
ca = "CA"
` + hostTableStub,
		"user.example.com": "server = \"https://user.example.com\"\n",
	}
	entries, err := os.ReadDir(certs)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != len(want) {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf("directories %q, want those of %v (old.example.com removed, user.example.com kept, none for auth-only.example.com)", names, sortedKeys(want))
	}
	if fi, err := os.Stat(certs); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("%s: %v, %v; want mode 0700", certs, fi.Mode(), err)
	}
	for name, body := range want {
		body = strings.ReplaceAll(body, `"CA"`, tomlQuote(ca))
		path := filepath.Join(certs, name, "hosts.toml")
		got, err := os.ReadFile(path)
		if err != nil {
			t.Errorf("%v", err)
			continue
		}
		if string(got) != body {
			t.Errorf("%s:\n%s\nwant:\n%s", path, got, body)
		}
		if name == "user.example.com" {
			continue
		}
		if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v, want 0600", path, fi.Mode())
		}
		if fi, err := os.Stat(filepath.Dir(path)); err != nil || fi.Mode().Perm() != 0o700 {
			t.Errorf("%s: mode %v, want 0700", filepath.Dir(path), fi.Mode())
		}
	}

	// Next start with the mirrors gone: what it wrote goes, the user's stays.
	empty, err := Parse("/etc/edgeplane/registries.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := empty.WriteHosts(certs); err != nil {
		t.Fatal(err)
	}
	entries, _ = os.ReadDir(certs)
	if len(entries) != 1 || entries[0].Name() != "user.example.com" {
		t.Errorf("after an empty file: %v, want only user.example.com", entries)
	}
}

func TestTOMLQuote(t *testing.T) {
	for in, want := range map[string]string{
		`/a/b`:     `"/a/b"`,
		`a"b\c`:    `"a\"b\\c"`,
		"a\nb\x7f": `"a\u000Ab\u007F"`,
		"/é/ü":     `"/é/ü"`,
	} {
		if got := tomlQuote(in); got != want {
			t.Errorf("tomlQuote(%q) = %s, want %s", in, got, want)
		}
	}
}
