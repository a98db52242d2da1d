package nodetoken

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const (
	hashA = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	hashB = "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210"
)

func TestNodeTokenParse(t *testing.T) {
	for _, tc := range []struct {
		name    string
		in      string
		want    Token
		wantErr string
	}{
		{"full", "K10" + hashA + "::abcdef.0123456789abcdef", Token{ID: "abcdef", Secret: "0123456789abcdef", CAHash: hashA}, ""},
		{"full, upper-case hash, spaces", "  K10" + strings.ToUpper(hashA) + "::abcdef.0123456789abcdef\n", Token{ID: "abcdef", Secret: "0123456789abcdef", CAHash: hashA}, ""},
		{"bare", "abcdef.0123456789abcdef", Token{ID: "abcdef", Secret: "0123456789abcdef"}, ""},
		{"empty", " ", Token{}, "empty"},
		{"server join token", "K10" + hashA + "::server:0123456789abcdef0123", Token{}, "server join token"},
		{"short hash", "K10abc::abcdef.0123456789abcdef", Token{}, "want 64 hex digits"},
		{"hash not hex", "K10" + strings.Repeat("z", 64) + "::abcdef.0123456789abcdef", Token{}, "not hex"},
		{"no K10", hashA + "::abcdef.0123456789abcdef", Token{}, "K10<ca-hash>"},
		{"upper-case secret", "abcdef.0123456789ABCDEF", Token{}, "not <id>.<secret>"},
		{"short secret", "abcdef.0123", Token{}, "not <id>.<secret>"},
		{"no dot", "abcdef0123456789abcdef", Token{}, "not <id>.<secret>"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse(tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Parse(%q) = %+v, %v; want an error with %q", tc.in, got, err, tc.wantErr)
				}
				if strings.Contains(err.Error(), "0123456789abcdef") && !strings.Contains(tc.in, "server:") && tc.name != "no K10" {
					t.Errorf("the error shows the secret: %v", err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("Parse(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
			}
			again, err := Parse(got.String())
			if err != nil || again != got {
				t.Fatalf("Parse(String()) = %+v, %v; want %+v", again, err, got)
			}
		})
	}
}

func TestNodeTokenWithCAPin(t *testing.T) {
	bare := Token{ID: "abcdef", Secret: "0123456789abcdef"}
	for _, tc := range []struct {
		name    string
		pin     string
		want    Token
		wantErr string
	}{
		{"CA file hash", hashA, Token{ID: "abcdef", Secret: "0123456789abcdef", CAHash: hashA}, ""},
		{"kubeadm SPKI pin", "sha256:" + hashB, Token{ID: "abcdef", Secret: "0123456789abcdef", SPKIHash: hashB}, ""},
		{"kubeadm pin too short", "sha256:abc", Token{}, "public key hash has 3 characters"},
		{"garbage", "md5:abc", Token{}, "CA hash has 7 characters"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := bare.WithCAPin(tc.pin)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("WithCAPin(%q) = %+v, %v; want an error with %q", tc.pin, got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want || !got.Pinned() {
				t.Fatalf("WithCAPin(%q) = %+v, %v; want %+v", tc.pin, got, err, tc.want)
			}
		})
	}
}

func FuzzNodeTokenParse(f *testing.F) {
	for _, s := range []string{
		"K10" + hashA + "::abcdef.0123456789abcdef", "abcdef.0123456789abcdef", "K10::", "::", "K10" + hashA + "::server:x",
		"K10" + hashA + "::abcdef.0123456789abcdef::x", ".", "abcdef.", "\x00",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tok, err := Parse(s)
		if err != nil {
			return
		}
		if len(tok.ID) != 6 || len(tok.Secret) != 16 || (tok.CAHash != "" && len(tok.CAHash) != 64) {
			t.Fatalf("Parse(%q) accepted a malformed token %+v", s, tok)
		}
		again, err := Parse(tok.String())
		if err != nil || again != tok {
			t.Fatalf("Parse(%q).String() = %q does not parse back: %+v, %v", s, tok.String(), again, err)
		}
	})
}

func TestNodeTokenCreateOptionsValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    CreateOptions
		want []string
	}{
		{"zero value", CreateOptions{}, nil},
		{"kubeadm-like", CreateOptions{TTL: 24 * time.Hour, Groups: []string{NodeGroup}, Usages: DefaultUsages}, nil},
		{"every problem at once", CreateOptions{
			TTL: -time.Second, Description: "a\nb",
			Groups: []string{"system:bootstrappers:edgeplane:servers", "admins"}, Usages: []string{"signing", "root"},
		}, []string{"negative", "joining servers' group", `"admins" is invalid`, "usage string: root", "one line"}},
		{"sub-second TTL", CreateOptions{TTL: time.Millisecond}, []string{"under a second"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			errs := tc.o.Validate()
			if len(errs) != len(tc.want) {
				t.Fatalf("Validate() = %v, want %d errors", errs, len(tc.want))
			}
			for _, w := range tc.want {
				all := errors.Join(errs...).Error()
				if !strings.Contains(all, w) {
					t.Errorf("Validate() = %v, want one with %q", errs, w)
				}
			}
		})
	}
}

func TestNodeTokenFile(t *testing.T) {
	dir := t.TempDir()
	if _, ok, err := ReadFile(dir); ok || err != nil {
		t.Fatalf("ReadFile of an empty dir = %v, %v", ok, err)
	}
	want := Token{ID: "abcdef", Secret: "0123456789abcdef", CAHash: hashA}
	for range 2 { // the second write replaces the first
		if err := WriteFile(dir, want); err != nil {
			t.Fatal(err)
		}
	}
	got, ok, err := ReadFile(dir)
	if err != nil || !ok || got != want {
		t.Fatalf("ReadFile = %+v, %v, %v; want %+v", got, ok, err, want)
	}
	fi, err := os.Stat(filepath.Join(dir, FileName))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", fi.Mode().Perm())
	}
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) != 1 {
		t.Errorf("the dir holds %v (%v), want only %s: a temporary file was left", entries, err, FileName)
	}
	if err := os.WriteFile(filepath.Join(dir, FileName), []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := ReadFile(dir); err == nil || !strings.Contains(err.Error(), "delete the file") {
		t.Errorf("ReadFile of garbage = %v, want an error saying what to do", err)
	}
}
