package node

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// selfSigned is a PEM certificate valid from notBefore to notAfter, with
// its key in the same PEM, as the kubelet's store keeps them.
func selfSigned(t *testing.T, notBefore, notAfter time.Time) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "system:node:n"}, NotBefore: notBefore, NotAfter: notAfter}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return append(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})...)
}

// TestLoadCredentials: what a node's directory holds decides between
// starting from the credentials, joining again, and an error that names
// the file: a corrupt certificate or kubeconfig is never taken for "no
// credentials" (which would silently fall back to the token).
func TestLoadCredentials(t *testing.T) {
	now := time.Now()
	for _, tc := range []struct {
		name       string
		kubeconfig string // "" writes none; %CERT% is the certificate file
		cert       []byte
		want       credState
		wantErr    string
	}{
		{name: "fresh: no kubeconfig", want: credNone},
		{name: "current certificate", kubeconfig: kubeconfigWith("%CERT%"), cert: selfSigned(t, now.Add(-time.Hour), now.Add(time.Hour)), want: credValid},
		{name: "expired certificate", kubeconfig: kubeconfigWith("%CERT%"), cert: selfSigned(t, now.Add(-2*time.Hour), now.Add(-time.Hour)), want: credExpired},
		{name: "certificate from the future: the clock", kubeconfig: kubeconfigWith("%CERT%"), cert: selfSigned(t, now.Add(time.Hour), now.Add(2*time.Hour)), wantErr: "set the clock"},
		{name: "corrupt certificate", kubeconfig: kubeconfigWith("%CERT%"), cert: []byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"), wantErr: "to join again with the node token"},
		{name: "not a certificate", kubeconfig: kubeconfigWith("%CERT%"), cert: []byte("hello"), wantErr: "no PEM certificate"},
		{name: "certificate file missing", kubeconfig: kubeconfigWith("%CERT%"), wantErr: "no such file"},
		{name: "kubeconfig does not parse", kubeconfig: "{{{", wantErr: "does not parse"},
		{name: "kubeconfig without a client certificate", kubeconfig: "apiVersion: v1\nkind: Config\n", wantErr: "names no client certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := PathsIn(t.TempDir())
			certFile := filepath.Join(p.Dir, "cert.pem")
			if tc.cert != nil {
				if err := os.WriteFile(certFile, tc.cert, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			if tc.kubeconfig != "" {
				if err := os.WriteFile(p.Kubeconfig, []byte(strings.ReplaceAll(tc.kubeconfig, "%CERT%", certFile)), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			got, err := loadCredentials(p, now)
			switch {
			case tc.wantErr != "":
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("loadCredentials = %v, %v; want an error containing %q", got, err, tc.wantErr)
				}
			case err != nil:
				t.Fatal(err)
			case got != tc.want:
				t.Fatalf("loadCredentials = %v, want %v", got, tc.want)
			}
		})
	}
}

func kubeconfigWith(certFile string) string {
	return `apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: "https://127.0.0.1:6443"}
users:
- name: u
  user: {client-certificate: "` + certFile + `", client-key: "` + certFile + `"}
contexts:
- name: x
  context: {cluster: c, user: u}
current-context: x
`
}
