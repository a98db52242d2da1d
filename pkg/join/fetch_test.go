package join

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// testCA returns a self-signed CA certificate in PEM.
func testCA(t *testing.T) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// TestFetchRefuses covers what a joining server must refuse. The server in
// these tests presents httptest's own certificate, not one of the cluster CA,
// as an impostor that copied the sealed data would.
func TestFetchRefuses(t *testing.T) {
	const secret = "0123456789abcdef-cluster"
	ca := testCA(t)
	sealed, err := Data{ServerCAFile: ca}.Seal(secret)
	if err != nil {
		t.Fatal(err)
	}
	id, tokSecret := BootstrapToken(secret)
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+id+"."+tokSecret {
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"data": map[string][]byte{keySealed: sealed, keyEtcdEndpoints: []byte("https://10.0.0.1:2379")}})
	}))
	defer srv.Close()

	tests := []struct {
		name    string
		token   Token
		server  string
		wantErr string
	}{
		{name: "impostor with the sealed data", token: Token{CAHash: CAHash(ca), Secret: secret}, server: srv.URL, wantErr: "is not a server of the cluster"},
		{name: "token pins another CA", token: Token{CAHash: CAHash([]byte("other")), Secret: secret}, server: srv.URL, wantErr: "does not match the token"},
		{name: "wrong secret", token: Token{Secret: "another-secret-0123"}, server: srv.URL, wantErr: "refused the token"},
		{name: "plain http", token: Token{Secret: secret}, server: "http://127.0.0.1:1", wantErr: "want https://host:port"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			f, err := Fetch(ctx, tc.server, tc.token)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Fetch = %+v, %v; want error containing %q", f, err, tc.wantErr)
			}
		})
	}
}

func TestBootstrapToken(t *testing.T) {
	id, sec := BootstrapToken("0123456789abcdef")
	id2, sec2 := BootstrapToken("0123456789abcdef")
	if len(id) != 6 || len(sec) != 16 || id != id2 || sec != sec2 {
		t.Fatalf("BootstrapToken = %q.%q, then %q.%q", id, sec, id2, sec2)
	}
	if other, _ := BootstrapToken("fedcba9876543210"); other == id {
		t.Fatal("different secrets give the same token id")
	}
	if strings.Trim(id+sec, tokenAlphabet) != "" {
		t.Fatalf("token %s.%s has characters outside [a-z0-9]", id, sec)
	}
}

// TestFetchErrorKinds: the errors a joining server may wait out are marked
// ErrTokenRefused or ErrUnavailable; the others are final.
func TestFetchErrorKinds(t *testing.T) {
	status := func(code int) *httptest.Server {
		srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, http.StatusText(code), code)
		}))
		t.Cleanup(srv.Close)
		return srv
	}
	plain := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(plain.Close)
	closed := httptest.NewTLSServer(http.NotFoundHandler())
	closedURL := closed.URL
	closed.Close()

	tests := []struct {
		name   string
		server string
		want   error // nil: neither sentinel
	}{
		{"401", status(http.StatusUnauthorized).URL, ErrTokenRefused},
		{"403", status(http.StatusForbidden).URL, ErrTokenRefused},
		{"503", status(http.StatusServiceUnavailable).URL, ErrUnavailable},
		{"429", status(http.StatusTooManyRequests).URL, ErrUnavailable},
		{"nothing listens", closedURL, ErrUnavailable},
		{"404", status(http.StatusNotFound).URL, nil},
		{"not a TLS server", "https://" + plain.Listener.Addr().String(), nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, err := Fetch(ctx, tc.server, Token{Secret: "0123456789abcdef-cluster"})
			if err == nil {
				t.Fatal("Fetch succeeded")
			}
			for _, sentinel := range []error{ErrTokenRefused, ErrUnavailable} {
				if got := errors.Is(err, sentinel); got != (sentinel == tc.want) {
					t.Errorf("errors.Is(%q, %q) = %v", err, sentinel, got)
				}
			}
		})
	}
}
