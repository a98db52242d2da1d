package certs

import (
	"bytes"
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// TestEnsureNodeServing: the server's own node's serving certificate is
// minted from the kubelet-serving CA (never the server CA), for the node's
// names, kept while current, and re-issued on the same key when it is due,
// names change, or it does not verify against the kubelet-serving CA.
func TestEnsureNodeServing(t *testing.T) {
	ips := []net.IP{net.ParseIP("192.168.1.20"), net.ParseIP("fd00::20")}
	dns := []string{"Edge-1"}
	tests := []struct {
		name string
		// before changes the files (or the clock) after a first call; it
		// returns the time of the second call.
		before   func(t *testing.T, p *PKI, kp KeyPair) time.Time
		dns      []string
		reissued bool
		newKey   bool
	}{
		{name: "current: kept", before: func(*testing.T, *PKI, KeyPair) time.Time { return base.Add(200 * 24 * time.Hour) }},
		{name: "a third of its life left: renewed", reissued: true,
			before: func(*testing.T, *PKI, KeyPair) time.Time { return base.Add(245 * 24 * time.Hour) }},
		{name: "other names: re-issued", dns: []string{"edge-1", "edge-1.example"}, reissued: true},
		{name: "signed by the server CA: re-issued", reissued: true, before: func(t *testing.T, p *PKI, kp KeyPair) time.Time {
			_, key, err := LoadKeyPair(kp)
			if err != nil {
				t.Fatal(err)
			}
			caCert, caKey, err := LoadKeyPair(p.ServerCA)
			if err != nil {
				t.Fatal(err)
			}
			spec := &leafSpec{ca: &caState{cert: caCert, key: caKey}, cn: "system:node:edge-1", orgs: []string{"system:nodes"},
				dns: []string{"edge-1"}, ips: ips, usages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
			_, certPEM, err := mintLeaf(spec, key.Public(), base, leafValidity)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(kp.Cert, certPEM, 0o644); err != nil {
				t.Fatal(err)
			}
			return base
		}},
		{name: "damaged certificate: re-issued", reissued: true, before: func(t *testing.T, _ *PKI, kp KeyPair) time.Time {
			if err := os.WriteFile(kp.Cert, []byte("garbage"), 0o644); err != nil {
				t.Fatal(err)
			}
			return base
		}},
		{name: "key missing: new key", reissued: true, newKey: true, before: func(t *testing.T, _ *PKI, kp KeyPair) time.Time {
			if err := os.Remove(kp.Key); err != nil {
				t.Fatal(err)
			}
			return base
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := testContext(t)
			p := mustEnsure(t, testOptions(t))
			certDir := filepath.Join(t.TempDir(), "pki")
			certFile, keyFile, err := ensureNodeServing(ctx, p, "edge-1", dns, ips, certDir, base)
			if err != nil {
				t.Fatal(err)
			}
			kp := KeyPair{Cert: certFile, Key: keyFile}
			checkNodeServing(t, p, kp, []string{"edge-1"}, ips, base)
			if m, _ := modeOf(keyFile); m != 0o600 {
				t.Errorf("key mode %#o, want 0600", m)
			}
			first := loadCert(t, certFile)
			keyBefore, _ := os.ReadFile(keyFile)

			now := base
			if tt.before != nil {
				now = tt.before(t, p, kp)
			}
			names := dns
			if tt.dns != nil {
				names = tt.dns
			}
			if _, _, err := ensureNodeServing(ctx, p, "edge-1", names, ips, certDir, now); err != nil {
				t.Fatal(err)
			}
			second := loadCert(t, certFile)
			if reissued := !second.Equal(first); reissued != tt.reissued {
				t.Errorf("re-issued %v, want %v", reissued, tt.reissued)
			}
			keyAfter, _ := os.ReadFile(keyFile)
			if newKey := !bytes.Equal(keyBefore, keyAfter); newKey != tt.newKey {
				t.Errorf("new key %v, want %v", newKey, tt.newKey)
			}
			want := []string{"edge-1"}
			if tt.dns != nil {
				want = tt.dns
			}
			checkNodeServing(t, p, kp, want, ips, now)
		})
	}
}

// checkNodeServing checks the node serving pair kp at now: it verifies
// against the kubelet-serving CA for server auth, not against the server
// CA, and names system:node:edge-1 with dns and ips.
func checkNodeServing(t *testing.T, p *PKI, kp KeyPair, dns []string, ips []net.IP, now time.Time) {
	t.Helper()
	if _, _, err := LoadKeyPair(kp); err != nil {
		t.Fatalf("node serving pair: %v", err)
	}
	cert := loadCert(t, kp.Cert)
	if err := verifyLeaf(t, kp, p.KubeletServingCA, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, now); err != nil {
		t.Errorf("does not verify against the kubelet-serving CA: %v", err)
	}
	if err := verifyLeaf(t, kp, p.ServerCA, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, now); err == nil {
		t.Errorf("verifies against the server CA, which clients trust for the API server")
	}
	if cert.Subject.CommonName != "system:node:edge-1" || !slices.Equal(cert.Subject.Organization, []string{"system:nodes"}) {
		t.Errorf("subject %s, want CN=system:node:edge-1,O=system:nodes", cert.Subject)
	}
	if !sameStrings(cert.DNSNames, dns) || !sameStrings(ipStrings(cert.IPAddresses), ipStrings(ips)) {
		t.Errorf("names %v %v, want %v %v", cert.DNSNames, cert.IPAddresses, dns, ips)
	}
}

func TestEnsureNodeServingBadInput(t *testing.T) {
	p := mustEnsure(t, testOptions(t))
	ip := []net.IP{net.ParseIP("10.0.0.9")}
	tests := []struct {
		name string
		node string
		dns  []string
		ips  []net.IP
		want string
	}{
		{"no node", "", nil, ip, "no node name"},
		{"no names", "n1", nil, nil, "no DNS name or IP address"},
		{"an IP address as DNS name", "n1", []string{"10.0.0.9"}, nil, `"10.0.0.9" is not a DNS name`},
		{"a bad DNS name", "n1", []string{"bad name"}, nil, `"bad name" is not a DNS name`},
		{"a nil IP address", "n1", []string{"n1"}, []net.IP{nil}, "an empty IP address"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "pki")
			_, _, err := ensureNodeServing(testContext(t), p, tt.node, tt.dns, tt.ips, dir, base)
			wantErrContains(t, err, tt.want)
			if _, err := os.Stat(dir); !os.IsNotExist(err) {
				t.Errorf("bad input wrote %s", dir)
			}
		})
	}
}

