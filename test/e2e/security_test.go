package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// TestSecurityDefaults checks the security defaults as an outsider and as a
// node would meet them.
func TestSecurityDefaults(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the real server")
	}
	parallel(t)
	dir := t.TempDir()
	s := startServer(t, dir)
	ctx := context.Background()

	t.Run("anonymous requests reach only health endpoints", func(t *testing.T) {
		c := httpClient(t, s, nil)
		for path, want := range map[string]int{
			"/readyz": 200, "/livez": 200, "/healthz": 200,
			"/api": 401, "/apis": 401, "/metrics": 401, "/openapi/v2": 401, "/version": 401,
			"/api/v1/secrets": 401, "/debug/pprof/": 401, "/logs/": 401,
		} {
			if got := get(t, c, s.config.Host+path); got != want {
				t.Errorf("anonymous GET %s = %d, want %d", path, got, want)
			}
		}
	})

	t.Run("profiling is off", func(t *testing.T) {
		raw, err := s.client.CoreV1().RESTClient().Get().AbsPath("/debug/pprof/").DoRaw(ctx)
		if err == nil || !apierrors.IsNotFound(err) {
			t.Errorf("GET /debug/pprof/ as admin: %v (%d bytes), want 404", err, len(raw))
		}
	})

	t.Run("a client certificate from another CA is refused", func(t *testing.T) {
		certPEM, keyPEM := futureCA(t, time.Now().Add(-time.Hour))
		pair, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			t.Fatal(err)
		}
		if got := get(t, httpClient(t, s, &pair), s.config.Host+"/api/v1/namespaces"); got != 401 {
			t.Errorf("foreign client cert got %d, want 401", got)
		}
	})

	t.Run("files on disk", func(t *testing.T) {
		if mode := stat(t, dir).Mode().Perm(); mode != 0o700 {
			t.Errorf("data dir mode %o, want 700", mode)
		}
		if mode := stat(t, filepath.Join(dir, "admin.kubeconfig")).Mode().Perm(); mode&0o077 != 0 {
			t.Errorf("admin.kubeconfig mode %o is readable by others", mode)
		}
		err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if strings.HasSuffix(path, ".key") || strings.HasSuffix(path, ".kubeconfig") {
				if mode := stat(t, path).Mode().Perm(); mode != 0o600 {
					t.Errorf("%s mode %o, want 600", path, mode)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if info := stat(t, filepath.Join(dir, "db", "kine.sock")); info.Mode()&os.ModeSocket == 0 || info.Mode().Perm()&0o077 != 0 {
			t.Errorf("kine socket %v, want a socket only its owner can use", info.Mode())
		}
	})

	t.Run("a node cannot modify another node", func(t *testing.T) {
		nodeA := nodeClient(t, s, dir, "edge-a")
		for _, name := range []string{"edge-a", "edge-b"} {
			node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.NodeStatus{
				Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")},
			}}
			if _, err := s.client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		// A patch, not a read-modify-update: the node lifecycle controller
		// taints new Nodes at any moment, and NodeRestriction refuses an
		// update that would drop a taint before the conflict check runs.
		labels := func(k, v string) []byte { return []byte(fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, k, v)) }
		if _, err := nodeA.CoreV1().Nodes().Patch(ctx, "edge-a", types.MergePatchType, labels("edge", "a"), metav1.PatchOptions{}); err != nil {
			t.Fatalf("node edge-a labelling itself: %v", err)
		}
		if _, err := nodeA.CoreV1().Nodes().Patch(ctx, "edge-b", types.MergePatchType, labels("taken", "over"), metav1.PatchOptions{}); !apierrors.IsForbidden(err) {
			t.Fatalf("node edge-a labelling edge-b: %v, want Forbidden", err)
		}
		if err := nodeA.CoreV1().Nodes().Delete(ctx, "edge-b", metav1.DeleteOptions{}); !apierrors.IsForbidden(err) {
			t.Fatalf("node edge-a deleting edge-b: %v, want Forbidden", err)
		}
		if _, err := nodeA.CoreV1().Secrets("kube-system").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
			t.Fatalf("node edge-a listing secrets: %v, want Forbidden", err)
		}
	})
	s.stop()
}

func stat(t *testing.T, path string) os.FileInfo {
	t.Helper()
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return info
}

// httpClient trusts the server's CA and presents cert when given.
func httpClient(t *testing.T, s *server, cert *tls.Certificate) *http.Client {
	t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(s.config.CAData) {
		t.Fatal("kubeconfig holds no CA")
	}
	cfg := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
}

func get(t *testing.T, c *http.Client, url string) int {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	_ = resp.Body.Close()
	return resp.StatusCode
}

// nodeClient signs a kubelet-style client certificate (system:node:<name>,
// group system:nodes) with the cluster's client CA, as the CSR signer would.
func nodeClient(t *testing.T, s *server, dataDir, name string) kubernetes.Interface {
	t.Helper()
	caCert := parseCert(t, readFile(t, filepath.Join(dataDir, "tls", "client-ca.crt")))
	block, _ := pem.Decode([]byte(readFile(t, filepath.Join(dataDir, "tls", "client-ca.key"))))
	if block == nil {
		t.Fatal("client-ca.key holds no PEM")
	}
	caKey, err := x509.ParseECPrivateKey(block.Bytes)
	if err != nil {
		key, perr := x509.ParsePKCS8PrivateKey(block.Bytes)
		if perr != nil {
			t.Fatalf("parse client CA key: %v / %v", err, perr)
		}
		caKey = key.(*ecdsa.PrivateKey)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: "system:node:" + name, Organization: []string{"system:nodes"}},
		NotBefore:    time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	cfg := &rest.Config{
		Host: s.config.Host,
		TLSClientConfig: rest.TLSClientConfig{
			CAData:   s.config.CAData,
			CertData: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
			KeyData:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
		},
	}
	return kubernetes.NewForConfigOrDie(cfg)
}

func parseCert(t *testing.T, pemText string) *x509.Certificate {
	t.Helper()
	block, _ := pem.Decode([]byte(pemText))
	if block == nil {
		t.Fatal("no PEM certificate")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}
