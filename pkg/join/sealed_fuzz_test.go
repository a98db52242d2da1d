package join

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
)

// FuzzOpen feeds arbitrary stored blobs and secrets to Open, which decodes
// what a joining server fetches from the cluster: it never panics, errors
// say "bootstrap data" or name the token, and whatever it accepts holds only
// shared files.
func FuzzOpen(f *testing.F) {
	good, err := Data{ServerCAFile: []byte("ca"), "tls/sa.key": []byte("k")}.Seal("0123456789abcdef")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good, "0123456789abcdef")
	f.Add(good, "another-secret-0000")
	f.Add(good[:len(good)/2], "0123456789abcdef")
	for _, s := range []string{`{}`, `{"version":1}`, `{"version":2}`, `{"version":1,"nonce":"AAAA"}`,
		`{"version":1,"salt":null,"nonce":"AAAAAAAAAAAAAAAA","ciphertext":""}`, `null`, `[]`, ``, `{"version":1e99}`} {
		f.Add([]byte(s), "0123456789abcdef")
	}
	f.Fuzz(func(t *testing.T, blob []byte, secret string) {
		d, err := Open(blob, secret)
		if err != nil {
			if msg := err.Error(); !strings.Contains(msg, "bootstrap data") {
				t.Fatalf("unclear error: %v", err)
			}
			return
		}
		for rel := range d {
			found := false
			for _, s := range SharedFiles {
				found = found || s == rel
			}
			if !found {
				t.Fatalf("accepted unexpected file %q", rel)
			}
		}
	})
}

// FuzzSealOpen checks the round trip: what Seal makes with a secret, Open
// with the same secret returns unchanged; with another secret it refuses.
func FuzzSealOpen(f *testing.F) {
	f.Add("0123456789abcdef", "other-secret-000", uint8(0), []byte("-----BEGIN CERTIFICATE-----\n"))
	f.Add("", "x", uint8(10), []byte{})
	f.Add("s", "s2", uint8(255), []byte{0, 1, 2, 0xff})
	f.Fuzz(func(t *testing.T, secret, other string, file uint8, content []byte) {
		d := Data{SharedFiles[int(file)%len(SharedFiles)]: content, ServerCAFile: []byte("ca")}
		blob, err := d.Seal(secret)
		if err != nil {
			t.Fatalf("Seal: %v", err)
		}
		got, err := Open(blob, secret)
		if err != nil {
			t.Fatalf("Open with the sealing secret: %v", err)
		}
		if len(got) != len(d) {
			t.Fatalf("Open returned %d files, want %d", len(got), len(d))
		}
		for k, v := range d {
			if !bytes.Equal(got[k], v) {
				t.Fatalf("%s: %q, want %q", k, got[k], v)
			}
		}
		if other != secret {
			if _, err := Open(blob, other); err == nil || !strings.Contains(err.Error(), "not this cluster's token") {
				t.Fatalf("Open with another secret: %v", err)
			}
		}
	})
}

var bootstrapTokenRE = regexp.MustCompile(`^[a-z0-9]{6}\.[a-z0-9]{16}$`)

// FuzzBootstrapToken checks that every join secret yields a well-formed
// Kubernetes bootstrap token ("[a-z0-9]{6}.[a-z0-9]{16}"), the same each time.
func FuzzBootstrapToken(f *testing.F) {
	for _, s := range []string{"", "0123456789abcdef", "ünïcödé-secret-000", strings.Repeat("x", 4096)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, secret string) {
		id, tok := BootstrapToken(secret)
		if !bootstrapTokenRE.MatchString(id + "." + tok) {
			t.Fatalf("BootstrapToken(%q) = %q.%q", secret, id, tok)
		}
		if id2, tok2 := BootstrapToken(secret); id2 != id || tok2 != tok {
			t.Fatalf("BootstrapToken(%q) not deterministic", secret)
		}
	})
}
