package registries

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.crt")
	cert := filepath.Join(dir, "client.crt")
	key := filepath.Join(dir, "client.key")
	for _, f := range []string{ca, cert, key} {
		if err := os.WriteFile(f, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	missing := filepath.Join(dir, "missing.crt")
	r := strings.NewReplacer("CA", ca, "CERT", cert, "KEY", key, "MISSING", missing)

	for _, tc := range []struct {
		name string
		yaml string
		want *Registries
		// errs are substrings of the error, each on its own line, in order.
		errs []string
	}{
		{name: "empty", yaml: "", want: &Registries{Mirrors: map[string]Mirror{}, Configs: map[string]Config{}}},
		{name: "comments only", yaml: "# nothing\n", want: &Registries{Mirrors: map[string]Mirror{}, Configs: map[string]Config{}}},
		{
			name: "k3s example",
			yaml: `mirrors:
  docker.io:
    endpoint:
      - "https://mirror.example.com:5000"
      - mirror2.example.com
      - localhost:5001
      - "http://10.0.0.1:5000/prefix/v2/"
    rewrite:
      "^library/(.*)": "mirror/$1"
  "*":
    endpoint: ["https://all.example.com"]
configs:
  mirror.example.com:5000:
    auth:
      username: edge
      password: "s3cret"
    tls:
      ca_file: CA
      cert_file: CERT
      key_file: KEY
  all.example.com:
    auth: {auth: ZWRnZTpzM2NyZXQ=}
    tls: {insecure_skip_verify: true}
  registry.example.com:
    auth: {identity_token: tok}
`,
			want: &Registries{
				Mirrors: map[string]Mirror{
					"docker.io": {Endpoints: []string{"https://mirror.example.com:5000", "https://mirror2.example.com", "http://localhost:5001", "http://10.0.0.1:5000/prefix/v2"},
						Rewrites: map[string]string{"^library/(.*)": "mirror/$1"}},
					"*": {Endpoints: []string{"https://all.example.com"}},
				},
				Configs: map[string]Config{
					"mirror.example.com:5000": {Auth: &AuthConfig{Username: "edge", Password: "s3cret"}, TLS: &TLSConfig{CAFile: ca, CertFile: cert, KeyFile: key}},
					"all.example.com":         {Auth: &AuthConfig{Auth: "ZWRnZTpzM2NyZXQ="}, TLS: &TLSConfig{InsecureSkipVerify: true}},
					"registry.example.com":    {Auth: &AuthConfig{IdentityToken: "tok"}},
				},
			},
		},
		{
			name: "every problem at once",
			yaml: `mirrors:
  docker.io:
    endpoints: ["https://x"]
  quay.io:
    endpoint:
      - "ftp://mirror"
      - "https://user:pw@mirror"
      - "https://"
      - "http://mirror:99999"
      - "https://mirror/?q=1"
      - [nested]
    rewrite:
      "(unclosed": "x"
  "bad host/x":
    endpoint: []
configs:
  reg.example.com:
    auth:
      username: u
      pasword: p
    tls:
      ca_file: MISSING
      cert_file: CERT
      insecure_skip_verify: "yes"
  other.example.com:
    auth: {auth: "not base64!"}
  third.example.com:
    tls: {}
    auth: {}
    extra: 1
registry: x
`,
			errs: []string{
				`:3: key mirrors."docker.io".endpoints: unknown key "endpoints" (allowed here: endpoint, rewrite)`,
				`:6: key mirrors."quay.io".endpoint[0]: endpoint "ftp://mirror": scheme "ftp" is not http or https`,
				`:7: key mirrors."quay.io".endpoint[1]: endpoint "https://user:pw@mirror" holds credentials`,
				`:8: key mirrors."quay.io".endpoint[2]: endpoint "https://" has no host`,
				`:9: key mirrors."quay.io".endpoint[3]: endpoint "http://mirror:99999"`,
				`:10: key mirrors."quay.io".endpoint[4]: endpoint "https://mirror/?q=1" has a query`,
				`:11: key mirrors."quay.io".endpoint[5]: want a string, got a list`,
				`:13: key mirrors."quay.io".rewrite["(unclosed"]: "(unclosed" is not a regular expression`,
				`:14: key mirrors."bad host/x": "bad host/x" is not a registry host`,
				`:20: key configs."reg.example.com".auth.pasword: unknown key "pasword" (allowed here: username, password, auth, identity_token)`,
				`:18: key configs."reg.example.com".auth: username and password go together`,
				`:22: key configs."reg.example.com".tls.ca_file: open ` + missing + `: no such file or directory`,
				`:24: key configs."reg.example.com".tls.insecure_skip_verify: want true or false, got the value "yes"`,
				`:21: key configs."reg.example.com".tls: cert_file and key_file go together`,
				`:26: key configs."other.example.com".auth: auth is not the base64 of username:password`,
				`:29: key configs."third.example.com".auth: no credentials: give username and password, auth, or identity_token`,
				`:30: key configs."third.example.com".extra: unknown key "extra" (allowed here: auth, tls)`,
				`:31: key registry: unknown key "registry" (allowed here: mirrors, configs)`,
			},
		},
		{name: "not a mapping", yaml: "- a\n", errs: []string{`:1: key (top level): want a mapping, got a list`}},
		{name: "duplicate host", yaml: "mirrors:\n  docker.io: {}\n  docker.io: {}\n", errs: []string{`:3: key mirrors.docker.io: repeats the one on line 2`}},
		{name: "bad yaml", yaml: "mirrors: [\n", errs: []string{`registries.yaml: line`}},
		{name: "two documents", yaml: "mirrors: {}\n---\nconfigs: {}\n", errs: []string{`only one YAML document`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := filepath.Join(dir, "registries.yaml")
			got, err := Parse(file, []byte(r.Replace(tc.yaml)))
			if len(tc.errs) == 0 {
				if err != nil {
					t.Fatalf("Parse: %v", err)
				}
				tc.want.File = file
				if !reflect.DeepEqual(got, tc.want) {
					t.Fatalf("Parse:\n got %+v\nwant %+v", got, tc.want)
				}
				return
			}
			if err == nil {
				t.Fatalf("Parse: no error, want %q", tc.errs)
			}
			msg := err.Error()
			lines := strings.Split(msg, "\n")
			if len(tc.errs) > 1 && len(lines) != len(tc.errs)+1 {
				t.Errorf("want %d problems, got:\n%s", len(tc.errs), msg)
			}
			for _, want := range tc.errs {
				found := false
				for _, l := range lines {
					if strings.Contains(l, file+want) || (strings.HasPrefix(want, "registries.yaml") || strings.HasPrefix(want, "only")) && strings.Contains(l, want) {
						found = true
					}
				}
				if !found {
					t.Errorf("no line %q in:\n%s", file+want, msg)
				}
			}
		})
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	r, err := Load(filepath.Join(dir, "none.yaml"))
	if err != nil || r.File != "" || len(r.Mirrors) != 0 || len(r.Configs) != 0 {
		t.Fatalf("Load of a missing file: %+v, %v; want nothing and no error", r, err)
	}
	path := filepath.Join(dir, "registries.yaml")
	if err := os.WriteFile(path, []byte("mirrors:\n  docker.io:\n    endpoint: [\"http://127.0.0.1:5000\"]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r, err = Load(path)
	if err != nil || r.File != path || r.Mirrors["docker.io"].Endpoints[0] != "http://127.0.0.1:5000" {
		t.Fatalf("Load: %+v, %v", r, err)
	}
	if err := os.WriteFile(path, []byte("mirrors:\n  docker.io:\n    endpoint: x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(path); err == nil || !strings.Contains(err.Error(), path+`:3: key mirrors."docker.io".endpoint: want a list of URLs`) {
		t.Fatalf("Load of a bad file: %v", err)
	}
}

func TestAuths(t *testing.T) {
	r, err := Parse("r.yaml", []byte(`mirrors:
  docker.io:
    endpoint: ["https://m1.example.com", "https://m2.example.com:5000"]
configs:
  docker.io: {auth: {username: hub, password: hp}}
  m1.example.com: {auth: {identity_token: t1}}
  "*": {auth: {username: any, password: ap}}
`))
	if err != nil {
		t.Fatal(err)
	}
	want := []Auth{
		{Host: "m1.example.com", IdentityToken: "t1"},
		{Host: "m2.example.com:5000", Username: "any", Password: "ap"},
		{Host: "registry-1.docker.io", Username: "hub", Password: "hp"},
	}
	if got := r.Auths(); !reflect.DeepEqual(got, want) {
		t.Fatalf("Auths:\n got %+v\nwant %+v", got, want)
	}
	if w := r.Warnings(); len(w) != 0 {
		t.Errorf("Warnings: %q, want none", w)
	}
	r, _ = Parse("r.yaml", []byte("mirrors:\n  docker.io:\n    endpoint: [m]\n    rewrite: {\"^a\": b}\n"))
	if w := r.Warnings(); len(w) != 1 || !strings.Contains(w[0], `mirrors."docker.io".rewrite is not applied`) {
		t.Errorf("Warnings: %q", w)
	}
}
