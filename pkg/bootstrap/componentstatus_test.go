package bootstrap

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/kubernetes/pkg/probe"
	"k8s.io/kubernetes/pkg/registry/core/componentstatus"

	"github.com/edgeplane/edgeplane/pkg/certs"
)

// testServingPair writes a self-signed serving pair for 127.0.0.1.
func testServingPair(t *testing.T) certs.KeyPair {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "health"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	kp := certs.KeyPair{Cert: filepath.Join(dir, "serving.crt"), Key: filepath.Join(dir, "serving.key")}
	if err := os.WriteFile(kp.Cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(kp.Key, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	return kp
}

// TestHealthEndpoints probes the endpoints with upstream's own ComponentStatus
// prober, the code behind `kubectl get componentstatuses`.
func TestHealthEndpoints(t *testing.T) {
	ctx := context.Background()
	broken := errors.New("leader election lost")
	h := newHealthEndpoints(testServingPair(t), map[string]func(*http.Request) error{
		componentControllerManager: func(*http.Request) error { return nil },
		componentScheduler:         func(*http.Request) error { return broken },
	})
	h.ports = map[string]int{componentControllerManager: 0, componentScheduler: 0}
	if err := h.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Stop(ctx) })

	for _, tc := range []struct {
		component  string
		want       probe.Result
		wantDetail string
	}{
		{componentControllerManager, probe.Success, "ok"},
		{componentScheduler, probe.Failure, "statuscode: 500"},
	} {
		t.Run(tc.component, func(t *testing.T) {
			host, port, err := net.SplitHostPort(h.addrs[tc.component])
			if err != nil {
				t.Fatalf("no address for %s: %v", tc.component, err)
			}
			p, _ := strconv.Atoi(port)
			prober := &componentstatus.HttpServer{EnableHTTPS: true, TLSConfig: &tls.Config{InsecureSkipVerify: true}, Addr: host, Port: p, Path: "/healthz"}
			result, detail, err := prober.DoServerCheck()
			if result != tc.want || !strings.Contains(detail+errString(err), tc.wantDetail) {
				t.Fatalf("probe = %v %q %v, want %v with %q", result, detail, err, tc.want, tc.wantDetail)
			}
		})
	}

	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	base := "https://" + h.addrs[componentControllerManager]
	for _, tc := range []struct {
		method, path string
		want         int
	}{
		{http.MethodGet, "/livez", http.StatusOK},
		{http.MethodGet, "/readyz", http.StatusOK},
		{http.MethodGet, "/metrics", http.StatusNotFound},
		{http.MethodGet, "/debug/pprof/", http.StatusNotFound},
		{http.MethodPost, "/healthz", http.StatusMethodNotAllowed},
	} {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			req, err := http.NewRequest(tc.method, base+tc.path, nil)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Fatalf("%s %s: %d, want %d", tc.method, tc.path, resp.StatusCode, tc.want)
			}
		})
	}

	// The failing component's error is in the body, as upstream's healthz has it.
	resp, err := client.Get("https://" + h.addrs[componentScheduler] + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusInternalServerError || !strings.Contains(string(body), "leader election lost") {
		t.Fatalf("scheduler /healthz: %d %q, want 500 naming the error", resp.StatusCode, body)
	}

	if err := h.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := h.Stop(ctx); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	if _, err := net.DialTimeout("tcp", h.addrs[componentControllerManager], time.Second); err == nil {
		t.Fatal("the health port still accepts connections after Stop")
	}
}

// TestHealthEndpointsPortTaken: a port another process holds, or one that
// cannot be bound at all, is skipped, the others are served, and Start does
// not fail.
func TestHealthEndpointsPortTaken(t *testing.T) {
	ctx := context.Background()
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = taken.Close() })
	kp := testServingPair(t)
	checks := map[string]func(*http.Request) error{
		componentControllerManager: func(*http.Request) error { return nil },
		componentScheduler:         func(*http.Request) error { return nil },
	}
	for _, tc := range []struct {
		name string
		port int
	}{
		{"port taken", taken.Addr().(*net.TCPAddr).Port},
		{"port out of range", 70000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHealthEndpoints(kp, checks)
			h.ports = map[string]int{componentControllerManager: tc.port, componentScheduler: 0}
			if err := h.Start(ctx); err != nil {
				t.Fatalf("Start: %v", err)
			}
			t.Cleanup(func() { _ = h.Stop(ctx) })
			if _, ok := h.addrs[componentControllerManager]; ok {
				t.Error("the unusable port is listed as served")
			}
			if _, ok := h.addrs[componentScheduler]; !ok {
				t.Error("the free port is not served")
			}
		})
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
