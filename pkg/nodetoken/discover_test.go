package nodetoken

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
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	bootstrapapi "k8s.io/cluster-bootstrap/token/api"
	"k8s.io/cluster-bootstrap/token/jws"

	"github.com/edgeplane/edgeplane/pkg/join"
)

// clusterInfoServer serves a cluster-info ConfigMap at the anonymous path
// over TLS; data builds its data for the n-th request (from 1).
func clusterInfoServer(t *testing.T, data func(srv *httptest.Server, n int) map[string]string) *httptest.Server {
	t.Helper()
	var n atomic.Int32
	var srv *httptest.Server
	srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != clusterInfoPath || r.Header.Get("Authorization") != "" {
			http.Error(w, "forbidden", http.StatusForbidden)
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"data": data(srv, int(n.Add(1)))})
	}))
	t.Cleanup(srv.Close)
	return srv
}

// certPEM is the PEM of srv's self-signed certificate, its CA here.
func certPEM(srv *httptest.Server) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
}

// newCAPEM is a fresh self-signed CA certificate.
func newCAPEM(t *testing.T) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "other-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func kubeconfigWithCA(t *testing.T, server string, ca []byte) string {
	cfg := clientcmdapi.Config{Clusters: map[string]*clientcmdapi.Cluster{"": {Server: server, CertificateAuthorityData: ca}}}
	b, err := clientcmd.Write(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func signed(t *testing.T, kubeconfig, id, secret string) map[string]string {
	sig, err := jws.ComputeDetachedSignature(kubeconfig, id, secret)
	if err != nil {
		t.Fatal(err)
	}
	return map[string]string{bootstrapapi.KubeConfigKey: kubeconfig, bootstrapapi.JWSSignatureKeyPrefix + id: sig}
}

func TestNodeTokenDiscoverVerification(t *testing.T) {
	signatureWait = 500 * time.Millisecond
	t.Cleanup(func() { signatureWait = 5 * time.Second })
	tok := Token{ID: "abcdef", Secret: "0123456789abcdef"}
	otherCA := newCAPEM(t)

	// Each case serves cluster-info and says how the token is pinned.
	for _, tc := range []struct {
		name string
		data func(t *testing.T, srv *httptest.Server, n int) map[string]string
		pin  func(t *testing.T, srv *httptest.Server) Token
		// wantErr is a sentinel or, with nil, a substring of the error.
		wantErr  error
		wantText string
	}{
		{
			name: "signed, CA file hash pin",
			data: func(t *testing.T, srv *httptest.Server, _ int) map[string]string {
				return signed(t, kubeconfigWithCA(t, srv.URL, certPEM(srv)), tok.ID, tok.Secret)
			},
			pin: func(_ *testing.T, srv *httptest.Server) Token {
				p := tok
				p.CAHash = join.CAHash(certPEM(srv))
				return p
			},
		},
		{
			name: "signed, kubeadm SPKI pin",
			data: func(t *testing.T, srv *httptest.Server, _ int) map[string]string {
				return signed(t, kubeconfigWithCA(t, srv.URL, certPEM(srv)), tok.ID, tok.Secret)
			},
			pin: func(t *testing.T, srv *httptest.Server) Token {
				h, err := SPKIHash(certPEM(srv))
				if err != nil {
					t.Fatal(err)
				}
				p, err := tok.WithCAPin(h)
				if err != nil {
					t.Fatal(err)
				}
				return p
			},
		},
		{
			name: "wrong CA file hash",
			data: func(t *testing.T, srv *httptest.Server, _ int) map[string]string {
				return signed(t, kubeconfigWithCA(t, srv.URL, certPEM(srv)), tok.ID, tok.Secret)
			},
			pin:     func(*testing.T, *httptest.Server) Token { p := tok; p.CAHash = hashA; return p },
			wantErr: ErrCAMismatch, wantText: hashA,
		},
		{
			name: "wrong SPKI pin",
			data: func(t *testing.T, srv *httptest.Server, _ int) map[string]string {
				return signed(t, kubeconfigWithCA(t, srv.URL, certPEM(srv)), tok.ID, tok.Secret)
			},
			pin:     func(*testing.T, *httptest.Server) Token { p := tok; p.SPKIHash = hashB; return p },
			wantErr: ErrCAMismatch, wantText: hashB,
		},
		{
			name: "no signature for the token ID",
			data: func(t *testing.T, srv *httptest.Server, _ int) map[string]string {
				return signed(t, kubeconfigWithCA(t, srv.URL, certPEM(srv)), "zzzzzz", tok.Secret)
			},
			pin: func(_ *testing.T, srv *httptest.Server) Token {
				p := tok
				p.CAHash = join.CAHash(certPEM(srv))
				return p
			},
			wantErr: ErrTokenUnknown, wantText: "edgeplane token list",
		},
		{
			name: "signed with another secret",
			data: func(t *testing.T, srv *httptest.Server, _ int) map[string]string {
				return signed(t, kubeconfigWithCA(t, srv.URL, certPEM(srv)), tok.ID, "ffffffffffffffff")
			},
			pin: func(_ *testing.T, srv *httptest.Server) Token {
				p := tok
				p.CAHash = join.CAHash(certPEM(srv))
				return p
			},
			wantErr: ErrBadSignature,
		},
		{
			name: "cluster-info changes between the two reads",
			data: func(t *testing.T, srv *httptest.Server, n int) map[string]string {
				return signed(t, kubeconfigWithCA(t, srv.URL+strings.Repeat("/", n), certPEM(srv)), tok.ID, tok.Secret)
			},
			pin: func(_ *testing.T, srv *httptest.Server) Token {
				p := tok
				p.CAHash = join.CAHash(certPEM(srv))
				return p
			},
			wantText: "changed between",
		},
		{
			name: "pinned CA did not sign the server's certificate",
			data: func(t *testing.T, srv *httptest.Server, _ int) map[string]string {
				return signed(t, kubeconfigWithCA(t, srv.URL, otherCA), tok.ID, tok.Secret)
			},
			pin:      func(*testing.T, *httptest.Server) Token { p := tok; p.CAHash = join.CAHash(otherCA); return p },
			wantText: "certificate the cluster CA did not sign",
		},
		{
			name:     "token without a pin",
			data:     func(*testing.T, *httptest.Server, int) map[string]string { return nil },
			pin:      func(*testing.T, *httptest.Server) Token { return tok },
			wantText: "pins no CA",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := clusterInfoServer(t, func(srv *httptest.Server, n int) map[string]string { return tc.data(t, srv, n) })
			ca, err := Discover(context.Background(), srv.URL, tc.pin(t, srv))
			if tc.wantErr == nil && tc.wantText == "" {
				if err != nil {
					t.Fatalf("Discover: %v", err)
				}
				if string(ca) != string(certPEM(srv)) {
					t.Fatalf("Discover returned another CA:\n%s", ca)
				}
				return
			}
			if err == nil {
				t.Fatalf("Discover succeeded, want an error")
			}
			if tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
				t.Errorf("Discover: %v, want errors.Is %v", err, tc.wantErr)
			}
			if !strings.Contains(err.Error(), tc.wantText) {
				t.Errorf("Discover: %v, want it to say %q", err, tc.wantText)
			}
			if errors.Is(err, ErrUnreachable) {
				t.Errorf("Discover: %v is marked retryable", err)
			}
			if tc.wantErr == ErrCAMismatch && !strings.Contains(err.Error(), "server's CA") {
				t.Errorf("a mismatch should name the server's hash too: %v", err)
			}
		})
	}
}

func TestNodeTokenDiscoverUnreachable(t *testing.T) {
	srv := httptest.NewTLSServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	tok := Token{ID: "abcdef", Secret: "0123456789abcdef", CAHash: hashA}
	for _, tc := range []struct {
		name string
		url  string
		want error
	}{
		{"connection refused", url, ErrUnreachable},
		{"not https", strings.Replace(url, "https", "http", 1), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Discover(context.Background(), tc.url, tok)
			if err == nil {
				t.Fatal("Discover succeeded")
			}
			if got := errors.Is(err, ErrUnreachable); got != (tc.want != nil) {
				t.Fatalf("Discover: %v; retryable = %v, want %v", err, got, tc.want != nil)
			}
		})
	}
}
