package certs

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzParseSAN feeds --tls-san values to parseSAN, which also guards
// Options. An accepted IP round-trips through its string form; an accepted
// DNS name is lower case, has no trailing dot, is accepted again as itself
// and fits the 253/63-character DNS limits.
func FuzzParseSAN(f *testing.F) {
	for _, s := range []string{
		"10.0.0.5", "::1", "[::1]", "[fd00::1]", "edge.example.com", "EDGE.example.com.", "*.example.com",
		"*.", "a_b.example", "-a.example", "a..b", strings.Repeat("a", 64) + ".com", " node1 ", "1.2.3.4.5",
		"::ffff:1.2.3.4", "fe80::1%eth0", "", "é.example", "xn--bcher-kva.example",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		ip, dns, err := parseSAN(v)
		switch {
		case err != nil:
			if ip != nil || dns != "" {
				t.Fatalf("%q: error %v with a result", v, err)
			}
		case ip != nil:
			if back := net.ParseIP(ip.String()); !back.Equal(ip) {
				t.Fatalf("%q: IP %v does not round-trip", v, ip)
			}
		case dns != "":
			if dns != strings.ToLower(dns) || strings.HasSuffix(dns, ".") || len(dns) > 253 {
				t.Fatalf("%q: accepted DNS name %q", v, dns)
			}
			for _, l := range strings.Split(strings.TrimPrefix(dns, "*."), ".") {
				if l == "" || len(l) > 63 {
					t.Fatalf("%q: accepted DNS name %q with label %q", v, dns, l)
				}
			}
			if ip2, dns2, err := parseSAN(dns); err != nil || ip2 != nil || dns2 != dns {
				t.Fatalf("%q: %q is not accepted as itself: %v %v %v", v, dns, ip2, dns2, err)
			}
		default:
			if strings.TrimSpace(v) != "" {
				t.Fatalf("%q: neither IP, name nor error", v)
			}
		}
	})
}

// FuzzParsePEM feeds arbitrary file contents to the certificate and key
// parsers Ensure, Inspect and LoadKeyPair use on files in <data-dir>/tls:
// they fail with an error naming the file or return a usable value, never
// panic.
func FuzzParsePEM(f *testing.F) {
	o := Options{Dir: filepath.Join(f.TempDir(), "tls"), Hostname: "node1", APIServerPort: 6443, Now: clock(base)}
	p, err := Ensure(context.Background(), o)
	if err != nil {
		f.Fatal(err)
	}
	for _, path := range []string{p.ServerCA.Cert, p.ServerCA.Key, p.Admin.Cert, p.ServiceAccountKey, p.ServiceAccountPub} {
		b, err := os.ReadFile(path)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
		f.Add(b[:len(b)/2])
	}
	f.Add([]byte("-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n"))
	f.Add([]byte("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"))
	f.Add([]byte{})
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(dir, "fuzz.pem")
		cert, err := parseCertPEM(path, data)
		if err != nil && !strings.Contains(err.Error(), path) {
			t.Fatalf("certificate error does not name the file: %v", err)
		}
		if err == nil && cert == nil {
			t.Fatal("no certificate and no error")
		}
		key, err := parseKeyPEM(path, data)
		if err != nil && !strings.Contains(err.Error(), path) {
			t.Fatalf("key error does not name the file: %v", err)
		}
		if err == nil && (key == nil || key.Public() == nil) {
			t.Fatal("no key and no error")
		}
	})
}