// writeKubeletServerStore writes what the kubelet's certificate manager
// keeps for a serving certificate it got by CSR: kubelet-server-<time>.pem
// (certificate and key) and the kubelet-server-current.pem link to it.
func writeKubeletServerStore(t *testing.T, dir string, ca KeyPair) string {
	t.Helper()
	caCert, caKey, err := LoadKeyPair(ca)
	if err != nil {
		t.Fatal(err)
	}
	key, keyPEM, err := newKey()
	if err != nil {
		t.Fatal(err)
	}
	spec := &leafSpec{ca: &caState{cert: caCert, key: caKey}, cn: "system:node:n1", orgs: []string{"system:nodes"},
		ips: []net.IP{net.ParseIP("10.0.0.9")}, usages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	_, certPEM, err := mintLeaf(spec, key.Public(), base, leafValidity)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "kubelet-server-2026-03-01-12-00-00.pem")
	if err := os.WriteFile(file, append(certPEM, keyPEM...), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(file, filepath.Join(dir, kubeletServerCurrent)); err != nil {
		t.Fatal(err)
	}
	return file
}

// TestDropForeignKubeletServing: before the kubelet starts, a serving
// certificate it got from the server CA is removed (the kubelet then asks
// for one from the kubelet-serving CA); one from the kubelet-serving CA is
// kept.
func TestDropForeignKubeletServing(t *testing.T) {
	p := mustEnsure(t, testOptions(t))
	kubeletCA, err := os.ReadFile(p.KubeletServingCA.Cert)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		signer  *KeyPair // nil: no certificate
		caPEM   []byte
		dropped bool
		wantErr string
	}{
		{name: "from the server CA", signer: &p.ServerCA, caPEM: kubeletCA, dropped: true},
		{name: "from the kubelet-serving CA", signer: &p.KubeletServingCA, caPEM: kubeletCA},
		{name: "none yet", caPEM: kubeletCA},
		{name: "no CA given", signer: &p.ServerCA, caPEM: []byte("not a certificate"), wantErr: "kubelet-serving CA"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			var file string
			if tt.signer != nil {
				file = writeKubeletServerStore(t, dir, *tt.signer)
			}
			dropped, err := DropForeignKubeletServing(testContext(t), dir, tt.caPEM)
			if tt.wantErr != "" {
				wantErrContains(t, err, tt.wantErr)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if dropped != tt.dropped {
				t.Errorf("dropped %v, want %v", dropped, tt.dropped)
			}
			if file == "" {
				return
			}
			for _, f := range []string{file, filepath.Join(dir, kubeletServerCurrent)} {
				if _, err := os.Lstat(f); os.IsNotExist(err) != tt.dropped {
					t.Errorf("%s: removed %v, want %v", filepath.Base(f), os.IsNotExist(err), tt.dropped)
				}
			}
		})
	}
}
