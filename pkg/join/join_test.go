package join

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseToken(t *testing.T) {
	hash := strings.Repeat("ab", 32)
	tests := []struct {
		name, in, wantErr string
		want              Token
	}{
		{name: "full", in: "K10" + hash + "::server:0123456789abcdef", want: Token{CAHash: hash, Secret: "0123456789abcdef"}},
		{name: "upper-case hash", in: "K10" + strings.ToUpper(hash) + "::server:0123456789abcdef", want: Token{CAHash: hash, Secret: "0123456789abcdef"}},
		{name: "bare secret", in: " my-long-cluster-secret\n", want: Token{Secret: "my-long-cluster-secret"}},
		{name: "empty", in: "  ", wantErr: "empty"},
		{name: "short secret", in: "short", wantErr: "at least 16"},
		{name: "short hash", in: "K10abcd::server:0123456789abcdef", wantErr: "hex digits"},
		{name: "non-hex hash", in: "K10" + strings.Repeat("zz", 32) + "::server:0123456789abcdef", wantErr: "not hex"},
		{name: "wrong role", in: "K10" + hash + "::node:0123456789abcdef", wantErr: "K10<ca-hash>::server:<secret>"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseToken(tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ParseToken(%q) = %v, %v; want error containing %q", tc.in, got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("ParseToken(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
			}
			if again, err := ParseToken(got.String()); err != nil || again != got {
				t.Fatalf("round trip of %q = %+v, %v", got.String(), again, err)
			}
		})
	}
}

func FuzzParseToken(f *testing.F) {
	f.Add("K10" + strings.Repeat("ab", 32) + "::server:0123456789abcdef")
	f.Add("0123456789abcdef")
	f.Fuzz(func(t *testing.T, s string) {
		tok, err := ParseToken(s)
		if err != nil {
			return
		}
		if again, err := ParseToken(tok.String()); err != nil || again != tok {
			t.Fatalf("round trip of %q: %+v, %v", s, again, err)
		}
	})
}

func TestVerifyCA(t *testing.T) {
	ca := []byte("-----BEGIN CERTIFICATE-----\nfake\n-----END CERTIFICATE-----\n")
	tests := []struct {
		name  string
		token Token
		ok    bool
	}{
		{name: "matching pin", token: Token{CAHash: CAHash(ca), Secret: "s"}, ok: true},
		{name: "no pin", token: Token{Secret: "s"}, ok: true},
		{name: "other CA", token: Token{CAHash: CAHash([]byte("other")), Secret: "s"}, ok: false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.token.VerifyCA(ca)
			if (err == nil) != tc.ok {
				t.Fatalf("VerifyCA = %v, want ok=%v", err, tc.ok)
			}
			if err != nil && !strings.Contains(err.Error(), "does not match the token") {
				t.Fatalf("unclear message: %v", err)
			}
		})
	}
}

func TestSealOpen(t *testing.T) {
	d := Data{ServerCAFile: []byte("ca"), "tls/sa.key": []byte("key")}
	blob, err := d.Seal("right-secret-0123")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(blob), "key") && strings.Contains(string(blob), `"tls/sa.key"`) {
		t.Fatalf("sealed data leaks file names: %s", blob)
	}
	tests := []struct {
		name, secret, wantErr string
	}{
		{name: "right secret", secret: "right-secret-0123"},
		{name: "wrong secret", secret: "wrong-secret-0123", wantErr: "not this cluster's token"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Open(blob, tc.secret)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Open = %v, want error containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || string(got["tls/sa.key"]) != "key" || string(got[ServerCAFile]) != "ca" {
				t.Fatalf("Open = %v, %v", got, err)
			}
		})
	}
	if _, err := Open([]byte("not json"), "x"); err == nil {
		t.Fatal("Open accepted garbage")
	}
}

func TestCollectApply(t *testing.T) {
	src := t.TempDir()
	for rel, body := range map[string]string{ServerCAFile: "ca", "tls/etcd/ca.key": "etcd-key", "tls/apiserver.crt": "leaf"} {
		path := filepath.Join(src, rel)
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	d, err := Collect(src)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := d["tls/apiserver.crt"]; ok || len(d) != 2 {
		t.Fatalf("Collect took %v; want the CA and the etcd CA key only", d)
	}

	tests := []struct {
		name    string
		local   map[string]string
		wantN   int
		wantErr string
	}{
		{name: "empty data dir", wantN: 2},
		{name: "same files", local: map[string]string{ServerCAFile: "ca", "tls/etcd/ca.key": "etcd-key"}, wantN: 0},
		{name: "another cluster", local: map[string]string{ServerCAFile: "other"}, wantErr: "belongs to another cluster"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dst := t.TempDir()
			for rel, body := range tc.local {
				path := filepath.Join(dst, rel)
				_ = os.MkdirAll(filepath.Dir(path), 0o700)
				if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			n, err := d.Apply(dst)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Apply = %v, want error containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || n != tc.wantN {
				t.Fatalf("Apply = %d, %v; want %d", n, err, tc.wantN)
			}
			fi, err := os.Stat(filepath.Join(dst, "tls/etcd/ca.key"))
			if err != nil || fi.Mode().Perm() != 0o600 {
				t.Fatalf("etcd CA key: %v, %v", fi, err)
			}
		})
	}
}

func TestTokenFile(t *testing.T) {
	dir := t.TempDir()
	if _, ok, err := ReadTokenFile(dir); ok || err != nil {
		t.Fatalf("ReadTokenFile on empty dir = %v, %v", ok, err)
	}
	want := Token{CAHash: strings.Repeat("01", 32), Secret: "0123456789abcdef"}
	if err := WriteTokenFile(dir, want); err != nil {
		t.Fatal(err)
	}
	got, ok, err := ReadTokenFile(dir)
	if !ok || err != nil || got != want {
		t.Fatalf("ReadTokenFile = %+v, %v, %v", got, ok, err)
	}
	fi, _ := os.Stat(filepath.Join(dir, TokenFileName))
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("token file mode %v", fi.Mode())
	}
}
